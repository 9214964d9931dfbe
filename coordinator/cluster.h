// InProcessCluster: the single-process simulation (DESIGN.md §2) — one CAF actor system holding
// the parameter-server nodes; workers are started by the ClusterCoordinator. Every test and the
// drivers' default mode run on it.
//
// Example:
//   ASSIGN_OR_RETURN(std::unique_ptr<InProcessCluster> cluster,
//                    InProcessCluster::Start({.num_ps = 2, .num_workers = 2}));
//   ParameterServerStrategy strategy(*cluster, *FixedShardsPartitioner(4));
//
// Shutdown: the destructor stops every PS node (their shards follow) and waits for the actor
// system; a ClusterCoordinator on this cluster must be destroyed first.
//
// Thread-safety: Start and the destructor on one thread; the accessors are safe from any thread.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/ps_node_actor.h"

namespace tessera {

struct ClusterOptions {
  int32_t num_ps = 1;       // >= 1
  int32_t num_workers = 1;  // >= 1: worker slots (the coordinator starts them)
  int32_t threads = 0;      // scheduler threads; 0: one per core (not CAF's max(cores, 4))
};

class InProcessCluster {
 public:
  // InvalidArgument when num_ps or num_workers is < 1 or threads < 0.
  static absl::StatusOr<std::unique_ptr<InProcessCluster>> Start(const ClusterOptions& options);
  ~InProcessCluster();

  InProcessCluster(const InProcessCluster&) = delete;
  InProcessCluster& operator=(const InProcessCluster&) = delete;

  caf::actor_system& system() { return *system_; }
  const ClusterOptions& options() const { return options_; }
  int32_t num_ps() const { return options_.num_ps; }
  int32_t num_workers() const { return options_.num_workers; }
  const ps_node_actor& ps_node(int32_t task) const { return ps_nodes_[task]; }
  const std::vector<ps_node_actor>& ps_nodes() const { return ps_nodes_; }

  // Fault injection: kills PS node `task` and every shard on it. InvalidArgument for a task out
  // of range.
  absl::Status KillPs(int32_t task);

 private:
  explicit InProcessCluster(const ClusterOptions& options);

  ClusterOptions options_;
  caf::actor_system_config config_;  // must outlive system_
  std::unique_ptr<caf::actor_system> system_;
  std::vector<ps_node_actor> ps_nodes_;
};

}  // namespace tessera
