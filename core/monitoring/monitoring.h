// Monitoring: the counters, gauges and histograms a process keeps about itself, and their
// rendering in Prometheus' text exposition format (version 0.0.4), which `tessera serve`,
// `tessera ps --metrics_port` and the coordinator's dashboard answer to a scraper.
//
//   MetricRegistry registry;
//   CounterFamily& requests = registry.AddCounter("tessera_serving_requests_total",
//                                                 "Requests answered.", {"model_name", "status"});
//   requests.With({"recsys", "OK"}).Increment();
//   HistogramFamily& latency = registry.AddHistogram(
//       "tessera_serving_request_latency_seconds", "Time to answer a request.", {"api"},
//       ExponentialBuckets(0.0001, 2, 16));
//   latency.With({"predict"}).Observe(0.0042);
//   registry.AddCollector([&](MetricWriter& out) {          // values computed at scrape time
//     out.Gauge("tessera_queue_depth", "Closures waiting.", {}, queue.size());
//   });
//   std::string page = registry.PrometheusText();
//
// Names follow Prometheus ([a-zA-Z_:][a-zA-Z0-9_:]*, labels without colons and not starting with
// "__"); adding a metric under a bad or taken name, or With() given the wrong number of label
// values, is a programming error and aborts (CHECK), as registering the same flag twice does.
// Label values are any text; they are escaped in the output.
//
// Thread-safety: every function may be called from any thread. Counters, gauges and histograms
// are updated with atomics (no lock on the hot path once a labelled child exists); PrometheusText
// takes the registry's lock and runs the collectors on the calling thread, so a collector must not
// block on something that could wait for the scraper.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace tessera {

using LabelValues = std::vector<std::string>;

class Counter {
 public:
  void Increment(double by = 1);  // `by` >= 0; a negative one is ignored
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

class Gauge {
 public:
  void Set(double value) { value_.store(value, std::memory_order_relaxed); }
  void Add(double by);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted in buckets with upper bounds `bounds` (ascending; +Inf is implicit), with
// their count and sum.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double value);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> cumulative;  // per bound, then the +Inf bucket (= count)
    double sum = 0;
  };
  Snapshot snapshot() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // bounds_.size() + 1, not cumulative
  std::atomic<double> sum_{0};
};

// `count` bounds start, start*factor, start*factor^2, ...
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Writes samples of metrics computed at scrape time (a collector's output).
class MetricWriter {
 public:
  void Counter(absl::string_view name, absl::string_view help,
               const std::vector<std::pair<std::string, std::string>>& labels, double value);
  void Gauge(absl::string_view name, absl::string_view help,
             const std::vector<std::pair<std::string, std::string>>& labels, double value);

 private:
  friend class MetricRegistry;
  void Sample(absl::string_view type, absl::string_view name, absl::string_view help,
              const std::vector<std::pair<std::string, std::string>>& labels, double value);
  std::string* out_ = nullptr;
  std::string last_family_;  // HELP and TYPE are written once per run of samples of a name
};

template <class Metric>
class MetricFamily {
 public:
  MetricFamily(std::vector<std::string> label_names,
               std::function<std::unique_ptr<Metric>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}
  // The child with these label values (one per label name, in order), made on first use. The
  // reference stays valid as long as the registry.
  Metric& With(const LabelValues& values);
  // Every child with its label values, in label-value order.
  std::vector<std::pair<LabelValues, const Metric*>> children() const;
  const std::vector<std::string>& label_names() const { return label_names_; }

 private:
  const std::vector<std::string> label_names_;
  const std::function<std::unique_ptr<Metric>()> make_;
  mutable std::mutex mu_;
  std::map<LabelValues, std::unique_ptr<Metric>> children_;
};

using CounterFamily = MetricFamily<Counter>;
using GaugeFamily = MetricFamily<Gauge>;
using HistogramFamily = MetricFamily<Histogram>;

class MetricRegistry {
 public:
  using Collector = std::function<void(MetricWriter&)>;

  CounterFamily& AddCounter(const std::string& name, const std::string& help,
                            std::vector<std::string> label_names);
  GaugeFamily& AddGauge(const std::string& name, const std::string& help,
                        std::vector<std::string> label_names);
  HistogramFamily& AddHistogram(const std::string& name, const std::string& help,
                                std::vector<std::string> label_names, std::vector<double> bounds);
  // Called at every PrometheusText, after the families, in the order added.
  void AddCollector(Collector collector);

  // The page a scraper reads: "text/plain; version=0.0.4".
  std::string PrometheusText() const;
  static constexpr const char* kContentType = "text/plain; version=0.0.4; charset=utf-8";

 private:
  struct Entry {
    std::string name;
    std::string help;
    const CounterFamily* counters = nullptr;
    const GaugeFamily* gauges = nullptr;
    const HistogramFamily* histograms = nullptr;
  };
  void Register(const std::string& name, const std::vector<std::string>& label_names);

  mutable std::mutex mu_;
  std::vector<Entry> entries_;
  std::vector<std::unique_ptr<CounterFamily>> counter_families_;
  std::vector<std::unique_ptr<GaugeFamily>> gauge_families_;
  std::vector<std::unique_ptr<HistogramFamily>> histogram_families_;
  std::vector<Collector> collectors_;
};

// Whether `name` is a valid metric name / label name (exposed for tests and collectors).
bool IsValidMetricName(absl::string_view name);
bool IsValidLabelName(absl::string_view name);

}  // namespace tessera
