// Call counts and latency histograms of a Store, by operation, for the daemon's Prometheus
// /metrics ("store latency"): pass Observer() in StoreOptions and export Snapshot().
#ifndef AIRLOCK_STORE_LATENCY_H_
#define AIRLOCK_STORE_LATENCY_H_

#include <cstdint>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "store/store.h"

namespace airlock::store {

// Thread-safe.
class StoreLatencyRecorder {
 public:
  // Upper bounds of the histogram buckets in seconds (Prometheus `le`), 100 us to 10 s.
  static std::span<const double> BucketBounds();

  struct OpStats {
    std::string op;
    uint64_t count = 0;
    uint64_t errors = 0;  // calls that did not return OK
    double sum_seconds = 0;
    // Cumulative, as Prometheus wants it: buckets[i] counts calls <= BucketBounds()[i]; calls
    // above the last bound are in `count` only (the +Inf bucket).
    std::vector<uint64_t> buckets;
  };

  // An observer that records into this object, which must outlive every store using it.
  StoreObserver Observer();

  void Record(const StoreCall& call);

  // Every operation seen so far, by name.
  std::vector<OpStats> Snapshot() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, OpStats, std::less<>> ops_;
};

}  // namespace airlock::store

#endif  // AIRLOCK_STORE_LATENCY_H_
