#include "http/metrics.h"

#include "gtest/gtest.h"

namespace airlock::http {
namespace {

TEST(MetricsTest, RendersTheExpositionFormat) {
  Metrics m;
  Counter& c = m.AddCounter("airlock_reaper_actions_total", "Reaper actions.", {"action"});
  Gauge& g = m.AddGauge("airlock_sandboxes", "Sandboxes by state.", {"state"});
  Histogram& h = m.AddHistogram("airlock_exec_seconds", "Exec latency.", {0.001, 0.01});
  c.Inc({"kill_shim"});
  c.Inc({"kill_shim"});
  int refreshed = 0;
  m.OnRender([&] {
    ++refreshed;
    g.SetAll({{{"Running"}, 3}, {{"Paused"}, 1}});
  });
  h.Observe(0.0005);
  h.Observe(0.005);
  h.Observe(5);
  std::string text = m.Render();
  EXPECT_EQ(refreshed, 1);
  EXPECT_NE(text.find("# TYPE airlock_reaper_actions_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("airlock_reaper_actions_total{action=\"kill_shim\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("airlock_sandboxes{state=\"Running\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("airlock_exec_seconds_bucket{le=\"0.001\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("airlock_exec_seconds_bucket{le=\"0.01\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("airlock_exec_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("airlock_exec_seconds_count 3\n"), std::string::npos);
  EXPECT_EQ(h.Count(), 3u);
}

TEST(MetricsTest, EscapesLabelValues) {
  Metrics m;
  m.AddCounter("x_total", "x", {"l"}).Inc({"a\"b\\c\nd"});
  EXPECT_NE(m.Render().find("x_total{l=\"a\\\"b\\\\c\\nd\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace airlock::http
