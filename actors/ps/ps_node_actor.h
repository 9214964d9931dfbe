// The PS node actor: hosts the shard actors placed on one parameter-server task.
//
// Interface (errors arrive as caf::error convertible with ErrorToStatus, actors/base/error.h):
//
//   request                                 reply                     errors
//   (create_shard_atom, ShardSpec, owner)   shard_actor, once built   AlreadyExists (name taken),
//                                                                     InvalidArgument (bad spec),
//                                                                     ResourceExhausted
//   (drop_shard_atom, std::string name,     void                      NotFound; FailedPrecondition
//    owner)                                                           (another owner's shard)
//   (lookup_atom, std::string name)         shard_actor               NotFound
//   (list_atom)                             std::vector<std::string>  (shard names, sorted)
//   (stats_atom)                            PsNodeStats               Unavailable (a shard died)
//   (stats_atom, int32_t k)                 PsNodeStats, each shard   Unavailable (a shard died)
//                                           with its k hottest rows
//                                           (k clamped to [0, 100];
//                                           without k: 5)
//   (adopt_atom, int32_t task)              void                      FailedPrecondition (not a
//                                                                     standby), InvalidArgument
//   (reclaim_atom, owner, std::string run)  std::vector<HeldShard>:   - (none held: empty)
//                                           the shards it holds for
//                                           owner, and those a lost
//                                           owner of the same run
//                                           left; leases cancelled
//   (lease_atom, uint64_t lease)            - (the node's own timer: drops a lost owner's shards)
//   (backup_atom, std::string name,      int64_t: shard `name`'s   NotFound; the shard's, or
//    caf::actor backup, std::string          version once its backup   the connection's (Note
//    backup_address, bool send_state)        has it                    [Backups reached directly])
//   (backup_lost_atom, std::string name,    - (from shard `name` only: - (anyone else's is
//    caf::actor backup)                      no backup any more;         ignored)
//                                            told to its owner, Note
//                                            [A lost backup is struck
//                                            before the primary
//                                            acknowledges alone])
//   (ping_atom)                             pong_atom                 -
//   (batch_atom, std::vector<ShardCall>)    std::vector<ShardReply>,  - (each reply carries its
//                                            in call order             call's error, Unavailable
//                                                                      for an unknown shard id)
//
// create_shard spawns a shard actor that builds its ShardState on the node (so the shard
// initializes its own rows there, never the full value) and answers once it is built (Note
// [Shards initialize themselves]). Lifetimes are one-directional (Note [Shard
// lifetimes]): when the node exits, for whatever reason (send_exit with exit_reason::kill or
// user_shutdown, or all handles to it dropped), every shard it holds exits with the same reason;
// a shard that exits on its own leaves the node running, and the node forgets it (its name can be
// used again, e.g. to restore the lost shard). drop_shard shuts a shard down (user_shutdown); only
// the shard's owner (null for an ownerless shard) may drop it.
// A shard created with an `owner` (a caf::actor; null for none) is dropped when its owner goes
// down (Note [Shards die with their coordinator]).
//
// Note [Shard lifetimes]
// A CAF link would also take the shards down with the node, but links are symmetric and a kill
// is unconditional: a shard killed on its own would take the node and every other shard on it
// down too. So the node monitors its shards (to forget dead ones) and attaches a functor that
// sends each live shard, and each forward link to a backups' node, an exit message when the node
// exits: a link left behind lived until its peer went down, and kept the process from exiting
// on SIGTERM meanwhile.
//
// Note [Shards die with their coordinator]
// The coordinator creates every shard with its Cluster's session actor as owner. When that
// actor goes down — the coordinator exited, was killed, or its connection was lost (a kill -9
// closes it at once; a hung or stopped process misses the middleman's heartbeats) — the node
// keeps the owner's shards for a lease (`lease`, `tessera ps --shard_lease_s`; 0 drops them at
// once), serving whoever still asks, and then drops them. Within the lease:
//   - the same coordinator, back (a process that was stopped or stalled for longer than the
//     connection timeout), sends reclaim_atom with its session actor: the node cancels the lease
//     and answers with the shards it holds for that owner, so the coordinator re-adopts them —
//     values, slots, steps and the applied-update ledgers as they are — instead of restoring a
//     checkpoint (ClusterCoordinator's PS recovery);
//   - a coordinator of the same run started again (--resume) sends reclaim_atom with its own
//     session actor and the run's id (the checkpoint run id; every coordinator of a run names it
//     on its first reclaim, before it creates anything): the node hands it the shards of every
//     lost owner of that run, each with the spec it was created from and whether it forwards to
//     a backup, and cancels their leases; the coordinator adopts them when they are exactly the
//     shards it would create (Note [A restarted coordinator re-adopts its run's shards],
//     coordinator/ps/strategy.h). Only a lost owner's shards move: a live coordinator of the same
//     run keeps its own;
//   - a claim of a run (reclaim_atom with a run) made while an earlier owner of that run still
//     holds shards here and has not gone down, as far as the node knows, waits for it to (up to
//     kClaimPatience): a restarted coordinator may connect before the node has noticed its
//     predecessor's connection close, and would otherwise find nothing to adopt and its shard
//     names taken;
//   - another coordinator that creates a shard under a name an orphaned shard holds supersedes
//     it: the orphan is dropped and the new shard created.
// After the lease nobody can reach the shards through the lost owner; dropping them then keeps
// orphans from holding their memory for the life of the process. Owners are compared by address
// (node and actor id), which a new connection to the same session actor keeps; a down message
// from an owner's earlier proxy, once a newer one is watched, is stale and ignored.
//
// Note [Shards initialize themselves]
// Building a shard — allocating its block and slots and filling its rows from the initializer —
// is the one slow part of creating it (a 600 MB embedding shard: seconds). The node only checks
// the spec (ShardState::Validate, cheap) and spawns a BuildingShardActor (actors/ps/shard_actor.h),
// which builds its own state on whichever scheduler thread first runs it; the node asks the new
// shard for an InfoOp and answers create_shard with the shard when that reply comes, i.e. once
// it is built. So all the shards a node is asked for initialize at once, on all its scheduler
// threads, while the node serves other requests; the coordinator sends every create_shard of a
// model before it waits for any (coordinator/ps/strategy.h). A shard being built holds its name
// already (a second create_shard for it is AlreadyExists) and is listed; ops sent to it wait in
// its mailbox. A build that fails (memory exhausted: ResourceExhausted) frees the name and is
// create_shard's error.
//
// A batch (Note [One request per PS node], actors/ps/shard_client.h) names each call's shard by its
// actor id; the node sends each shard its calls as one batch, in the order given, and answers
// once every shard has.
//
// Note [Backups reached directly]
// A shard with a backup forwards its changes to it, on another PS node (Note [Shard backups],
// actors/ps/shard_actor.h), whose handle comes from the coordinator. Across processes a
// handle learned through a third node is reached through that node: the changes would all pass
// through the coordinator, and stop with it. So backup_atom names the backup's node address
// too, and the node first connects to it directly (its PeerConnector, on a thread of its own:
// the connection blocks), so that CAF routes the shard's messages over that connection; then it
// hands the shard its backup, and the node's forward link to the backup's node, through which
// the shard's changes travel with those of the node's other shards (Note [A node's forwards
// travel together], actors/ps/forward_link.h). In process (no address, no connector) there is
// nothing to connect, and no link.
// The coordinator never has two nodes connect to each other at the same moment, which CAF 0.17
// mishandles (Note [Two PS nodes never connect to each other at once], coordinator/ps/backups.cc).
//
// A standby node (task kStandbyTask, `tessera ps --standby`) holds nothing until a coordinator
// adopts it as PS task `task` in place of a lost one; from then on it is that task's node.
//
// CAF terminates an actor nobody references any more: keep a handle to each node while it is
// meant to live; its shards follow it.
//
// Thread-safety: a CAF actor; its state is touched only by its own handlers.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_behavior.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/base/actor_handles.h"
#include "actors/base/messages.h"
#include "actors/ps/forward_link.h"
#include "actors/ps/shard_actor.h"

namespace tessera {

// The interface, ps_node_actor, and HeldShard are declared with the other actor handles
// (actors/base/actor_handles.h).

// Opens a direct connection to the PS node at "host:port" (Note [Backups reached directly]) and
// returns that node's actor, to which the node's forward link sends (Note [A node's forwards
// travel together], actors/ps/forward_link.h; a null actor: no link, the shards send to their
// backups themselves); blocks. A null connector: the node connects to nothing.
using PeerConnector = std::function<absl::StatusOr<caf::actor>(const std::string& address)>;

// How long a claim of a run's shards waits for a live predecessor of the run to be seen gone
// (Note [Shards die with their coordinator]): several connection timeouts (2 s by default). After
// it the claim is answered without that predecessor's shards, which it keeps.
inline constexpr auto kClaimPatience = std::chrono::seconds(15);

// The task of a standby PS node that no coordinator has adopted yet.
constexpr int32_t kStandbyTask = -1;

struct PsNodeState {
  static inline const char* name = "tessera.ps_node";
  int32_t task = 0;
  // The live shards by name; shared with the exit functor of Note [Shard lifetimes].
  std::shared_ptr<std::map<std::string, shard_actor>> shards =
      std::make_shared<std::map<std::string, shard_actor>>();
  std::map<caf::actor_id, shard_actor> by_id;  // the same shards, by actor id (for batches)
  // Note [Shards die with their coordinator]: each owned shard's owner; each owner's handle
  // (the proxy watched now) and, while it is gone, the lease that will drop its shards.
  struct Owner {
    caf::actor handle;
    std::optional<uint64_t> lease;  // the pending lease_atom's number
    std::string run;                // the run it named on reclaim_atom; empty: none
  };
  // Each shard's spec, and the shards given a backup (backup_atom), for reclaim_atom.
  std::map<std::string, ShardSpec> specs;
  std::set<std::string> backed_up;
  std::map<std::string, caf::actor_addr> owner_of;
  std::map<caf::actor_addr, Owner> owners;
  caf::timespan lease{0};
  // A claim of a run's shards waiting for a predecessor of the run, live as far as the node
  // knows, to be seen gone (Note [Shards die with their coordinator]).
  struct Claim {
    caf::actor owner;
    std::string run;
    uint64_t timer = 0;  // the lease_atom that ends its wait
    caf::typed_response_promise<std::vector<HeldShard>> promise;
  };
  std::vector<Claim> claims;
  uint64_t leases_started = 0;  // numbers the lease_atom timers: owners' leases, claims' waits
  PeerConnector connect_peer;
  // The forward link to each backup node, by that node's actor (actors/ps/forward_link.h).
  // Shared with the exit functor too (Note [Shard lifetimes]): a link outliving its node kept
  // the process from exiting until the peer went down.
  std::shared_ptr<std::map<caf::actor_addr, forward_link>> links =
      std::make_shared<std::map<caf::actor_addr, forward_link>>();
};

// The behaviour of PS node `task` (its index among the PS tasks, or kStandbyTask); a lost
// owner's shards are kept for `lease` (Note [Shards die with their coordinator]).
ps_node_actor::behavior_type PsNodeActor(ps_node_actor::stateful_pointer<PsNodeState> self,
                                         int32_t task, caf::timespan lease,
                                         PeerConnector connect_peer);

// Spawns PS node `task`. The caller must make it exit before the system shuts down (its shards
// follow it).
ps_node_actor SpawnPsNode(caf::actor_system& system, int32_t task,
                          caf::timespan lease = caf::timespan{0},
                          PeerConnector connect_peer = nullptr);

}  // namespace tessera
