// ClusterCoordinator: schedules closures on the cluster's workers (TF's ClusterCoordinator;
// semantics in core/closure_queue.h and DESIGN.md §3).
//
// Example:
//   auto registry = std::make_shared<FunctionRegistry>();
//   RETURN_IF_ERROR(registry->AddReplicaFunction("train_step", ...));
//   ASSIGN_OR_RETURN(auto coordinator, ClusterCoordinator::Create(strategy, registry));
//   for (int i = 0; i < steps; ++i) {
//     ASSIGN_OR_RETURN(RemoteValue loss, coordinator->Schedule("train_step"));
//   }
//   RETURN_IF_ERROR(coordinator->Join());
//
// Creating the coordinator starts one worker per worker slot of the cluster and watches every
// PS node: once one dies, Schedule / Join / Done return Unavailable naming the node and the
// variables it held (recovery comes with the networked mode).
//
// Thread-safety: Schedule, Join, Done, stats and the fault-injection calls are safe from any
// non-actor thread.
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/coordinator_actor.h"
#include "actors/replica.h"
#include "coordinator/strategy.h"
#include "core/closure.h"
#include "core/closure_queue.h"

namespace tessera {

struct CoordinatorOptions {
  // Closures that may wait to run before Schedule blocks.
  int64_t queue_capacity = 256;
  // Closures each worker runs at once. 1 (TF's behaviour) leaves a worker idle while its
  // closure's messages travel; 2 overlaps one closure's parameter fetch and gradient push with
  // another's compute (see bench/README.md for what it buys).
  int32_t closures_per_worker = 1;
};

class ClusterCoordinator {
 public:
  // Starts the workers of `strategy`'s cluster, running functions from `registry` (complete by
  // now: it is read-only from here on). The strategy's variables must be created first so that
  // a PS failure can name them.
  static absl::StatusOr<std::unique_ptr<ClusterCoordinator>> Create(
      ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
      CoordinatorOptions options = {});
  // Stops the workers; closures still queued are abandoned.
  ~ClusterCoordinator();

  ClusterCoordinator(const ClusterCoordinator&) = delete;
  ClusterCoordinator& operator=(const ClusterCoordinator&) = delete;

  // Queues function(args) and returns its RemoteValue at once (blocks only while the queue is
  // full). Raises a pending application error once (see ClosureQueue), or the fatal PS error;
  // NotFound for a function the registry does not have.
  absl::StatusOr<RemoteValue> Schedule(const std::string& function, ClosureValues args = {});
  // Waits until nothing is queued or running; raises the pending error once.
  absl::Status Join() { return queue_->Join(); }
  // Whether everything scheduled has finished, without waiting; raises the pending error once.
  absl::StatusOr<bool> Done() { return queue_->Done(); }

  ClosureStats stats() const { return queue_->stats(); }
  WorkerPoolStatus workers() const;

  // Fault injection.
  // Kills the worker in `slot` now (its closure is re-run elsewhere); false when none lives.
  bool KillWorker(int32_t slot);
  // Starts a worker in `slot` after `delay` (a preempted machine coming back).
  void RestartWorker(int32_t slot, absl::Duration delay = absl::ZeroDuration());
  // Kills `failures` workers, each in the middle of a closure, at random points of the next
  // `closures` completions; each comes back after `restart_delay`.
  void InjectWorkerFailures(int32_t failures, int64_t closures, uint64_t seed,
                            absl::Duration restart_delay);
  // Kills a random worker every `period`, each coming back after `restart_delay`.
  void KillRandomWorkerEvery(absl::Duration period, uint64_t seed, absl::Duration restart_delay);

 private:
  ClusterCoordinator(caf::actor_system& system, std::shared_ptr<ClosureQueue> queue,
                     std::shared_ptr<const FunctionRegistry> registry)
      : system_(system), queue_(std::move(queue)), registry_(std::move(registry)) {}

  caf::actor_system& system_;
  std::shared_ptr<ClosureQueue> queue_;
  std::shared_ptr<const FunctionRegistry> registry_;
  coordinator_actor actor_;
};

}  // namespace tessera
