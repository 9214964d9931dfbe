#include "core/monitoring/monitoring.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tessera {
namespace {

[[noreturn]] void ProgrammingError(const std::string& what) {
  std::fprintf(stderr, "tessera: monitoring: %s\n", what.c_str());
  std::abort();
}

void AtomicAdd(std::atomic<double>& target, double by) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + by, std::memory_order_relaxed)) {
  }
}

// Prometheus' number format: integers without a fraction, +Inf / -Inf / NaN spelled its way.
std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 1e15) {
    return absl::StrFormat("%.0f", value);
  }
  for (int precision = 15;; ++precision) {  // the shortest text that reads back as `value`
    std::string text = absl::StrFormat("%.*g", precision, value);
    if (precision == 17 || std::strtod(text.c_str(), nullptr) == value) return text;
  }
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeHelp(absl::string_view help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

using Labels = std::vector<std::pair<std::string, std::string>>;

// `{a="x",b="y"}`, or nothing without labels.
std::string FormatLabels(const Labels& labels) {
  if (labels.empty()) return "";
  return absl::StrCat("{",
                      absl::StrJoin(labels, ",",
                                    [](std::string* out, const auto& label) {
                                      absl::StrAppend(out, label.first, "=\"",
                                                      EscapeLabelValue(label.second), "\"");
                                    }),
                      "}");
}

Labels Zip(const std::vector<std::string>& names, const LabelValues& values) {
  Labels labels;
  for (size_t i = 0; i < names.size(); ++i) labels.emplace_back(names[i], values[i]);
  return labels;
}

void AppendHeader(std::string& out, absl::string_view name, absl::string_view help,
                  absl::string_view type) {
  absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(help), "\n# TYPE ", name, " ", type,
                  "\n");
}

}  // namespace

bool IsValidMetricName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':';
  });
}

bool IsValidLabelName(absl::string_view name) {
  if (name.empty() || absl::ascii_isdigit(static_cast<unsigned char>(name[0]))) return false;
  if (name.size() >= 2 && name.substr(0, 2) == "__") return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

void Counter::Increment(double by) {
  if (by > 0) AtomicAdd(value_, by);
}

void Gauge::Add(double by) { AtomicAdd(value_, by); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {
  if (!std::is_sorted(bounds_.begin(), bounds_.end()) ||
      std::adjacent_find(bounds_.begin(), bounds_.end()) != bounds_.end()) {
    ProgrammingError("histogram bounds must be strictly increasing");
  }
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  const size_t bucket =
      std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();  // le: <=
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, value);
}

Histogram::Snapshot Histogram::snapshot() const {
  Snapshot snapshot;
  snapshot.bounds = bounds_;
  uint64_t total = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    snapshot.cumulative.push_back(total);
  }
  snapshot.sum = sum_.load(std::memory_order_relaxed);
  return snapshot;
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1) {
    ProgrammingError("ExponentialBuckets needs start > 0, factor > 1, count >= 1");
  }
  std::vector<double> bounds;
  double bound = start;
  for (int i = 0; i < count; ++i, bound *= factor) bounds.push_back(bound);
  return bounds;
}

template <class Metric>
Metric& MetricFamily<Metric>::With(const LabelValues& values) {
  if (values.size() != label_names_.size()) {
    ProgrammingError(absl::StrCat("a metric with ", label_names_.size(), " labels given ",
                                  values.size(), " values"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto& child = children_[values];
  if (child == nullptr) child = make_();
  return *child;
}

template <class Metric>
std::vector<std::pair<LabelValues, const Metric*>> MetricFamily<Metric>::children() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<LabelValues, const Metric*>> out;
  for (const auto& [values, child] : children_) out.emplace_back(values, child.get());
  return out;
}

template class MetricFamily<Counter>;
template class MetricFamily<Gauge>;
template class MetricFamily<Histogram>;

void MetricWriter::Sample(absl::string_view type, absl::string_view name, absl::string_view help,
                          const Labels& labels, double value) {
  if (!IsValidMetricName(name)) ProgrammingError(absl::StrCat("bad metric name '", name, "'"));
  for (const auto& label : labels) {
    if (!IsValidLabelName(label.first)) {
      ProgrammingError(absl::StrCat("bad label name '", label.first, "'"));
    }
  }
  if (last_family_ != name) {
    AppendHeader(*out_, name, help, type);
    last_family_ = std::string(name);
  }
  absl::StrAppend(out_, name, FormatLabels(labels), " ", FormatValue(value), "\n");
}

void MetricWriter::Counter(absl::string_view name, absl::string_view help, const Labels& labels,
                           double value) {
  Sample("counter", name, help, labels, value);
}

void MetricWriter::Gauge(absl::string_view name, absl::string_view help, const Labels& labels,
                         double value) {
  Sample("gauge", name, help, labels, value);
}

void MetricRegistry::Register(const std::string& name,
                              const std::vector<std::string>& label_names) {
  if (!IsValidMetricName(name)) ProgrammingError(absl::StrCat("bad metric name '", name, "'"));
  for (const std::string& label : label_names) {
    if (!IsValidLabelName(label) || label == "le") {
      ProgrammingError(absl::StrCat("bad label name '", label, "' of ", name));
    }
  }
  for (const Entry& entry : entries_) {
    if (entry.name == name) ProgrammingError(absl::StrCat("metric '", name, "' added twice"));
  }
}

CounterFamily& MetricRegistry::AddCounter(const std::string& name, const std::string& help,
                                          std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Register(name, label_names);
  counter_families_.push_back(std::make_unique<CounterFamily>(
      std::move(label_names), [] { return std::make_unique<tessera::Counter>(); }));
  entries_.push_back({name, help, counter_families_.back().get(), nullptr, nullptr});
  return *counter_families_.back();
}

GaugeFamily& MetricRegistry::AddGauge(const std::string& name, const std::string& help,
                                      std::vector<std::string> label_names) {
  std::lock_guard<std::mutex> lock(mu_);
  Register(name, label_names);
  gauge_families_.push_back(std::make_unique<GaugeFamily>(
      std::move(label_names), [] { return std::make_unique<tessera::Gauge>(); }));
  entries_.push_back({name, help, nullptr, gauge_families_.back().get(), nullptr});
  return *gauge_families_.back();
}

HistogramFamily& MetricRegistry::AddHistogram(const std::string& name, const std::string& help,
                                              std::vector<std::string> label_names,
                                              std::vector<double> bounds) {
  std::lock_guard<std::mutex> lock(mu_);
  Register(name, label_names);
  Histogram check(bounds);  // bad bounds fail here, not at the first observation
  histogram_families_.push_back(std::make_unique<HistogramFamily>(
      std::move(label_names), [bounds] { return std::make_unique<Histogram>(bounds); }));
  entries_.push_back({name, help, nullptr, nullptr, histogram_families_.back().get()});
  return *histogram_families_.back();
}

void MetricRegistry::AddCollector(Collector collector) {
  std::lock_guard<std::mutex> lock(mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricRegistry::PrometheusText() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const Entry& entry : entries_) {
    if (entry.counters != nullptr) {
      AppendHeader(out, entry.name, entry.help, "counter");
      for (const auto& [values, counter] : entry.counters->children()) {
        absl::StrAppend(&out, entry.name,
                        FormatLabels(Zip(entry.counters->label_names(), values)), " ",
                        FormatValue(counter->value()), "\n");
      }
    } else if (entry.gauges != nullptr) {
      AppendHeader(out, entry.name, entry.help, "gauge");
      for (const auto& [values, gauge] : entry.gauges->children()) {
        absl::StrAppend(&out, entry.name, FormatLabels(Zip(entry.gauges->label_names(), values)),
                        " ", FormatValue(gauge->value()), "\n");
      }
    } else {
      AppendHeader(out, entry.name, entry.help, "histogram");
      for (const auto& [values, histogram] : entry.histograms->children()) {
        const Labels labels = Zip(entry.histograms->label_names(), values);
        const Histogram::Snapshot snapshot = histogram->snapshot();
        for (size_t i = 0; i <= snapshot.bounds.size(); ++i) {
          Labels with_le = labels;
          with_le.emplace_back(
              "le", i < snapshot.bounds.size() ? FormatValue(snapshot.bounds[i]) : "+Inf");
          absl::StrAppend(&out, entry.name, "_bucket", FormatLabels(with_le), " ",
                          snapshot.cumulative[i], "\n");
        }
        absl::StrAppend(&out, entry.name, "_sum", FormatLabels(labels), " ",
                        FormatValue(snapshot.sum), "\n", entry.name, "_count",
                        FormatLabels(labels), " ", snapshot.cumulative.back(), "\n");
      }
    }
  }
  MetricWriter writer;
  writer.out_ = &out;
  for (const Collector& collector : collectors_) collector(writer);
  return out;
}

}  // namespace tessera
