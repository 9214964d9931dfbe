#include "serving/serving_metrics.h"

#include <chrono>
#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/process.h"

namespace tessera::serving {
namespace {

// TF Serving's request latency buckets: 10 us growing by 1.8x, 33 of them (up to ~2.6 hours).
std::vector<double> LatencyBucketsMicros() { return ExponentialBuckets(10, 1.8, 33); }

}  // namespace

ServingMetrics::ServingMetrics(std::shared_ptr<const ModelRegistry> registry)
    : request_count_(metrics_.AddCounter(":tensorflow:serving:request_count",
                                         "The number of requests answered, by model and status.",
                                         {"model_name", "status"})),
      request_latency_(metrics_.AddHistogram(
          ":tensorflow:serving:request_latency",
          "Microseconds from a request's arrival to its answer, by model and API.",
          {"model_name", "API", "entrypoint"}, LatencyBucketsMicros())),
      responses_(metrics_.AddCounter("tessera_serving_http_responses_total",
                                     "Answers by HTTP status, the server's own errors included.",
                                     {"code"})) {
  const double start_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  metrics_.AddCollector([registry = std::move(registry), start_time](MetricWriter& out) {
    const std::shared_ptr<const ModelRegistry::Models> models = registry->Snapshot();
    for (const auto& [name, model] : *models) {
      std::map<std::string, int> by_state{{"available", 0}, {"end", 0}};
      for (const VersionStatus& status : model.statuses) {
        ++by_state[status.state == VersionState::kAvailable ? "available" : "end"];
      }
      for (const auto& [state, count] : by_state) {
        out.Gauge("tessera_serving_model_versions", "Versions of a model, by state.",
                  {{"model_name", name}, {"state", state}}, count);
      }
    }
    for (const auto& [name, model] : *models) {
      if (model.available.empty()) continue;
      out.Gauge("tessera_serving_newest_version",
                "The version a request without /versions/N is answered by.",
                {{"model_name", name}}, static_cast<double>(model.available.rbegin()->first));
    }
    out.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.", {},
              static_cast<double>(ResidentBytes().value_or(0)));
    out.Gauge("process_start_time_seconds", "Start time of the server since the Unix epoch.", {},
              start_time);
  });
}

void ServingMetrics::Record(const HttpReply& reply, double seconds) {
  responses_.With({absl::StrCat(reply.status)}).Increment();
  if (reply.model_name.empty()) return;
  request_count_.With({reply.model_name, absl::StatusCodeToString(reply.code)}).Increment();
  request_latency_.With({reply.model_name, std::string(reply.api), "REST"})
      .Observe(seconds * 1e6);
}

void ServingMetrics::RecordResponse(int http_status) {
  responses_.With({absl::StrCat(http_status)}).Increment();
}

}  // namespace tessera::serving
