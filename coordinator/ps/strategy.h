// ShardPlacement: what stands behind a ParameterServerStrategy (tessera/strategy.h) — where every
// shard of its variables is, their backups, and how a lost PS's shards come back (created again
// for a checkpoint to fill, promoted from backups, or re-adopted). ParameterServerStrategy::
// placement() reaches it; the coordinator's PS recovery (coordinator/scheduling/ps_recovery.h),
// checkpoints and exports use it.
//
// CreateVariable decides the number of shards with the partitioner in force — the variable's own
// (VariableOptions::partitioner), else the innermost open PartitionerScope, else the strategy's —
// and never partitions a scalar, a variable with no rows, or one colocated with another
// variable. Shards are named "name/part_i" and placed round-robin over the PS tasks with one
// counter for the whole strategy (4 shards on 2 PS -> ps 0, 1, 0, 1). Each shard initializes its
// own rows on its PS node from the initializer: the driver never builds the full value.
// An ON_READ variable gets one unpartitioned copy per worker slot ("name/worker_k").
//
// Note [Creating shards at once]
// Every create_shard request of a call — all the shards of a variable, of every variable of a
// model (CreateModelVariables), of a restarted PS (RecreateShardsOn) — is sent before any reply
// is awaited, from one actor, and the replies are joined once (core/base/fan_in.h); each PS node
// builds its shards in parallel on its scheduler threads (Note [Shards initialize themselves],
// actors/ps/ps_node_actor.h). Placement is decided before anything is sent, in the order a
// sequential creation would use, so it does not depend on which reply comes first; and when
// several shards fail, the error reported is the first failed shard's in that order. A failed
// call drops every shard it created and leaves the strategy as it was, round-robin counter
// included. A shard's values depend only on its variable's initializer and its rows (core/
// initializer.h), so creating at once gives exactly the values creating one by one would.
//
// Note [Backups on the next PS]
// With shard_copies = 2 every shard has a backup (Note [Shard backups], actors/ps/shard_actor.h),
// created with it from the same spec on the next PS task ((task + 1) mod num_ps), so a node's
// loss takes no shard's two copies. When a PS is lost its shards' backups are promoted in their
// place (PromoteBackupsOf: the variables point at them, on the backups' tasks) and every shard
// left without a backup — those promoted, and those whose backup the lost node held — gets a new
// one on another live task (RebuildBackups), which first takes its primary's state. A shard
// whose primary and backup are both lost goes back to the checkpoint path (RecreateShardsOn). A
// backup that fails while its PS lives is struck (StrikeBackup) before its primary acknowledges
// alone, and rebuilt the same way.
//
// Note [A restarted coordinator re-adopts its run's shards]
// A coordinator that dies leaves its shards on the PS nodes for a lease (Note [Shards die with
// their coordinator], actors/ps/ps_node_actor.h), trained further than any checkpoint. Started
// again with --resume, it names its run (the checkpoint run id it resumes) to every PS node before
// it creates anything (ClaimShardsOfRun); the nodes hand it the run's orphaned shards. The next
// creation adopts them, all or none: when they are exactly the shards it would create — every
// planned shard on its planned task, of the same variable, rows, shape, dtype and optimizer (not
// initializer: a resumed run plans zeros), with backups the primary forwarding to a backup and
// the backup on the next task, and nothing else — the variables point at them as they are,
// values, slots, steps and ledgers, and the run continues where their ledgers say (Note [Closure
// ids that survive a restart], core/scheduling/closure_queue.h) with nothing read from a
// checkpoint. Otherwise (a PS restarted empty, a backup promoted in the lost run, a changed model
// or partitioner) every claimed shard is dropped and the shards are created afresh, for the
// checkpoint to fill. A partial adoption would mix a checkpoint's state with later state.
//
// Thread-safety: not synchronized: create variables from one thread (the driver's).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/ps/train_step.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/sharded_variable.h"
#include "core/variables/aggregation.h"
#include "tessera/model.h"
#include "tessera/optimizer.h"
#include "tessera/partitioner.h"
#include "tessera/strategy.h"

namespace tessera {

class ShardPlacement {
 public:
  // `partitioner`: the default for variables created under this strategy ("none" by default).
  // `shard_copies`: 1, or 2 for a backup of every shard (Note [Backups on the next PS]; needs two
  // PS tasks or more, else creating a variable is InvalidArgument).
  ShardPlacement(Cluster& cluster, Partitioner partitioner, int32_t shard_copies);
  // On a networked cluster, drops every shard it created from the PS processes (which outlive
  // the job), so the next job on them starts clean. In process, the shards die with the cluster.
  ~ShardPlacement();
  ShardPlacement(const ShardPlacement&) = delete;
  ShardPlacement& operator=(const ShardPlacement&) = delete;

  // As ParameterServerStrategy's (tessera/strategy.h); every shard of a call is created at once
  // (Note [Creating shards at once]).
  absl::StatusOr<ShardedVariable> CreateVariable(const VariableOptions& options);
  absl::StatusOr<std::vector<ShardedVariable>> CreateVariables(
      const std::vector<VariableOptions>& options);
  absl::StatusOr<std::shared_ptr<const ModelVariables>> CreateModelVariables(
      std::shared_ptr<const Model> model, const OptimizerSpec& optimizer,
      ParameterServerStrategy::InitialValues values);

  // The open PartitionerScopes, innermost last.
  std::vector<Partitioner>& scopes() { return scopes_; }
  Cluster& cluster() { return cluster_; }
  // The actor system the variables' shards live in (checkpoints and exports send from it).
  caf::actor_system& system() const { return cluster_.actors().system(); }
  const Partitioner& partitioner() const { return partitioner_; }
  int32_t shard_copies() const { return shard_copies_; }
  const std::map<std::string, ShardedVariable>& variables() const { return variables_; }
  std::string DescribePlacement(int32_t task) const;
  std::optional<OptimizerSpec> OptimizerOf(const std::string& name) const;

  // Every variable's handle (ON_READ variables: each worker's copy), for a VariableDirectory.
  std::vector<VariableHandle> Handles() const;

  // After a PS loss (what the coordinator does then: coordinator/scheduling/ps_recovery.h). The
  // checkpoint path (strategy.cc): Networked PS recovery: creates every shard that was placed on PS
  // `task` again, freshly initialized, all at once (Note [Creating shards at once]), on the
  // cluster's current node for that task (Cluster::ReplacePs), and points the variables at them.
  // Returns the names of the variables touched; a restore from a checkpoint (RestoreShardsOf,
  // coordinator/checkpoint/save_restore.h) brings their values back. On error the shards it created
  // are dropped and no variable is touched.
  absl::StatusOr<std::vector<std::string>> RecreateShardsOn(int32_t task);

  // The backups (backups.cc):
  // Networked PS recovery with backups (Note [Backups on the next PS]): points the variables at
  // the backups of every shard placed on PS `task`, now on the backups' tasks, and forgets the
  // backups `task` held (their primaries are told to go on without). Returns the names of the
  // variables touched. FailedPrecondition, nothing changed, when a shard placed on `task` has no
  // backup (its primary and backup were both lost, or its backup failed and was struck).
  absl::StatusOr<std::vector<std::string>> PromoteBackupsOf(int32_t task);
  // Gives every shard without a backup a new one, on the first task after its own that is not in
  // `unavailable`, filled with its primary's state before any change after it (backup_atom).
  // Returns how many were made; a shard that finds no task, or whose backup fails, stays without
  // one (the error names it). No-op without backups.
  absl::StatusOr<int32_t> RebuildBackups(const std::vector<int32_t>& unavailable);
  // Note [A lost backup is struck before the primary acknowledges alone] (actors/ps/shard_actor.h):
  // shard `shard` reported that its backup `backup` failed. When that is still its backup, the
  // backup is struck — no longer placed, so nothing promotes it, and dropped from its node if
  // that lives — and the primary is told to go on without one, which acknowledges what it held.
  // Returns the task the backup was on; NotFound when `backup` is not the shard's backup (the
  // report of one struck or replaced already, whose primary was told then).
  absl::StatusOr<int32_t> StrikeBackup(const std::string& shard, const caf::actor_addr& backup);
  // The backup placed for shard `shard` when its primary is on PS `task`; nullopt when it has
  // none (or no such shard is placed there).
  std::optional<caf::actor_addr> BackupOf(const std::string& shard, int32_t task) const;
  // The shards without a backup now (0 without backups: shard_copies 1).
  int32_t ShardsWithoutBackup() const;

  // Shards that outlived their coordinator, re-adopted (readoption.cc): a restarted
  // coordinator's run's, a stalled coordinator's PS's.
  // Networked (Note [A restarted coordinator re-adopts its run's shards]): names `run` to every
  // PS node as this coordinator's run and claims the shards a lost coordinator of the same run
  // left there under their lease, for the next creation (CreateVariables or CreateModelVariables,
  // with every variable of the run) to adopt or drop. Returns how many were
  // claimed; Unavailable when a PS node does not answer. No-op in process (0).
  absl::StatusOr<int64_t> ClaimShardsOfRun(const std::string& run);
  // The shards (backups included) the creation adopted from ClaimShardsOfRun; 0 when it created
  // them afresh.
  int64_t adopted_shards() const { return adopted_shards_; }
  // Networked: points the variables at `held`, the live shards PS `task`'s node gave back to
  // this coordinator (reclaim_atom, Note [Shards die with their coordinator] in
  // actors/ps/ps_node_actor.h), by name. NotFound, naming the missing, and no variable touched,
  // unless every shard placed on `task` is among them.
  absl::Status AdoptShardsOn(int32_t task, const std::map<std::string, shard_actor>& held);

 private:
  struct PlannedVariable;
  struct PlacedShard;

  // Creation and placement (strategy.cc).
  const Partitioner& PartitionerFor(const VariableOptions& options) const;
  // Checks `options` (against the variables and `planned` so far) and decides its shards and
  // their placement, advancing next_ps_; sends nothing.
  absl::StatusOr<PlannedVariable> Plan(const VariableOptions& options,
                                       const std::vector<PlannedVariable>& planned);
  // Creates every planned variable's shards at once and registers the variables; on error drops
  // what was created and puts next_ps_ back to `next_ps_before`.
  absl::StatusOr<std::vector<ShardedVariable>> CreatePlanned(std::vector<PlannedVariable> planned,
                                                             int64_t next_ps_before);
  // Registers the variables of `planned` with `created`, the shards of `all` (as CreatePlanned
  // lays them out), in order.
  std::vector<ShardedVariable> Register(std::vector<PlannedVariable> planned,
                                        const std::vector<PlacedShard>& all, size_t num_primaries,
                                        std::vector<shard_actor> created);
  // Sends create_shard for every shard at once and waits for every reply: the shards, in order,
  // or the first failed shard's error (in order) once every reply is in, after dropping the
  // shards that were created.
  absl::StatusOr<std::vector<shard_actor>> CreateShards(const std::vector<PlacedShard>& shards);
  void DropShards(const std::vector<std::pair<int32_t, std::string>>& created);
  // Points the variable of `placed` at `actor` on `task`.
  void Repoint(const PlacedShard& placed, shard_actor actor, int32_t task);
  // Backups (backups.cc).
  // Tells the shard placed as `primary` that it has no backup now (Note [A lost backup is struck
  // before the primary acknowledges alone]); does not wait.
  void TellNoBackup(const PlacedShard& primary);
  // Names backups[k] (placed as `placed_backups[k]`) the backup of the shard placed as
  // `primaries[k]`, through the primary's PS node, which reaches the backup's node directly
  // (Note [Backups reached directly], actors/ps/ps_node_actor.h); in two rounds (Note [Two PS nodes
  // never connect to each other at once], backups.cc), each all at once; the first error.
  absl::Status AttachBackups(const std::vector<PlacedShard>& primaries,
                             const std::vector<PlacedShard>& placed_backups,
                             const std::vector<shard_actor>& backups, bool send_state);
  // Re-adoption (readoption.cc).
  // The claimed shards for `all` (num_primaries primaries, then their backups), in order, when
  // they are exactly those (Note [A restarted coordinator re-adopts its run's shards]); else
  // nullopt. Either way the claim is spent: shards not adopted are dropped.
  std::optional<std::vector<shard_actor>> AdoptClaimed(const std::vector<PlacedShard>& all,
                                                       size_t num_primaries);

  Cluster& cluster_;
  Partitioner partitioner_;
  int32_t shard_copies_ = 1;
  std::vector<Partitioner> scopes_;
  int64_t next_ps_ = 0;  // the round-robin counter
  std::map<std::string, ShardedVariable> variables_;
  // Where a shard goes and what it is: every shard created, to create it again after its PS was
  // lost.
  struct PlacedShard {
    int32_t task = 0;
    ShardSpec spec;
    std::string variable;  // the ShardedVariable's name
    int64_t index = 0;     // its shard index, or the worker of an ON_READ copy
    bool per_worker_copy = false;
    // Its backup and the backup's task (shard_copies = 2); null and -1 while it has none.
    shard_actor backup;
    int32_t backup_task = -1;

    std::string name() const { return ShardName(spec.variable, spec.shard_index, spec.num_shards); }
  };
  std::vector<PlacedShard> shards_;
  // ClaimShardsOfRun's shards, per PS task, until the next creation spends them.
  std::map<int32_t, std::vector<HeldShard>> claimed_;
  int64_t adopted_shards_ = 0;
};

}  // namespace tessera
