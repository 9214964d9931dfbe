// The PS node actor's pieces (actors/ps/ps_node_actor.h), one file per job, and what they share:
//   ps_node_shards.cc   (create_shard, drop_shard, lookup, list): hosting shards (Note [Shard
//                       lifetimes], Note [Shards initialize themselves]);
//   ps_node_leases.cc   (reclaim, lease, an owner's down): owners and their leases (Note [Shards
//                       die with their coordinator]);
//   ps_node_backups.cc  (backup, backup_lost, a forward link's down): backups (Note [Backups
//                       reached directly]);
//   ps_node_batches.cc  (batch, stats): serving batches of shard calls and the node's stats.
//
// Thread-safety: everything here runs on the node actor's thread, with its state.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/system_messages.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/base/messages.h"
#include "actors/ps/ps_node_actor.h"

namespace tessera::ps_node_internal {

using NodePointer = ps_node_actor::stateful_pointer<PsNodeState>;

// -- ps_node_shards.cc ----------------------------------------------------------------------------

// Note [Shard lifetimes]: the node's exit stops every live shard.
void StopShardsOnExit(NodePointer self);
// Stops shard `name` and forgets it (if the node holds it); its owner entry is the caller's.
void DropShard(NodePointer self, const std::string& name);
caf::result<shard_actor> CreateShard(NodePointer self, const ShardSpec& spec,
                                     const caf::actor& owner);
caf::result<void> DropShardOf(NodePointer self, const std::string& name, const caf::actor& owner);
caf::result<shard_actor> LookUpShard(NodePointer self, const std::string& name);
std::vector<std::string> ListShards(NodePointer self);
// A shard that went down is forgotten; false when `source` is none of the node's shards.
bool ForgetShard(NodePointer self, const caf::actor_addr& source);

// -- ps_node_leases.cc ----------------------------------------------------------------------------

// Watches `owner` (a new proxy of a known owner replaces the old one) and cancels its lease.
void WatchOwner(NodePointer self, const caf::actor& owner);
// reclaim_atom (Note [Shards die with their coordinator]): answered at once, or once the run's
// live predecessors here are seen gone.
caf::result<std::vector<HeldShard>> Claim(NodePointer self, const caf::actor& owner,
                                          const std::string& run);
// lease_atom: a lost owner not back within its lease loses its shards; a claim that has waited
// kClaimPatience is answered.
void EndLease(NodePointer self, uint64_t lease);
// An owner that went down: its lease starts (or its shards go at once); false when `msg` is not
// from an owner.
bool OnOwnerDown(NodePointer self, const caf::down_msg& msg);

// -- ps_node_backups.cc ---------------------------------------------------------------------------

// Note [Backups reached directly] (ps_node_actor.h).
caf::result<int64_t> GiveBackup(NodePointer self, const std::string& name, const caf::actor& backup,
                               const std::string& backup_address, bool send_state);
// Shard `name` says its backup failed (Note [A lost backup is struck before the primary
// acknowledges alone], actors/ps/shard_actor.h).
void ReportLostBackup(NodePointer self, const std::string& name, const caf::actor& backup);
// A forward link that went down (its peer did) is forgotten; false when `source` is no link.
bool ForgetLink(NodePointer self, const caf::actor_addr& source);

// -- ps_node_batches.cc ---------------------------------------------------------------------------

caf::result<PsNodeStats> CollectStats(NodePointer self, int32_t hottest_rows);
// Serves one batch (Note [One request per PS node], actors/ps/shard_client.h).
caf::result<std::vector<ShardReply>> ServeBatch(NodePointer self, std::vector<ShardCall>& calls);

}  // namespace tessera::ps_node_internal
