// The shard actor: one variable shard (a ShardState: a row block, its optimizer and slots) behind
// a mailbox. All reads and updates of the block are serialized through the mailbox, so the shard
// needs no lock (DESIGN.md §1). Handlers are thin: decode, call ShardState, reply.
//
// Interface (every reply carries the shard's version: the number of updates applied so far;
// errors arrive as caf::error convertible with ErrorToStatus, actors/error.h):
//
//   request                                   reply        ShardState call
//   (info_atom)                               ShardInfo    Info()
//   (read_atom)                               ShardValue   Read()
//   (gather_atom, RowIds local_ids)           ShardValue   Gather(ids) (TF's sparse_read)
//   (assign_atom, AssignKind, Tensor)         int64_t      Assign(kind, value)
//   (scatter_atom, ScatterOp, IndexedSlices)  int64_t      Scatter(op, local ids, rows)
//   (apply_grad_atom, Tensor grad)            int64_t      ApplyDenseGradient(grad)
//   (apply_grad_atom, IndexedSlices grad)     int64_t      ApplySparseGradient(local ids, rows)
//   (set_opt_atom, OptimizerSpec)             int64_t      SetOptimizer(spec)
//   (snapshot_atom)                           ShardSnapshot Snapshot()
//   (restore_atom, ShardSnapshot)             int64_t      Restore(snapshot)
//   (save_atom, std::string dir,              SavedSlice   writes dir/file: its block, slots and
//    std::string file)                                     step (schema/checkpoint_io.h)
//   (load_atom, std::string dir,              int64_t      reads only the slice files of
//    CheckpointVariable)                                   `dir` its rows overlap, then Restore
//
// The int64_t replies are the version after the update. Ids are block-local (global id minus the
// shard's row offset). Bad input gets an InvalidArgument (FailedPrecondition for a gradient
// without an optimizer) error reply and leaves the shard exactly as it was (ShardState's
// contract).
//
// Thread-safety: a CAF actor; its state is touched only by its own handlers.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_behavior.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <cstdint>
#include <memory>

#include "actors/messages.h"
#include "core/shard_state.h"

namespace tessera {

using shard_actor =
    caf::typed_actor<caf::replies_to<info_atom>::with<ShardInfo>,                             //
                     caf::replies_to<read_atom>::with<ShardValue>,                            //
                     caf::replies_to<gather_atom, RowIds>::with<ShardValue>,                  //
                     caf::replies_to<assign_atom, AssignKind, Tensor>::with<int64_t>,         //
                     caf::replies_to<scatter_atom, ScatterOp, IndexedSlices>::with<int64_t>,  //
                     caf::replies_to<apply_grad_atom, Tensor>::with<int64_t>,                 //
                     caf::replies_to<apply_grad_atom, IndexedSlices>::with<int64_t>,          //
                     caf::replies_to<set_opt_atom, OptimizerSpec>::with<int64_t>,             //
                     caf::replies_to<snapshot_atom>::with<ShardSnapshot>,                     //
                     caf::replies_to<restore_atom, ShardSnapshot>::with<int64_t>,             //
                     caf::replies_to<save_atom, std::string, std::string>::with<SavedSlice>,  //
                     caf::replies_to<load_atom, std::string, CheckpointVariable>::with<int64_t>>;

struct ShardActorState {
  static inline const char* name = "tessera.shard";
  // Shared only to pass the move-only ShardState through CAF's spawn (which copies its
  // arguments); the actor is its sole user.
  std::shared_ptr<ShardState> shard;
};

// The behaviour of a shard actor owning `shard` (non-null).
shard_actor::behavior_type ShardActor(shard_actor::stateful_pointer<ShardActorState> self,
                                      std::shared_ptr<ShardState> shard);

// Spawns a shard actor owning `shard`, linked to nobody (PS nodes spawn theirs linked to
// themselves, actors/ps_node_actor.h). The caller must make it exit before the system shuts down.
shard_actor SpawnShard(caf::actor_system& system, ShardState shard);

}  // namespace tessera
