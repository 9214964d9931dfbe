// RunDashboard: a training run's dashboard (coordinator/monitoring/dashboard.h) with its sources —
// the run's TrainingMonitor, a ClusterView of the cluster while the run has one, and the Prometheus
// metrics of both — as RunTrainingJob starts it for --dashboard_port.
//
//   TESSERA_ASSIGN_OR_RETURN(auto dashboard, RunDashboard::Start(options, monitor));
//   observers.on_cluster = dashboard->ClusterHook();   // attaches the cluster while it lives
//   observers.on_replicas = dashboard->ReplicasHook();  // or shows a mirrored run's replicas
//   ... train ...
//   dashboard->KeepServingUntilSignal("recsys");     // --dashboard_keep_serving
//
// Thread-safety: Start, ClusterHook and KeepServingUntilSignal from the driver's thread; the hook
// from the thread that runs the cluster; the sources are read from the dashboard's threads.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/monitoring/dashboard.h"
#include "coordinator/monitoring/internal/cluster_view.h"
#include "coordinator/monitoring/training_monitor.h"
#include "core/monitoring/monitoring.h"

namespace tessera::internal {

class RunDashboard {
 public:
  static absl::StatusOr<std::unique_ptr<RunDashboard>> Start(
      const DashboardOptions& options, std::shared_ptr<const TrainingMonitor> monitor);

  // Called with the cluster and its coordinator once training has them, and with nulls before
  // they go (RunObservers::on_cluster).
  std::function<void(Cluster*, ClusterCoordinator*)> ClusterHook();
  // Called with a mirrored run's replicas (RunObservers::on_replicas).
  std::function<void(const WorkerPoolStatus&)> ReplicasHook();
  std::string url() const { return dashboard_->url(); }
  int port() const { return dashboard_->port(); }

  // Serves until SIGINT or SIGTERM arrives (saying so on stderr, prefixed with `label`).
  void KeepServingUntilSignal(const std::string& label);

  // GET /api/run: the monitor's snapshot (at most kPagePoints points) and elapsed_seconds.
  static nlohmann::json RunJson(const TrainingMonitor& monitor);
  static constexpr int64_t kPagePoints = 600;

 private:
  explicit RunDashboard(std::shared_ptr<const TrainingMonitor> monitor);
  void CollectRun(MetricWriter& out) const;

  const std::shared_ptr<const TrainingMonitor> monitor_;
  ClusterView cluster_;
  MetricRegistry metrics_;
  std::unique_ptr<Dashboard> dashboard_;  // last: stops before the sources go
};

}  // namespace tessera::internal
