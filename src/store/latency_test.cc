#include "store/latency.h"

#include "gtest/gtest.h"

namespace airlock::store {
namespace {

TEST(StoreLatencyRecorderTest, CountsErrorsAndFillsCumulativeBuckets) {
  StoreLatencyRecorder recorder;
  StoreObserver observe = recorder.Observer();
  observe({"sandbox.get", absl::Microseconds(50), absl::StatusCode::kOk});
  observe({"sandbox.get", absl::Microseconds(700), absl::StatusCode::kNotFound});
  observe({"sandbox.get", absl::Seconds(30), absl::StatusCode::kOk});
  observe({"audit.append", absl::Milliseconds(3), absl::StatusCode::kOk});

  std::vector<StoreLatencyRecorder::OpStats> ops = recorder.Snapshot();
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].op, "audit.append");
  const StoreLatencyRecorder::OpStats& get = ops[1];
  EXPECT_EQ(get.op, "sandbox.get");
  EXPECT_EQ(get.count, 3u);
  EXPECT_EQ(get.errors, 1u);
  EXPECT_NEAR(get.sum_seconds, 30.00075, 1e-9);
  auto bounds = StoreLatencyRecorder::BucketBounds();
  ASSERT_EQ(get.buckets.size(), bounds.size());
  for (size_t i = 0; i < bounds.size(); ++i) {
    uint64_t expected = (bounds[i] >= 50e-6 ? 1 : 0) + (bounds[i] >= 700e-6 ? 1 : 0);
    EXPECT_EQ(get.buckets[i], expected) << "le=" << bounds[i];
  }
  EXPECT_EQ(get.buckets.back(), 2u);  // the 30 s call is only in the +Inf bucket (count)
}

}  // namespace
}  // namespace airlock::store
