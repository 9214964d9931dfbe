// PsMetrics: what `tessera ps --metrics_port` answers a Prometheus scraper — the PS node's shards,
// asked of the node actor at scrape time — and the HTTP server it answers on.
//
//   PsMetrics metrics(system, node, absl::Seconds(2));
//   std::string page = metrics.PrometheusText();   // GET /metrics
//
// The metrics (Prometheus' text format, core/monitoring/monitoring.h):
//   tessera_ps_up                     gauge: 1 when the node answered this scrape, else 0 (and
//                                     none of the shard metrics below)
//   tessera_ps_shards                 gauge: shards held
//   tessera_ps_bytes                  gauge: bytes of the shards' blocks and optimizer slots
//   tessera_ps_shard_rows{variable, shard}           gauge: rows of the shard's block
//   tessera_ps_shard_bytes{variable, shard}          gauge: its block and slots
//   tessera_ps_shard_updates_total{variable, shard}  counter: row-updating operations applied
//                                                    (core/ps/shard_state.h, ShardInfo::updates)
//   tessera_ps_shard_version{variable, shard}        gauge: the shard's version
//   process_resident_memory_bytes     gauge
// `variable` is the variable's name and `shard` its shard index ("emb/part_3": "emb", "3"; an
// unpartitioned variable: shard "0").
//
// Note [A scrape waits for the node, boundedly]
// The collector asks the node for its stats (stats_atom with no hottest rows: no scan of the
// counters) from the scraper's thread and waits at most `wait`: a node whose shards are busy with
// a long operation (a checkpoint save) makes the scrape say tessera_ps_up 0 instead of hanging
// the scraper. Shards answer between operations, so a scrape costs training one small message
// per shard.
//
// Thread-safety: PrometheusText may be called from any thread but the actor system's own.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/ps/ps_node_actor.h"
#include "core/monitoring/monitoring.h"
#include "http/http_server.h"

namespace tessera::cli {

class PsMetrics {
 public:
  // The paths the page is answered at: Prometheus' default and TF Serving's (as tessera serve).
  static constexpr const char* kPath = "/metrics";
  static constexpr const char* kServingPath = "/monitoring/prometheus/metrics";

  // `system` and `node` must outlive the PsMetrics.
  PsMetrics(caf::actor_system& system, ps_node_actor node, absl::Duration wait);

  std::string PrometheusText() const { return metrics_.PrometheusText(); }

  // The HTTP answer to `request`: the page for GET or HEAD of either path, 405 for another method
  // there, 404 elsewhere.
  HttpResponse Handle(const HttpRequest& request) const;

 private:
  MetricRegistry metrics_;
};

// ("emb", "3") for "emb/part_3"; (name, "0") for a name without a "/part_N" suffix.
std::pair<std::string, std::string> VariableAndShard(const std::string& shard_name);

// An HTTP server answering `metrics` (one handler thread, small requests only), bound to
// host:port (0: a free port), and the port it got; `metrics` must outlive it. Unavailable naming
// --metrics_port (and who holds the port) when it cannot be bound; InvalidArgument for a port out
// of range.
struct MetricsServer {
  std::unique_ptr<HttpServer> server;
  int port = 0;
};
absl::StatusOr<MetricsServer> BindMetricsServer(const PsMetrics& metrics, const std::string& host,
                                                int port);

}  // namespace tessera::cli
