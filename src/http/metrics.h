// Prometheus metrics: counters, gauges and histograms with labels, rendered in the text
// exposition format (version 0.0.4) for a /metrics endpoint.
//
//   Metrics m;
//   Counter& reaped = m.AddCounter("airlock_reaper_actions_total", "Reaper actions", {"action"});
//   reaped.Inc({"kill_shim"});
//   std::string text = m.Render();
//
// Metric objects live as long as their Metrics; every method is thread-safe.
#ifndef AIRLOCK_HTTP_METRICS_H_
#define AIRLOCK_HTTP_METRICS_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace airlock::http {

using LabelValues = std::vector<std::string>;

class Counter {
 public:
  void Inc(const LabelValues& labels = {}, double by = 1);
  double Value(const LabelValues& labels = {}) const;

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::map<LabelValues, double> values_;
};

class Gauge {
 public:
  void Set(const LabelValues& labels, double value);
  // Replaces every series with `values` (e.g. sandboxes by state, recomputed on each scrape).
  void SetAll(std::map<LabelValues, double> values);

 private:
  friend class Metrics;
  mutable std::mutex mu_;
  std::map<LabelValues, double> values_;
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)) {}
  void Observe(double value, const LabelValues& labels = {});
  uint64_t Count(const LabelValues& labels = {}) const;

 private:
  friend class Metrics;
  struct Series {
    std::vector<uint64_t> buckets;  // cumulative at render time; per bucket here
    uint64_t count = 0;
    double sum = 0;
  };
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::map<LabelValues, Series> series_;
};

class Metrics {
 public:
  Counter& AddCounter(std::string name, std::string help, std::vector<std::string> labels = {});
  Gauge& AddGauge(std::string name, std::string help, std::vector<std::string> labels = {});
  Histogram& AddHistogram(std::string name, std::string help, std::vector<double> bounds,
                          std::vector<std::string> labels = {});
  // Called at the start of every Render (to refresh gauges computed from live state).
  void OnRender(std::function<void()> refresh);

  std::string Render() const;

  // Latency buckets in seconds from 0.5 ms to 60 s.
  static std::vector<double> LatencyBuckets();

 private:
  struct Family {
    std::string name, help, type;
    std::vector<std::string> labels;
    std::unique_ptr<Counter> counter;
    std::unique_ptr<Gauge> gauge;
    std::unique_ptr<Histogram> histogram;
  };
  Family& AddFamily(std::string name, std::string help, const char* type,
                    std::vector<std::string> labels);  // mu_ held

  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
  std::vector<std::function<void()>> refresh_;
};

}  // namespace airlock::http

#endif  // AIRLOCK_HTTP_METRICS_H_
