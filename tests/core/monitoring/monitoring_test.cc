// core/monitoring/monitoring.h: counters, gauges, histograms and collectors in Prometheus' text
// format.
#include "core/monitoring/monitoring.h"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

TEST_CASE("a counter family writes HELP, TYPE and one line per labelled child") {
  MetricRegistry registry;
  CounterFamily& requests =
      registry.AddCounter("requests_total", "Requests answered.", {"model", "status"});
  requests.With({"recsys", "OK"}).Increment();
  requests.With({"recsys", "OK"}).Increment(2);
  requests.With({"mlp", "NOT_FOUND"}).Increment();
  requests.With({"mlp", "NOT_FOUND"}).Increment(-5);  // ignored: counters only go up
  CHECK(registry.PrometheusText() ==
        "# HELP requests_total Requests answered.\n"
        "# TYPE requests_total counter\n"
        "requests_total{model=\"mlp\",status=\"NOT_FOUND\"} 1\n"
        "requests_total{model=\"recsys\",status=\"OK\"} 3\n");
}

TEST_CASE("gauges go both ways and unlabelled metrics have no braces") {
  MetricRegistry registry;
  Gauge& loaded = registry.AddGauge("models_loaded", "Models being served.", {}).With({});
  loaded.Set(3);
  loaded.Add(-1.5);
  CHECK(loaded.value() == 1.5);
  CHECK(absl::StrContains(registry.PrometheusText(), "\nmodels_loaded 1.5\n"));
}

TEST_CASE("a histogram's buckets are cumulative, end in +Inf, and carry sum and count") {
  MetricRegistry registry;
  Histogram& latency =
      registry.AddHistogram("latency_seconds", "Latency.", {"api"}, {0.001, 0.01, 0.1})
          .With({"predict"});
  for (double seconds : {0.0005, 0.001, 0.005, 0.05, 2.0}) latency.Observe(seconds);
  const std::string text = registry.PrometheusText();
  CHECK(absl::StrContains(text, "# TYPE latency_seconds histogram\n"));
  CHECK(absl::StrContains(text, "latency_seconds_bucket{api=\"predict\",le=\"0.001\"} 2\n"));
  CHECK(absl::StrContains(text, "latency_seconds_bucket{api=\"predict\",le=\"0.01\"} 3\n"));
  CHECK(absl::StrContains(text, "latency_seconds_bucket{api=\"predict\",le=\"0.1\"} 4\n"));
  CHECK(absl::StrContains(text, "latency_seconds_bucket{api=\"predict\",le=\"+Inf\"} 5\n"));
  CHECK(absl::StrContains(text, "latency_seconds_sum{api=\"predict\"} 2.0565\n"));
  CHECK(absl::StrContains(text, "latency_seconds_count{api=\"predict\"} 5\n"));
}

TEST_CASE("exponential buckets") {
  CHECK(ExponentialBuckets(0.5, 2, 4) == std::vector<double>{0.5, 1, 2, 4});
}

TEST_CASE("label values are escaped, and HELP text keeps to one line") {
  MetricRegistry registry;
  registry.AddCounter("odd_total", "Two\nlines \\ here.", {"path"})
      .With({"a\"b\\c\nd"})
      .Increment();
  const std::string text = registry.PrometheusText();
  CHECK(absl::StrContains(text, "# HELP odd_total Two\\nlines \\\\ here.\n"));
  CHECK(absl::StrContains(text, "odd_total{path=\"a\\\"b\\\\c\\nd\"} 1\n"));
}

TEST_CASE("collectors add metrics computed at scrape time, after the families") {
  MetricRegistry registry;
  registry.AddCounter("first_total", "First.", {}).With({}).Increment();
  int depth = 7;
  registry.AddCollector([&](MetricWriter& out) {
    out.Gauge("queue_depth", "Closures waiting.", {}, depth);
    out.Gauge("shard_rows", "Rows per shard.", {{"variable", "user"}, {"shard", "0"}}, 10);
    out.Gauge("shard_rows", "Rows per shard.", {{"variable", "user"}, {"shard", "1"}}, 12);
    out.Counter("updates_total", "Updates.", {}, 1e20);
  });
  depth = 9;
  const std::string text = registry.PrometheusText();
  CHECK(text.find("first_total 1") < text.find("queue_depth 9"));
  CHECK(absl::StrContains(text, "# TYPE shard_rows gauge\nshard_rows{variable=\"user\",shard=\"0\"} "
                                "10\nshard_rows{variable=\"user\",shard=\"1\"} 12\n"));
  // One header per name, however many samples it has.
  CHECK(std::vector<std::string>(absl::StrSplit(text, "# TYPE shard_rows")).size() == 2);
  CHECK(absl::StrContains(text, "updates_total 1e+20\n"));
}

TEST_CASE("metric and label names follow Prometheus") {
  CHECK(IsValidMetricName("tessera_serving_requests_total"));
  CHECK(IsValidMetricName(":tensorflow:serving:request_count"));
  CHECK_FALSE(IsValidMetricName(""));
  CHECK_FALSE(IsValidMetricName("9lives"));
  CHECK_FALSE(IsValidMetricName("has-dash"));
  CHECK(IsValidLabelName("model_name"));
  CHECK_FALSE(IsValidLabelName("__reserved"));
  CHECK_FALSE(IsValidLabelName("a:b"));
}

TEST_CASE("updates from many threads are all counted") {
  MetricRegistry registry;
  CounterFamily& family = registry.AddCounter("hits_total", "Hits.", {"thread_group"});
  Histogram& histogram = registry.AddHistogram("h", "H.", {}, {1, 2}).With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10000; ++i) {
        family.With({std::to_string(t % 2)}).Increment();
        histogram.Observe(1.5);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(family.With({"0"}).value() + family.With({"1"}).value() == 40000);
  const Histogram::Snapshot snapshot = histogram.snapshot();
  CHECK(snapshot.cumulative == std::vector<uint64_t>{0, 40000, 40000});
  CHECK(snapshot.sum == 60000);
}

}  // namespace
}  // namespace tessera
