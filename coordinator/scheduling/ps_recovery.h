// PsRecovery, and what a networked ClusterCoordinator (cluster_coordinator.h) does when it loses
// a PS node. The code is ps_recovery.cc, on the coordinator's recovery thread; the strategy's
// side, the methods that point variables at other shards, is in coordinator/ps/strategy.h.
//
// The coordinator actor watches every PS node (actors/scheduling/coordinator_actor.h). A lost
// one pauses dispatch and is queued for the recovery thread, which tries, in order:
//   1. re-adoption: the PS process at the task's address is alive and still holds this
//      coordinator's shards (this coordinator was stalled, the PS was not lost): the variables
//      point at them again, with nothing restored and nothing lost (Note [A stalled coordinator
//      re-adopts its shards]);
//   2. with shard backups, failover: the backups of the task's shards take over, with every
//      acknowledged update, and the task stays vacant until a rebuild finds it a node (Note [A
//      lost PS's backups take over]);
//   3. with CoordinatorRun::recovery_checkpoints, a restore: a replacement node
//      (Cluster::ReplacePs), the task's shards created again there and loaded from the latest
//      checkpoint of the run; the updates since that checkpoint are lost;
//   4. else the run fails: Schedule / Join / Done return Unavailable naming the node and the
//      variables it held, and the workers are stopped.
// Each success hands the workers a new directory and adds a PsRecovery to
// ClusterCoordinator::recoveries(). With shard backups, a backup that fails while its PS lives is
// struck, and every shard left without a backup gets a new one once no loss waits (Note [A lost
// backup is replaced]). In process a lost PS is fatal.
//
// Thread-safety: PsRecovery is a plain value.
#pragma once

#include <cstdint>
#include <string>

namespace tessera {

// One restored PS (networked mode).
struct PsRecovery {
  int32_t ps_task = 0;
  std::string node;             // "host:port" of the node now serving the task
  double seconds = 0;           // from the loss to training resuming
  // The PS process was alive and still held the shards (the connection was lost because this
  // coordinator was stopped or stalled): they were re-adopted as they are, with nothing
  // restored and nothing lost (Note [A stalled coordinator re-adopts its shards]).
  bool readopted = false;
  // With shard backups: the shards' backups took over, with every acknowledged update (Note [A lost
  // PS's backups take over]); `node` lists the PS tasks now holding them.
  bool promoted = false;
  std::string checkpoint;       // the directory restored from (none when re-adopted)
  int64_t checkpoint_step = 0;  // its global step
  int64_t lost_steps = 0;       // steps completed after that checkpoint: their updates to the
                                // restored shards are gone
};

}  // namespace tessera
