// ServingMetrics: what `tessera serve` counts about the requests it answers, as Prometheus'
// text format — the page ModelServer answers at GET /monitoring/prometheus/metrics, TF Serving's
// path, on the REST port.
//
//   ServingMetrics metrics(service.registry());
//   metrics.Record(reply, seconds);            // every reply of the ModelService
//   metrics.RecordResponse(408);               // every other answer (the HTTP server's own)
//   std::string page = metrics.PrometheusText();
//
// The metrics (TF Serving's names where the meaning is theirs):
//   :tensorflow:serving:request_count{model_name, status}        counter; status "OK", "NOT_FOUND"..
//   :tensorflow:serving:request_latency{model_name, API, entrypoint="REST"}
//                                          histogram, microseconds, from the request's arrival in
//                                          full to its answer (TF Serving's unit and buckets)
//   tessera_serving_http_responses_total{code}  counter, every answer by HTTP status
//   tessera_serving_model_versions{model_name, state}  gauge: versions available / ended
//   tessera_serving_newest_version{model_name}  gauge: the version unversioned requests get
//   process_resident_memory_bytes, process_start_time_seconds   the usual process gauges
// A model name is a label only for models the server serves, so no client can make the page grow
// by asking for made-up names (those count in the response codes only).
//
// Thread-safety: every function may be called from any thread.
#pragma once

#include <memory>
#include <string>

#include "core/monitoring/monitoring.h"
#include "serving/model_registry.h"
#include "serving/model_service.h"

namespace tessera::serving {

class ServingMetrics {
 public:
  static constexpr const char* kPath = "/monitoring/prometheus/metrics";

  explicit ServingMetrics(std::shared_ptr<const ModelRegistry> registry);

  // A reply of the ModelService, `seconds` after the request arrived in full.
  void Record(const HttpReply& reply, double seconds);
  // An answer that is not the service's: the HTTP server's own errors, the metrics page.
  void RecordResponse(int http_status);

  std::string PrometheusText() const { return metrics_.PrometheusText(); }

 private:
  MetricRegistry metrics_;
  CounterFamily& request_count_;
  HistogramFamily& request_latency_;
  CounterFamily& responses_;
};

}  // namespace tessera::serving
