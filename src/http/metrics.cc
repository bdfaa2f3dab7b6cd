#include "http/metrics.h"

#include <cmath>

#include "fmt/format.h"

namespace airlock::http {
namespace {

std::string Escape(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string LabelText(const std::vector<std::string>& names, const LabelValues& values,
                      const std::string& extra = "") {
  std::string out;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    if (!out.empty()) out += ',';
    out += fmt::format("{}=\"{}\"", names[i], Escape(values[i]));
  }
  if (!extra.empty()) {
    if (!out.empty()) out += ',';
    out += extra;
  }
  return out.empty() ? "" : "{" + out + "}";
}

std::string Number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

}  // namespace

void Counter::Inc(const LabelValues& labels, double by) {
  std::lock_guard lock(mu_);
  values_[labels] += by;
}

double Counter::Value(const LabelValues& labels) const {
  std::lock_guard lock(mu_);
  auto it = values_.find(labels);
  return it == values_.end() ? 0 : it->second;
}

void Gauge::Set(const LabelValues& labels, double value) {
  std::lock_guard lock(mu_);
  values_[labels] = value;
}

void Gauge::SetAll(std::map<LabelValues, double> values) {
  std::lock_guard lock(mu_);
  values_ = std::move(values);
}

void Histogram::Observe(double value, const LabelValues& labels) {
  std::lock_guard lock(mu_);
  Series& s = series_[labels];
  if (s.buckets.empty()) s.buckets.assign(bounds_.size(), 0);
  for (size_t i = 0; i < bounds_.size(); ++i) {
    if (value <= bounds_[i]) {
      ++s.buckets[i];
      break;
    }
  }
  ++s.count;
  s.sum += value;
}

uint64_t Histogram::Count(const LabelValues& labels) const {
  std::lock_guard lock(mu_);
  auto it = series_.find(labels);
  return it == series_.end() ? 0 : it->second.count;
}

Metrics::Family& Metrics::AddFamily(std::string name, std::string help, const char* type,
                                    std::vector<std::string> labels) {
  auto f = std::make_unique<Family>();
  f->name = std::move(name);
  f->help = std::move(help);
  f->type = type;
  f->labels = std::move(labels);
  families_.push_back(std::move(f));
  return *families_.back();
}

Counter& Metrics::AddCounter(std::string name, std::string help,
                             std::vector<std::string> labels) {
  std::lock_guard lock(mu_);
  Family& f = AddFamily(std::move(name), std::move(help), "counter", std::move(labels));
  f.counter = std::make_unique<Counter>();
  return *f.counter;
}

Gauge& Metrics::AddGauge(std::string name, std::string help, std::vector<std::string> labels) {
  std::lock_guard lock(mu_);
  Family& f = AddFamily(std::move(name), std::move(help), "gauge", std::move(labels));
  f.gauge = std::make_unique<Gauge>();
  return *f.gauge;
}

Histogram& Metrics::AddHistogram(std::string name, std::string help, std::vector<double> bounds,
                                 std::vector<std::string> labels) {
  std::lock_guard lock(mu_);
  Family& f = AddFamily(std::move(name), std::move(help), "histogram", std::move(labels));
  f.histogram = std::make_unique<Histogram>(std::move(bounds));
  return *f.histogram;
}

void Metrics::OnRender(std::function<void()> refresh) {
  std::lock_guard lock(mu_);
  refresh_.push_back(std::move(refresh));
}

std::vector<double> Metrics::LatencyBuckets() {
  return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30, 60};
}

std::string Metrics::Render() const {
  std::vector<std::function<void()>> refresh;
  {
    std::lock_guard lock(mu_);
    refresh = refresh_;
  }
  for (const auto& r : refresh) r();
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& f : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f->name, f->help, f->name, f->type);
    if (f->counter) {
      std::lock_guard l(f->counter->mu_);
      for (const auto& [labels, v] : f->counter->values_) {
        out += fmt::format("{}{} {}\n", f->name, LabelText(f->labels, labels), Number(v));
      }
    } else if (f->gauge) {
      std::lock_guard l(f->gauge->mu_);
      for (const auto& [labels, v] : f->gauge->values_) {
        out += fmt::format("{}{} {}\n", f->name, LabelText(f->labels, labels), Number(v));
      }
    } else if (f->histogram) {
      const Histogram& h = *f->histogram;
      std::lock_guard l(h.mu_);
      for (const auto& [labels, s] : h.series_) {
        uint64_t cumulative = 0;
        for (size_t i = 0; i < h.bounds_.size(); ++i) {
          cumulative += s.buckets[i];
          out += fmt::format(
              "{}_bucket{} {}\n", f->name,
              LabelText(f->labels, labels, fmt::format("le=\"{}\"", Number(h.bounds_[i]))),
              cumulative);
        }
        out += fmt::format("{}_bucket{} {}\n", f->name, LabelText(f->labels, labels, "le=\"+Inf\""),
                           s.count);
        out += fmt::format("{}_sum{} {}\n", f->name, LabelText(f->labels, labels), s.sum);
        out += fmt::format("{}_count{} {}\n", f->name, LabelText(f->labels, labels), s.count);
      }
    }
  }
  return out;
}

}  // namespace airlock::http
