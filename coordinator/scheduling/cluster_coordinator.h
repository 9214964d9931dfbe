// ClosureScheduler: what stands behind a ClusterCoordinator (tessera/coordinator.h; semantics in
// core/scheduling/closure_queue.h and docs/design.md §3) — the closure queue, the coordinator
// actor that hands closures to workers, and the recovery thread.
//
// Creating the coordinator starts one worker per worker slot of an in-process cluster; on a
// networked cluster it listens at the cluster spec's coordinator address instead, and worker
// processes join (and rejoin after a restart) by themselves. It watches every PS node: once one
// dies, Schedule / Join / Done return Unavailable naming the node and the variables it held —
// unless, in networked mode, CoordinatorRun::recovery_checkpoints names the checkpoints to
// restore it from: then dispatch pauses, the coordinator finds a replacement node
// (ClusterActors::ReplacePs: a standby of the spec, or the PS process back at its address),
// recreates its shards there, loads them from the latest checkpoint, hands every worker the new
// shard handles and PS addresses and carries on (the updates those shards took since that
// checkpoint are lost, and reported by recoveries()). What happens when a PS is lost, in order
// and with its reasons: coordinator/scheduling/ps_recovery.h.
//
// Creating one names this process's log role "coordinator" (core/base/logging.h).
//
// Thread-safety: Schedule, Join, Done and stats are safe from any non-actor thread. Tests kill
// and restart workers through coordinator/scheduling/testing.h.
#pragma once

#include <caf/actor_system.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actors/scheduling/coordinator_actor.h"
#include "actors/scheduling/replica.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/scheduling/ps_recovery.h"
#include "core/checkpoint/checkpoint.h"
#include "core/scheduling/closure.h"
#include "core/scheduling/closure_queue.h"
#include "core/training/job_description.h"
#include "tessera/coordinator.h"

namespace tessera {

// What a training run adds to a coordinator (ClusterCoordinator::Create's internal form).
struct CoordinatorRun {
  // Networked mode: the CheckpointManager root whose latest checkpoint restores a lost PS
  // (empty: a lost PS is a fatal PS-unavailable error, as in TF), and the run it must belong to
  // (CheckpointManager::run_id(); empty: not checked). A checkpoint of another run is never
  // restored into this one: the recovery fails instead.
  std::string recovery_checkpoints;
  RunId recovery_run;
  // The global step this run started from (a resumed run's), to count the steps lost by a PS
  // recovery.
  int64_t first_step = 0;
  // The closure queue's identity (non-zero), derived from the run's, so that a coordinator
  // restarted for the run names the closures of a step as the lost one did (Note [Closure ids that
  // survive a restart], core/scheduling/closure_queue.h); nullopt: random, every closure numbered
  // in the order scheduled.
  std::optional<uint64_t> queue_identity;
  // Networked mode: the job a worker process must have been started for to join (compared
  // at join, core/training/job_description.h); a worker of another job is refused, naming the
  // differences, in its log and in WaitForWorkers' error.
  JobDescription job;
};

class ClosureScheduler {
 public:
  // As ClusterCoordinator::Create (tessera/coordinator.h), with `run`.
  static absl::StatusOr<std::unique_ptr<ClosureScheduler>> Create(
      ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
      CoordinatorOptions options, CoordinatorRun run);
  // Stops the workers; closures still queued are abandoned.
  ~ClosureScheduler();

  ClosureScheduler(const ClosureScheduler&) = delete;
  ClosureScheduler& operator=(const ClosureScheduler&) = delete;

  // As ClusterCoordinator's. With CoordinatorRun::queue_identity a closure's id is derived from
  // its `step` (steps scheduled in rising order; InvalidArgument otherwise).
  absl::StatusOr<RemoteValue> Schedule(const std::string& function, ClosureValues args = {},
                                       std::optional<int64_t> step = std::nullopt);
  // The closure queue's identity: every closure's Closure::queue.
  uint64_t queue_identity() const;
  // Waits until nothing is queued or running (and no lost PS is being restored); raises the
  // pending error once.
  absl::Status Join();
  // Whether everything scheduled has finished, without waiting; raises the pending error once.
  absl::StatusOr<bool> Done() { return queue_->Done(); }

  ClosureStats stats() const { return queue_->stats(); }
  WorkerPoolStatus workers() const;

  // Networked mode: the port workers join on (the spec's, or the one picked for port 0).
  uint16_t port() const { return port_; }
  // Networked mode: waits until at least `min_workers` workers have joined, printing who is
  // connected as they come. DeadlineExceeded after `timeout`, naming who is missing.
  absl::Status WaitForWorkers(int32_t min_workers, absl::Duration timeout);
  // The PS recoveries so far, oldest first.
  std::vector<PsRecovery> recoveries() const;

 private:
  friend class ClusterCoordinatorTesting;  // fault injection: coordinator/scheduling/testing.h
  struct LostPs;  // the PS losses waiting for the recovery thread (internal/lost_ps.h)

  ClosureScheduler(ParameterServerStrategy& strategy, std::shared_ptr<ClosureQueue> queue,
                   std::shared_ptr<const FunctionRegistry> registry, CoordinatorOptions options,
                   CoordinatorRun run);
  // Networked: listen for workers, hand out the first directory, start the recovery thread.
  absl::Status StartNetworked();
  // Networked, when the run failed: see Note [A failed run tells its workers before the
  // coordinator exits].
  void WaitUntilWorkersLearnOfFailure();
  // The variable directory of generation_: what workers fetch to find the shards and PS nodes.
  VariableDirectory Directory();

  // PS recovery (ps_recovery.cc), on the recovery thread.
  void RecoveryLoop();
  // Restores PS `task` (see the class comment); a failure is the fatal PS-unavailable error.
  void Recover(int32_t task);
  // Recover's first try: PS `task`'s process at its address still holds this coordinator's
  // shards, and takes them back (Note [A stalled coordinator re-adopts its shards]). False, with
  // nothing changed but the task's node, when it does not.
  bool Readopt(int32_t task, absl::Time start);
  // Recover's second try, with shard backups: the backups of PS `task`'s shards take over (Note [A
  // lost PS's backups take over]). False, nothing changed, when a shard has no backup.
  bool Failover(int32_t task, absl::Time start);
  // After a loss, with shard backups: a backup for every shard without one, on the live tasks, or,
  // when some shard finds none besides its own, on a node for vacant PS `task` (a standby, or its
  // process started again).
  void RebuildBackups(int32_t task);
  // Strikes shard `shard`'s failed backup `backup` and queues a rebuild (Note [A lost backup is
  // replaced]).
  void ReplaceLostBackup(const std::string& shard, const caf::actor_addr& backup);
  // Training goes on with PS `task` served by `node` again (null: by nobody, its shards moved):
  // workers get a new directory.
  void Resume(int32_t task, const ps_node_actor& node, PsRecovery report);

  ParameterServerStrategy& strategy_;
  caf::actor_system& system_;
  std::shared_ptr<ClosureQueue> queue_;
  std::shared_ptr<const FunctionRegistry> registry_;
  CoordinatorOptions options_;
  CoordinatorRun run_;
  coordinator_actor actor_;
  uint16_t port_ = 0;
  std::shared_ptr<LostPs> lost_;
  std::thread recovery_thread_;
  int64_t generation_ = 0;  // of the directory last sent (recovery thread only)
  // PS tasks lost whose shards moved to their backups, with no node yet (recovery thread only):
  // the directory names no address for them.
  std::vector<int32_t> vacant_;
  mutable absl::Mutex mu_;
  std::vector<PsRecovery> recoveries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera
