// ClusterView: what the dashboard shows of the cluster (GET /api/cluster) and the cluster's
// Prometheus metrics, from the ClusterCoordinator (workers, closures, recoveries) and the PS nodes
// (their shards, asked with a timeout), while a run has them — and, once the run has let them go,
// the last view it took, so the page stays readable after the run.
//
//   ClusterView view;                      // before the cluster exists: an empty view
//   view.Attach(&cluster, coordinator.get());
//   nlohmann::json json = view.Json();      // any thread, at once: the latest view
//   view.Detach();                          // before the coordinator or the cluster go
//
// Note [Views taken off the request path]
// While attached, a thread of the view's own takes a view every kRefreshInterval (and at once
// when the coordinator is attached); Json and Collect return the latest, so a page load costs the
// serialization of a small document however busy the PS nodes are (their stats requests wait in
// mailboxes full of training traffic). The thread also keeps CAF off the dashboard's threads: a
// thread that has used an actor system holds the system's logger until it ends, and CAF 0.17's
// ~actor_system waits for that — a query made on a dashboard thread, which outlives the run's
// cluster, kept the cluster's destructor waiting forever. The view thread ends in Detach, after a
// last view. Shard updates/s is the change of a shard's version between two views.
//
// Thread-safety: every member may be called from any thread; Detach waits for the view being
// taken, so the cluster and coordinator are not used once it returns.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/monitoring/monitoring.h"

namespace tessera {
class Cluster;
class ClusterCoordinator;
struct WorkerPoolStatus;
}  // namespace tessera

namespace tessera::internal {

class ClusterView {
 public:
  static constexpr std::chrono::milliseconds kRefreshInterval{1000};
  static constexpr std::chrono::milliseconds kPsTimeout{2000};

  ClusterView() = default;
  ~ClusterView() { Detach(); }
  ClusterView(const ClusterView&) = delete;
  ClusterView& operator=(const ClusterView&) = delete;

  // Starts (or updates) the views of `cluster` and, when not null, `coordinator`.
  void Attach(Cluster* cluster, ClusterCoordinator* coordinator);
  // Takes a last view and keeps it; the cluster and coordinator are not used after this returns.
  void Detach();
  // A run without PS nodes (the mirrored strategy) shows its replicas: the latest view becomes
  // {"strategy": "mirrored", "ps": [], "workers": {...}}, a worker slot per replica.
  void ShowReplicas(const WorkerPoolStatus& replicas);

  // The latest view: {"ps": [{task, address, reachable, error, bytes, shards: [{name, rows, cols,
  // bytes, version, updates, rows_touched, updates_per_sec, hottest_rows: [[row, updates],
  // ...]}]}], "workers": {live, failures, restarts, run_failed, slots: [...]}, "closures": {...},
  // "recoveries": [...]}; {} before the first; a mirrored run's replicas (ShowReplicas).
  nlohmann::json Json();
  // The same figures as Prometheus metrics (tessera_ps_*, tessera_worker_*, tessera_closures_*).
  void Collect(MetricWriter& out);
  // Waits until the latest view satisfies `ready` (true: `out` holds it), or `limit` passes
  // (false: `out` holds the latest all the same): what waits for the view thread's next views
  // without polling Json.
  bool AwaitView(const std::function<bool(const nlohmann::json&)>& ready,
                 std::chrono::milliseconds limit, nlohmann::json& out);

 private:
  void Refresh();  // the view thread
  nlohmann::json Take(Cluster* cluster, ClusterCoordinator* coordinator);  // on the view thread

  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable viewed_;            // a new view was kept in last_
  Cluster* cluster_ = nullptr;                // guarded by mu_
  ClusterCoordinator* coordinator_ = nullptr;  // guarded by mu_
  bool stop_ = false;                          // guarded by mu_
  bool changed_ = false;                       // guarded by mu_: view again at once
  nlohmann::json last_ = nlohmann::json::object();  // guarded by mu_
  std::thread thread_;
  // Per shard name: its version and when it was seen, for updates/s (the view thread's).
  std::map<std::string, std::pair<int64_t, std::chrono::steady_clock::time_point>> versions_;
};

}  // namespace tessera::internal
