// Dashboard: the coordinator's live view of a training run — a web page, the JSON API behind it
// and Prometheus metrics — on an HTTP server of its own (`--dashboard_port`).
//
//   GET /              the page (coordinator/monitoring/internal/dashboard_page.h): no external
//   resource,
//                      polls the API every second
//   GET /api/run       the run: configuration, progress, loss / throughput / validation curves,
//                      checkpoints and recoveries
//   GET /api/cluster   the cluster: PS nodes and their shards (rows, bytes, version, updates/s,
//                      hottest rows), workers, closures
//   GET /metrics       Prometheus' text format (also at /monitoring/prometheus/metrics)
//
//   DashboardSources sources;
//   sources.run = [&] { return RunJson(monitor.Snapshot()); };
//   sources.cluster = [&] { return ClusterJson(...); };
//   sources.metrics = &registry;
//   TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Dashboard> dashboard,
//                    Dashboard::Start({"127.0.0.1", 8080}, std::move(sources)));
//   std::cout << "dashboard at " << dashboard->url() << "\n";
//   ...                                         // serves until destroyed
//
// The page is one client of the API: anything it shows, a script can read. Each GET calls its
// source on one of the server's handler threads; a source must be safe to call from any thread
// and answer within a bounded time (the cluster source asks the PS nodes with a timeout).
// It is plain HTTP: it listens on loopback unless told otherwise (docs/design.md, "Dashboard").
//
// Thread-safety: Start and the destructor from one thread; the sources are called concurrently.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "core/monitoring/monitoring.h"
#include "http/http_server.h"
#include "tessera/training.h"

namespace tessera {

struct DashboardSources {
  std::function<nlohmann::json()> run;
  std::function<nlohmann::json()> cluster;
  const MetricRegistry* metrics = nullptr;  // not owned; outlives the dashboard
};

class Dashboard {
 public:
  // Binds host:port and serves on threads of its own. Unavailable when the port cannot be bound
  // (naming it and --dashboard_port); InvalidArgument for a port out of range or a missing source.
  static absl::StatusOr<std::unique_ptr<Dashboard>> Start(const DashboardOptions& options,
                                                          DashboardSources sources);
  ~Dashboard();  // stops serving (requests in flight finish first)

  int port() const { return port_; }
  // "http://HOST:PORT/".
  std::string url() const;

 private:
  Dashboard(std::string host, DashboardSources sources);
  HttpResponse Answer(const HttpRequest& request) const;

  const std::string host_;
  const DashboardSources sources_;
  HttpServer server_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace tessera
