// ClusterView: what the dashboard shows of the cluster (GET /api/cluster) and the cluster's
// Prometheus metrics, from the ClusterCoordinator (workers, closures, recoveries) and the PS nodes
// (their shards, asked with a timeout), while a run has them — and, once the run has let them go,
// the last view it took, so the page stays readable after the run.
//
//   ClusterView view;                      // before the cluster exists: an empty view
//   view.Attach(&cluster, coordinator.get());
//   nlohmann::json json = view.Json();      // any thread
//   view.Detach();                          // before the coordinator or the cluster go
//
// Shard updates/s is the change of a shard's version between two views over the time between
// them. Views taken less than kMinInterval apart reuse the last one (a page and a scraper polling
// together ask the PS nodes once).
//
// Thread-safety: every member may be called from any thread; Attach and Detach wait for a view
// being taken to finish.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "core/monitoring.h"

namespace tessera {
class Cluster;
class ClusterCoordinator;
}  // namespace tessera

namespace tessera::internal {

class ClusterView {
 public:
  static constexpr std::chrono::milliseconds kMinInterval{500};
  static constexpr std::chrono::milliseconds kPsTimeout{2000};

  void Attach(Cluster* cluster, ClusterCoordinator* coordinator);
  // Takes a last view and keeps it; the cluster and coordinator are not used after this returns.
  void Detach();

  // {"ps": [{task, address, reachable, error, bytes, shards: [{name, rows, cols, bytes, version,
  //   updates, updates_per_sec, hottest_rows: [[row, updates], ...]}]}],
  //  "workers": {live, failures, restarts, slots: [...]}, "closures": {...}, "recoveries": [...]}
  nlohmann::json Json();
  // The same figures as Prometheus metrics (tessera_ps_*, tessera_worker_*, tessera_closures_*).
  void Collect(MetricWriter& out);

 private:
  nlohmann::json Take();  // a fresh view; mu_ held
  nlohmann::json TakeHere();  // Take's work, on the calling thread

  std::mutex mu_;
  Cluster* cluster_ = nullptr;
  ClusterCoordinator* coordinator_ = nullptr;
  nlohmann::json last_ = nlohmann::json::object();
  std::chrono::steady_clock::time_point last_time_{};
  // Per shard name: its version and when it was seen, for updates/s.
  std::map<std::string, std::pair<int64_t, std::chrono::steady_clock::time_point>> versions_;
};

}  // namespace tessera::internal
