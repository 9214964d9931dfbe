// The shard actor: one variable shard (a ShardState: a row block, its optimizer and slots) behind
// a mailbox. All reads and updates of the block are serialized through the mailbox, so the shard
// needs no lock (docs/design.md §1). The behaviour is thin: it hands each ShardOp to ApplyShardOp
// (core/ps/shard_op.h) and replies with the result.
//
// Interface (errors arrive as caf::error convertible with ErrorToStatus, actors/base/error.h):
//
//   request                 reply                     meaning
//   (ShardOp)               ShardOpResult             one op; its error as the error reply
//   (std::vector<ShardOp>)  std::vector<ShardReply>   the ops in order, one reply each (an op's
//                                                     error does not stop the ops after it)
//
// Bad input gets an InvalidArgument (FailedPrecondition for a gradient without an optimizer)
// error and leaves the shard exactly as it was (ShardState's contract). SaveOp and LoadOp read
// and write slice files through the shard's SliceStore (slice files on this machine by default).
//
// A shard spawned from a ShardSpec (BuildingShardActor) builds its own ShardState — allocates
// and initializes its rows and slots — as the first thing it does, on the scheduler thread that
// first runs it, not on its spawner's: a PS node's shards initialize in parallel, and the node
// stays responsive meanwhile. Ops sent before the build is done wait in the mailbox; the first
// reply tells that the shard is ready.
//
//   (backup_atom, shard_actor backup,    int64_t: the version      Note [Shard backups];
//    caf::actor via, bool send_state)        once the backup has it    null backup: none; `via`:
//                                                                      the forward link to the
//                                                                      backup's node (null: none,
//                                                                      Note [A node's forwards
//                                                                      travel together])
//
// and sends, to the actor that gave it its backup (Note [A lost backup is struck before the
// primary acknowledges alone]):
//   (backup_lost_atom, std::string name, caf::actor backup)   its backup failed
//
// Note [Shard backups]
// A shard may have a backup: a shard actor of the same spec on another PS node, which serves no
// client. The shard (the primary) applies each op as always; one that changed it (ChangesShard,
// core/ps/shard_op.h: updates, assigns, restores and loads, never reads or saves) is then sent on
// to the backup, and its client's reply waits until the backup has applied it too. So an update a
// client saw acknowledged is on two nodes, and a lost primary's backup, promoted in its place,
// holds every acknowledged update (coordinator/ps/strategy.h, PromoteBackupsOf). The backup applies
// the same ops in the same order — one sender and one receiver, whose messages CAF keeps in order —
// to the same state, so the two stay bit-identical (a forwarded update keeps its UpdateId). An
// update the shard finds it applied already (Note [Exactly-once updates]) is not forwarded but
// stands in line as a no-op (an InfoOp), so its acknowledgement still waits for the changes sent
// before it. backup_atom names the backup: one built from the same spec at the same moment as
// the primary is identical already (send_state false); a new one, in place of a lost backup, is
// first filled with the primary's block, slots and step (send_state true), as RestoreOps of at most
// kRebuildPartBytes each (RestorePart, core/ps/shard_op.h), the last with the primary's ledger
// (RestoreOp::ledger), so that promoted later it still drops the re-run updates the primary had
// applied before it was built. The parts go one at a time, each copied when the one before it was
// applied, so a rebuild holds one part's copy at a time whatever the shard's size; ops go on being
// forwarded from the first part on. That stays exact: a part copies its rows as they are after
// every op forwarded before it, and the ops after it reach the backup after it, in order; rows not
// restored yet take forwarded changes that their part then overwrites with the primary's rows,
// which include them; each part carries the step, so the backup's optimizer steps in lockstep with
// the primary's. The backup counts only once backup_atom answered, after the last part: until
// then the shard has no backup to promote. Reads see the primary's state, which may include an
// update whose acknowledgement still waits for the backup.
//
// Note [A lost backup is struck before the primary acknowledges alone]
// A backup fails — it went down, its connection was lost, or it answered an op with an error —
// while its node may live on and the coordinator still lists it as the shard's backup. Were the
// primary to acknowledge on its own from then on, a later loss of the primary's node would
// promote that backup, which lacks every update acknowledged since: acknowledged updates lost,
// silently. So the primary drops the backup but acknowledges nothing alone yet: what waited for
// the backup, and every change after it, is applied and held unacknowledged, and the shard tells
// whoever gave it the backup (its PS node, which tells the shard's owner: the coordinator) with
// (backup_lost_atom, its name, the lost backup). The coordinator strikes that backup from its
// placement, so it can never be promoted, and answers with the next backup_atom — no backup,
// or a new one filled with the primary's state — which releases the held acknowledgements in
// order (ClusterCoordinator, Note [A lost backup is replaced]). Held changes were never
// acknowledged, so a primary lost meanwhile loses nothing a client was told; its closures run
// again. The price is availability: a coordinator that cannot answer (stopped, or gone for good)
// leaves the shard's clients waiting until it, or a coordinator re-adopting the shard, does. A
// rebuild under way when its backup fails learns so at once (the backup_atom that asked for it
// answers with an error); only clients' acknowledgements are held.
//
// Thread-safety: a CAF actor; its state is touched only by its own handlers.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_behavior.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "actors/base/actor_handles.h"
#include "actors/base/messages.h"
#include "actors/ps/forward_link.h"
#include "core/ps/shard_op.h"
#include "core/ps/shard_state.h"

namespace tessera {

// The interface, shard_actor, is declared with the other actor handles
// (actors/base/actor_handles.h).

// Who gave a shard its backup, as the shard sees it: told when that backup fails (Note [A lost
// backup is struck before the primary acknowledges alone]). A PS node is one.
using backup_watcher = caf::typed_actor<caf::reacts_to<backup_lost_atom, std::string, caf::actor>>;

struct ShardActorState {
  static inline const char* name = "tessera.shard";
  // Shared only to pass the move-only ShardState through CAF's spawn (which copies its
  // arguments); the actor is its sole user. Null when a BuildingShardActor's build failed.
  std::shared_ptr<ShardState> shard;
  // Why the build failed: every op's answer then.
  absl::Status build_error;
  std::shared_ptr<const SliceStore> store;
  // Note [Shard backups]: where the changes go before they are acknowledged (null: nowhere),
  // what waits for it in the order sent, and a count of backups given or lost (a late answer of
  // an earlier backup is ignored).
  struct Awaiting {
    std::function<void()> then;
    bool acknowledges = true;  // a client's acknowledgement (else a rebuild's next part)
  };
  caf::actor backup;
  forward_link via;  // null: the changes go straight to the backup
  std::deque<Awaiting> awaiting_backup;
  uint64_t backup_epoch = 0;
  // Note [A lost backup is struck before the primary acknowledges alone]: who gave the backup
  // (told of its loss), and, from a loss until the next backup_atom, the acknowledgements held.
  backup_watcher backup_giver;
  bool backup_lost = false;
  std::deque<std::function<void()>> held_acknowledgements;
};

// The behaviour of a shard actor owning `shard` (non-null), saving and loading through `store`
// (null: slice files on this machine, schema/checkpoint/checkpoint_io.h).
shard_actor::behavior_type ShardActor(shard_actor::stateful_pointer<ShardActorState> self,
                                      std::shared_ptr<ShardState> shard,
                                      std::shared_ptr<const SliceStore> store);

// The behaviour of a shard actor that first builds its ShardState from `spec`
// (ShardState::Create). When the build fails — InvalidArgument for a bad spec (the message names
// the shard), ResourceExhausted when its memory cannot be had — the actor answers every op with
// that error; whoever spawned it should then stop it.
shard_actor::behavior_type BuildingShardActor(shard_actor::stateful_pointer<ShardActorState> self,
                                              ShardSpec spec,
                                              std::shared_ptr<const SliceStore> store);

// Spawns a shard actor owning `shard`, linked to nobody (PS nodes spawn theirs themselves,
// actors/ps/ps_node_actor.h). The caller must make it exit before the system shuts down.
shard_actor SpawnShard(caf::actor_system& system, ShardState shard,
                       std::shared_ptr<const SliceStore> store = nullptr);

}  // namespace tessera
