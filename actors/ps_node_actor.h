// The PS node actor: hosts the shard actors placed on one parameter-server task.
//
// Interface (errors arrive as caf::error convertible with ErrorToStatus, actors/error.h):
//
//   request                                 reply                     errors
//   (create_shard_atom, ShardSpec)          shard_actor               AlreadyExists (name taken),
//                                                                     InvalidArgument (bad spec)
//   (drop_shard_atom, std::string name)     void                      NotFound
//   (lookup_atom, std::string name)         shard_actor               NotFound
//   (list_atom)                             std::vector<std::string>  (shard names, sorted)
//   (stats_atom)                            PsNodeStats               Unavailable (a shard died)
//   (ping_atom)                             pong_atom                 -
//
// create_shard builds the ShardState on the node (so the shard initializes its own rows there,
// never the full value) and spawns its actor. Lifetimes are one-directional (Note [Shard
// lifetimes]): when the node exits, for whatever reason (send_exit with exit_reason::kill or
// user_shutdown, or all handles to it dropped), every shard it holds exits with the same reason;
// a shard that exits on its own leaves the node running, and the node forgets it (its name can be
// used again, e.g. to restore the lost shard). drop_shard shuts a shard down (user_shutdown).
//
// Note [Shard lifetimes]
// A CAF link would also take the shards down with the node, but links are symmetric and a kill
// is unconditional: a shard killed on its own would take the node and every other shard on it
// down too. So the node monitors its shards (to forget dead ones) and attaches a functor that
// sends each live shard an exit message when the node exits.
//
// CAF terminates an actor nobody references any more: keep a handle to each node while it is
// meant to live; its shards follow it.
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
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "actors/messages.h"
#include "actors/shard_actor.h"

namespace tessera {

using ps_node_actor =
    caf::typed_actor<caf::replies_to<create_shard_atom, ShardSpec>::with<shard_actor>,  //
                     caf::replies_to<drop_shard_atom, std::string>::with<void>,         //
                     caf::replies_to<lookup_atom, std::string>::with<shard_actor>,      //
                     caf::replies_to<list_atom>::with<std::vector<std::string>>,        //
                     caf::replies_to<stats_atom>::with<PsNodeStats>,                    //
                     caf::replies_to<ping_atom>::with<pong_atom>>;

struct PsNodeState {
  static inline const char* name = "tessera.ps_node";
  int32_t task = 0;
  // The live shards by name; shared with the exit functor of Note [Shard lifetimes].
  std::shared_ptr<std::map<std::string, shard_actor>> shards =
      std::make_shared<std::map<std::string, shard_actor>>();
};

// The behaviour of PS node `task` (its index among the PS tasks).
ps_node_actor::behavior_type PsNodeActor(ps_node_actor::stateful_pointer<PsNodeState> self,
                                         int32_t task);

// Spawns PS node `task`. The caller must make it exit before the system shuts down (its shards
// follow it).
ps_node_actor SpawnPsNode(caf::actor_system& system, int32_t task);

}  // namespace tessera
