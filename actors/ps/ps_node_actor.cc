#include "actors/ps/ps_node_actor.h"

#include <caf/system_messages.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/ps/internal/ps_node_parts.h"
#include "core/base/logging.h"

namespace tessera {
namespace {

using ps_node_internal::NodePointer;

// adopt_atom: a standby becomes PS task `task` (or a node is told the task it already is).
caf::result<void> Adopt(NodePointer self, int32_t task) {
  if (task < 0) {
    return StatusToError(absl::InvalidArgumentError(
        absl::StrCat("a standby cannot be adopted as ps ", task)));
  }
  if (self->state.task != kStandbyTask && self->state.task != task) {
    return StatusToError(absl::FailedPreconditionError(
        absl::StrCat("ps node ", self->state.task,
                     " is not a standby: it cannot serve as ps ", task,
                     " (check the cluster spec and --task of each tessera ps)")));
  }
  if (self->state.task == kStandbyTask) {
    SetLogRole(absl::StrCat("ps ", task));
    Log().info("a standby no more: adopted in place of the lost ps {}", task);
  }
  self->state.task = task;
  return caf::unit;
}

}  // namespace

ps_node_actor::behavior_type PsNodeActor(NodePointer self, int32_t task, caf::timespan lease,
                                         PeerConnector connect_peer) {
  using namespace ps_node_internal;  // NOLINT(build/namespaces): the pieces, one per job
  self->state.task = task;
  self->state.lease = lease;
  self->state.connect_peer = std::move(connect_peer);
  StopShardsOnExit(self);
  // A monitored shard that went down is forgotten; the node carries on. An owner that went down
  // takes its shards with it (Note [Shards die with their coordinator]).
  self->set_down_handler([self](caf::down_msg& msg) {
    if (OnOwnerDown(self, msg)) return;
    if (ForgetLink(self, msg.source)) return;
    ForgetShard(self, msg.source);
  });
  return {
      [self](create_shard_atom, const ShardSpec& spec, const caf::actor& owner) {
        return CreateShard(self, spec, owner);
      },
      [self](drop_shard_atom, const std::string& name, const caf::actor& owner) {
        return DropShardOf(self, name, owner);
      },
      [self](lookup_atom, const std::string& name) { return LookUpShard(self, name); },
      [self](list_atom) { return ListShards(self); },
      [self](stats_atom) -> caf::result<PsNodeStats> {
        return CollectStats(self, kDefaultHottestRows);
      },
      [self](stats_atom, int32_t hottest_rows) -> caf::result<PsNodeStats> {
        return CollectStats(self, hottest_rows);
      },
      [self](adopt_atom, int32_t task) { return Adopt(self, task); },
      [self](reclaim_atom, const caf::actor& owner, const std::string& run)
          -> caf::result<std::vector<HeldShard>> { return Claim(self, owner, run); },
      [self](lease_atom, uint64_t lease) { EndLease(self, lease); },
      [self](backup_atom, const std::string& name, const caf::actor& backup,
             const std::string& backup_address, bool send_state) -> caf::result<int64_t> {
        return GiveBackup(self, name, backup, backup_address, send_state);
      },
      [self](backup_lost_atom, const std::string& name, const caf::actor& backup) {
        ReportLostBackup(self, name, backup);
      },
      [](ping_atom) -> pong_atom { return pong_atom::value; },
      [self](batch_atom, std::vector<ShardCall>& calls) { return ServeBatch(self, calls); },
  };
}

ps_node_actor SpawnPsNode(caf::actor_system& system, int32_t task, caf::timespan lease,
                          PeerConnector connect_peer) {
  return system.spawn(PsNodeActor, task, lease, std::move(connect_peer));
}

}  // namespace tessera
