#include "store/latency.h"

#include <algorithm>

namespace airlock::store {
namespace {

constexpr double kBounds[] = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                              0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};

}  // namespace

std::span<const double> StoreLatencyRecorder::BucketBounds() { return kBounds; }

StoreObserver StoreLatencyRecorder::Observer() {
  return [this](const StoreCall& call) { Record(call); };
}

void StoreLatencyRecorder::Record(const StoreCall& call) {
  const double seconds = absl::ToDoubleSeconds(call.latency);
  // The first bucket that holds the call; the later ones are filled in by Snapshot.
  const size_t bucket = static_cast<size_t>(
      std::lower_bound(std::begin(kBounds), std::end(kBounds), seconds) - std::begin(kBounds));
  std::lock_guard lock(mu_);
  auto it = ops_.find(call.op);
  if (it == ops_.end()) {
    it = ops_.emplace(std::string(call.op), OpStats{}).first;
    it->second.op = std::string(call.op);
    it->second.buckets.assign(std::size(kBounds), 0);
  }
  OpStats& stats = it->second;
  ++stats.count;
  if (call.code != absl::StatusCode::kOk) ++stats.errors;
  stats.sum_seconds += seconds;
  if (bucket < stats.buckets.size()) ++stats.buckets[bucket];
}

std::vector<StoreLatencyRecorder::OpStats> StoreLatencyRecorder::Snapshot() const {
  std::vector<OpStats> out;
  {
    std::lock_guard lock(mu_);
    for (const auto& [name, stats] : ops_) out.push_back(stats);
  }
  for (OpStats& stats : out) {
    for (size_t i = 1; i < stats.buckets.size(); ++i) stats.buckets[i] += stats.buckets[i - 1];
  }
  return out;
}

}  // namespace airlock::store
