// The shard actor: one variable shard (a ShardState: a row block, its optimizer and slots) behind
// a mailbox. All reads and updates of the block are serialized through the mailbox, so the shard
// needs no lock (docs/design.md §1). The behaviour is thin: it hands each ShardOp to ApplyShardOp
// (core/shard_op.h) and replies with the result.
//
// Interface (errors arrive as caf::error convertible with ErrorToStatus, actors/error.h):
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
// Thread-safety: a CAF actor; its state is touched only by its own handlers.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_behavior.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <memory>
#include <vector>

#include "actors/messages.h"
#include "core/shard_op.h"
#include "core/shard_state.h"

namespace tessera {

using shard_actor =
    caf::typed_actor<caf::replies_to<ShardOp>::with<ShardOpResult>,
                     caf::replies_to<std::vector<ShardOp>>::with<std::vector<ShardReply>>>;

struct ShardActorState {
  static inline const char* name = "tessera.shard";
  // Shared only to pass the move-only ShardState through CAF's spawn (which copies its
  // arguments); the actor is its sole user.
  std::shared_ptr<ShardState> shard;
  std::shared_ptr<const SliceStore> store;
};

// The behaviour of a shard actor owning `shard` (non-null), saving and loading through `store`
// (null: slice files on this machine, schema/checkpoint_io.h).
shard_actor::behavior_type ShardActor(shard_actor::stateful_pointer<ShardActorState> self,
                                      std::shared_ptr<ShardState> shard,
                                      std::shared_ptr<const SliceStore> store);

// Spawns a shard actor owning `shard`, linked to nobody (PS nodes spawn theirs themselves,
// actors/ps_node_actor.h). The caller must make it exit before the system shuts down.
shard_actor SpawnShard(caf::actor_system& system, ShardState shard,
                       std::shared_ptr<const SliceStore> store = nullptr);

}  // namespace tessera
