#include "actors/ps/ps_node_actor.h"

#include <algorithm>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/make_message.hpp>
#include <caf/message_id.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <cstdio>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/error.h"
#include "actors/ps/forward_link.h"
#include "actors/ps/shard_client.h"
#include "core/base/fan_in.h"
#include "core/base/logging.h"
#include "core/base/status.h"

namespace tessera {
namespace {

using NodePointer = ps_node_actor::stateful_pointer<PsNodeState>;

caf::result<PsNodeStats> CollectStats(NodePointer self, int32_t hottest_rows) {
  if (self->state.shards->empty()) {
    PsNodeStats empty;
    empty.task = self->state.task;
    return empty;
  }
  auto promise = self->make_response_promise<PsNodeStats>();
  std::vector<std::string> names;
  for (const auto& [name, shard] : *self->state.shards) names.push_back(name);
  auto join = FanIn<ShardInfo>::Start(
      names.size(), [promise, task = self->state.task](
                        absl::StatusOr<std::vector<ShardInfo>> infos) mutable {
        if (!infos.ok()) {
          promise.deliver(StatusToError(infos.status()));
          return;
        }
        PsNodeStats stats;
        stats.task = task;
        stats.shards = *std::move(infos);  // in name order: the map's
        stats.num_shards = static_cast<int64_t>(stats.shards.size());
        for (const ShardInfo& info : stats.shards) stats.bytes += info.bytes;
        promise.deliver(std::move(stats));
      });
  size_t k = 0;
  for (const auto& [name, shard] : *self->state.shards) {
    ShardClient::Send(self, shard, InfoOp{hottest_rows},
                      [slot = join->Slot(k++), name = name](absl::StatusOr<ShardOpResult> r) {
                        if (!r.ok()) {
                          return slot(absl::UnavailableError(absl::StrCat(
                              "stats: shard ", name, " did not answer: ", r.status().message())));
                        }
                        slot(ResultOf<InfoOp>(*std::move(r)));
                      });
  }
  return promise;
}

// Serves one batch (Note [One request per PS node], actors/ps/shard_client.h): each shard gets its
// calls as one batch, in order; the replies go back in call order.
caf::result<std::vector<ShardReply>> ServeBatch(NodePointer self, std::vector<ShardCall>& calls) {
  struct PerShard {
    shard_actor shard;
    std::vector<size_t> call_indices;
    std::vector<ShardOp> ops;
  };
  auto replies = std::make_shared<std::vector<ShardReply>>(calls.size());
  std::map<uint64_t, PerShard> by_shard;
  bool changes = false;
  for (size_t k = 0; k < calls.size(); ++k) {
    auto it = self->state.by_id.find(calls[k].shard);
    if (it == self->state.by_id.end()) {
      (*replies)[k].error = StatusToError(absl::UnavailableError(absl::StrCat(
          "ps node ", self->state.task, " holds no shard with actor id ", calls[k].shard,
          " (dropped, or lost with an earlier process at this address)")));
      continue;
    }
    PerShard& group = by_shard[calls[k].shard];
    changes = changes || ChangesShard(calls[k].op);
    group.shard = it->second;
    group.call_indices.push_back(k);
    group.ops.push_back(std::move(calls[k].op));
  }
  if (by_shard.empty()) return std::move(*replies);
  // Note [A node's forwards travel together] (actors/ps/forward_link.h): the links are queued before
  // the shards, so that each takes the forwards of the shards run before it as one batch.
  if (!self->state.links.empty() && changes) {
    for (const auto& [peer, link] : self->state.links) self->send(link, round_atom::value);
  }
  auto promise = self->make_response_promise<std::vector<ShardReply>>();
  auto join = FanIn<std::vector<ShardReply>>::Start(
      by_shard.size(),
      [promise, replies](absl::StatusOr<std::vector<std::vector<ShardReply>>> done) mutable {
        if (!done.ok()) {
          promise.deliver(StatusToError(done.status()));
          return;
        }
        promise.deliver(std::move(*replies));
      });
  size_t slot = 0;
  for (auto& [id, group] : by_shard) {
    const size_t expected = group.ops.size();
    ShardClient::SendBatch(
        self, group.shard, std::move(group.ops),
        [arrived = join->Slot(slot++), replies, indices = std::move(group.call_indices),
         expected](absl::StatusOr<std::vector<ShardReply>> answers) {
          // A shard's failure (it died mid-batch) is each of its calls' error, not the batch's.
          for (size_t j = 0; j < expected; ++j) {
            ShardReply& reply = (*replies)[indices[j]];
            if (!answers.ok()) {
              reply.error = StatusToError(answers.status());
            } else if (answers->size() != expected) {
              reply.error = StatusToError(absl::InternalError("a shard answered a partial batch"));
            } else {
              reply = std::move((*answers)[j]);
            }
          }
          arrived(std::vector<ShardReply>{});
        });
  }
  return promise;
}

// Note [Shard lifetimes] (ps_node_actor.h): when the node exits, each live shard gets an exit
// message with the node's reason (a normal exit becomes user_shutdown, which shards do not
// ignore).
void StopShardsOnExit(NodePointer self) {
  self->attach_functor([shards = self->state.shards, node = self->address()](
                           const caf::error& reason, caf::execution_unit* host) {
    caf::error why = reason;
    if (!why || why == caf::exit_reason::normal) why = caf::exit_reason::user_shutdown;
    for (const auto& entry : *shards) {
      entry.second->enqueue(nullptr, caf::make_message_id(),
                            caf::make_message(caf::exit_msg{node, why}), host);
    }
    shards->clear();
  });
}

// Stops shard `name` and forgets it (if the node holds it); its owner entry is the caller's.
void DropShard(NodePointer self, const std::string& name) {
  auto it = self->state.shards->find(name);
  if (it == self->state.shards->end()) return;
  self->demonitor(it->second.address());
  self->send_exit(it->second, caf::exit_reason::user_shutdown);
  self->state.by_id.erase(it->second.id());
  self->state.specs.erase(name);
  self->state.replicated.erase(name);
  self->state.shards->erase(it);
}

// The names of the shards `owner` owns here.
std::vector<std::string> ShardsOf(const PsNodeState& state, const caf::actor_addr& owner) {
  std::vector<std::string> names;
  for (const auto& [name, holder] : state.owner_of) {
    if (holder == owner) names.push_back(name);
  }
  return names;
}

// Drops every shard `owner` owns and forgets the owner (Note [Shards die with their
// coordinator]); `why` says what became of it.
void DropOwner(NodePointer self, caf::actor_addr owner, const std::string& why) {
  PsNodeState& state = self->state;
  const std::vector<std::string> dropped = ShardsOf(state, owner);
  for (const std::string& name : dropped) {
    DropShard(self, name);
    state.owner_of.erase(name);
  }
  state.owners.erase(owner);
  if (!dropped.empty()) {
    Log().warn("dropped {} shard(s) of a coordinator that is gone ({}): {}", dropped.size(), why,
               absl::StrJoin(dropped, ", "));
  }
}

// Watches `owner` (a new proxy of a known owner replaces the old one) and cancels its lease.
void WatchOwner(NodePointer self, const caf::actor& owner) {
  PsNodeState::Owner& entry = self->state.owners[owner.address()];
  if (caf::actor_cast<caf::actor_control_block*>(entry.handle) !=
      caf::actor_cast<caf::actor_control_block*>(owner)) {
    entry.handle = owner;
    self->monitor(owner);
  }
  entry.lease.reset();
}

// Hands shard `shard` (named `name`) its backup (replicate_atom), reached through `via` (null:
// directly), and answers `promise` with its reply.
void GiveBackup(NodePointer self, const std::string& name, const shard_actor& shard,
                const caf::actor& backup, const caf::actor& via, bool send_state,
                caf::typed_response_promise<int64_t> promise) {
  self->request(shard, caf::infinite, replicate_atom::value, backup, via, send_state)
      .then(
          [self, name, shard, replicated = static_cast<bool>(backup),
           promise](int64_t version) mutable {
            auto held = self->state.shards->find(name);
            if (held != self->state.shards->end() && held->second == shard) {
              if (replicated) {
                self->state.replicated.insert(name);
              } else {
                self->state.replicated.erase(name);
              }
            }
            promise.deliver(version);
          },
          [promise](caf::error& err) mutable { promise.deliver(std::move(err)); });
}

// Note [A lost backup is struck before the primary acknowledges alone] (actors/ps/shard_actor.h):
// shard `name` says its backup failed; it is no longer replicated (reclaim_atom says so), and its
// owner, who placed the backup, hears of it. A report not from that shard is ignored.
void ReportLostBackup(NodePointer self, const std::string& name, const caf::actor& backup) {
  PsNodeState& state = self->state;
  auto it = state.shards->find(name);
  if (it == state.shards->end() ||
      it->second.address() != caf::actor_cast<caf::actor_addr>(self->current_sender())) {
    return;
  }
  state.replicated.erase(name);
  auto owner = state.owner_of.find(name);
  if (owner == state.owner_of.end()) return;
  auto entry = state.owners.find(owner->second);
  if (entry == state.owners.end() || !entry->second.handle) return;
  caf::anon_send(entry->second.handle, backup_lost_atom::value, name, backup);
}

// The forward link to PS node `peer` (Note [A node's forwards travel together], actors/
// forward_link.h), spawned on first use; null for a null peer (the connector names none).
caf::actor LinkTo(NodePointer self, const caf::actor& peer) {
  if (!peer) return caf::actor();
  forward_link& link = self->state.links[peer.address()];
  if (!link) {
    link = self->spawn(ForwardLink, caf::actor_cast<batch_server>(peer));
    self->monitor(link);
  }
  return caf::actor_cast<caf::actor>(link);
}

// Note [Backups reached directly] (ps_node_actor.h).
caf::result<int64_t> Replicate(NodePointer self, const std::string& name, const caf::actor& backup,
                               const std::string& backup_address, bool send_state) {
  auto it = self->state.shards->find(name);
  if (it == self->state.shards->end()) {
    return StatusToError(
        absl::NotFoundError(absl::StrCat("ps node ", self->state.task, " holds no shard ", name)));
  }
  const shard_actor shard = it->second;
  auto promise = self->make_response_promise<int64_t>();
  if (backup_address.empty() || !self->state.connect_peer || !backup) {
    GiveBackup(self, name, shard, backup, caf::actor(), send_state, promise);
    return promise;
  }
  // (An argument, unused: CAF 0.17 dereferences a null argument tuple when there is none.)
  auto connector = self->spawn<caf::detached>(
      [connect = self->state.connect_peer](caf::event_based_actor* helper, int) -> caf::behavior {
        return {[helper, connect](const std::string& address) -> caf::result<caf::actor> {
          helper->quit();
          absl::StatusOr<caf::actor> peer = connect(address);
          if (!peer.ok()) return StatusToError(peer.status());
          return *std::move(peer);
        }};
      },
      0);
  self->request(connector, caf::infinite, backup_address)
      .then(
          [self, name, shard, backup, send_state, promise](caf::actor& peer) mutable {
            GiveBackup(self, name, shard, backup, LinkTo(self, peer), send_state, promise);
          },
          [promise, backup_address](caf::error& err) mutable {
            promise.deliver(StatusToError(Annotate(
                ErrorToStatus(err), absl::StrCat("reaching the backup's node ", backup_address))));
          });
  return promise;
}

// reclaim_atom (Note [Shards die with their coordinator]).
std::vector<HeldShard> Reclaim(NodePointer self, const caf::actor& owner, const std::string& run) {
  std::vector<HeldShard> held;
  if (!owner) return held;
  PsNodeState& state = self->state;
  const auto known = state.owners.find(owner.address());
  const bool was_lost = known != state.owners.end() && known->second.lease.has_value();
  WatchOwner(self, owner);
  PsNodeState::Owner& entry = state.owners[owner.address()];
  if (!run.empty()) entry.run = run;
  // The shards a lost owner of the same run left here become this owner's.
  size_t inherited = 0;
  for (auto it = state.owners.begin(); it != state.owners.end();) {
    if (run.empty() || it->first == owner.address() || it->second.run != run ||
        !it->second.lease.has_value()) {
      ++it;
      continue;
    }
    for (const std::string& name : ShardsOf(state, it->first)) {
      state.owner_of[name] = owner.address();
      ++inherited;
    }
    self->demonitor(it->second.handle);
    it = state.owners.erase(it);  // its pending lease_atom now finds no owner
  }
  for (const std::string& name : ShardsOf(state, owner.address())) {
    held.push_back(HeldShard{name, state.shards->at(name), state.specs.at(name),
                             state.replicated.count(name) > 0});
  }
  if (was_lost) Log().info("the coordinator is back: it reclaimed {} shard(s)", held.size());
  if (inherited > 0) {
    Log().info("a coordinator of the same run took over {} shard(s) of its lost predecessor",
               inherited);
  }
  return held;
}

}  // namespace

ps_node_actor::behavior_type PsNodeActor(NodePointer self, int32_t task, caf::timespan lease,
                                         PeerConnector connect_peer) {
  self->state.task = task;
  self->state.lease = lease;
  self->state.connect_peer = std::move(connect_peer);
  StopShardsOnExit(self);
  // A monitored shard that went down is forgotten; the node carries on. An owner that went down
  // takes its shards with it (Note [Shards die with their coordinator]).
  self->set_down_handler([self](caf::down_msg& msg) {
    PsNodeState& state = self->state;
    if (auto owner = state.owners.find(msg.source); owner != state.owners.end()) {
      // A down from a proxy the node no longer watches (the owner came back on a newer
      // connection first) is stale.
      if (caf::actor_cast<caf::actor_control_block*>(owner->second.handle) !=
          caf::actor_cast<caf::actor_control_block*>(msg.source)) {
        return;
      }
      const std::string why = self->system().render(msg.reason);
      const size_t held = ShardsOf(state, owner->first).size();
      if (state.lease.count() <= 0 || held == 0) return DropOwner(self, owner->first, why);
      const uint64_t lease = ++state.leases_started;
      owner->second.lease = lease;
      Log().warn(
          "the coordinator that owns {} shard(s) is gone ({}): keeping them for {} s, "
          "for it to reclaim",
          held, why, std::chrono::duration<double>(state.lease).count());
      self->delayed_send(self, state.lease, lease_atom::value, lease);
      return;
    }
    for (auto it = state.links.begin(); it != state.links.end(); ++it) {
      if (it->second.address() == msg.source) {  // its peer went down
        state.links.erase(it);
        return;
      }
    }
    auto& shards = *state.shards;
    for (auto it = shards.begin(); it != shards.end(); ++it) {
      if (it->second.address() == msg.source) {
        state.owner_of.erase(it->first);
        state.by_id.erase(it->second.id());
        state.specs.erase(it->first);
        state.replicated.erase(it->first);
        shards.erase(it);
        return;
      }
    }
  });
  return {
      [self](create_shard_atom, const ShardSpec& spec,
             const caf::actor& owner) -> caf::result<shard_actor> {
        const std::string name = ShardName(spec.variable, spec.shard_index, spec.num_shards);
        // A shard of a lost owner still under its lease gives way to a new owner's (Note
        // [Shards die with their coordinator]).
        if (auto held = self->state.owner_of.find(name); held != self->state.owner_of.end()) {
          auto holder = self->state.owners.find(held->second);
          if (holder != self->state.owners.end() && holder->second.lease.has_value() &&
              !(owner && owner.address() == held->second)) {
            Log().info("shard {} of a lost coordinator gives way to a new one's", name);
            DropShard(self, name);
            self->state.owner_of.erase(held);
          }
        }
        if (self->state.shards->count(name) > 0) {
          return StatusToError(absl::AlreadyExistsError(
              absl::StrCat("ps node ", self->state.task, " already holds shard ", name)));
        }
        if (absl::Status valid = ShardState::Validate(spec); !valid.ok()) {
          return StatusToError(valid);
        }
        // Note [Shards initialize themselves] (ps_node_actor.h).
        shard_actor actor =
            self->spawn(BuildingShardActor, spec, std::shared_ptr<const SliceStore>());
        self->monitor(actor);
        self->state.shards->emplace(name, actor);
        self->state.by_id.emplace(actor.id(), actor);
        self->state.specs[name] = spec;
        if (owner) {
          WatchOwner(self, owner);
          self->state.owner_of[name] = owner.address();
        }
        auto promise = self->make_response_promise<shard_actor>();
        ShardClient::Send(
            self, actor, InfoOp{},
            [self, promise, actor, name](absl::StatusOr<ShardOpResult> built) mutable {
              if (built.ok()) {
                Log().debug("holds shard {}", name);
                promise.deliver(actor);
                return;
              }
              // The build failed, or the shard was dropped while building: its name is free.
              auto it = self->state.shards->find(name);
              if (it != self->state.shards->end() && it->second == actor) {
                DropShard(self, name);
                self->state.owner_of.erase(name);
              }
              promise.deliver(StatusToError(built.status()));
            });
        return promise;
      },
      [self](drop_shard_atom, const std::string& name,
             const caf::actor& owner) -> caf::result<void> {
        if (self->state.shards->count(name) == 0) {
          return StatusToError(absl::NotFoundError(
              absl::StrCat("ps node ", self->state.task, " holds no shard ", name)));
        }
        auto owned = self->state.owner_of.find(name);
        const caf::actor_addr holder =
            owned == self->state.owner_of.end() ? caf::actor_addr() : owned->second;
        if (holder != owner.address()) {
          return StatusToError(absl::FailedPreconditionError(absl::StrCat(
              "ps node ", self->state.task, ": shard ", name,
              " belongs to another coordinator (a newer one, after this one was lost)")));
        }
        DropShard(self, name);
        self->state.owner_of.erase(name);
        Log().debug("dropped shard {}", name);
        return caf::unit;
      },
      [self](lookup_atom, const std::string& name) -> caf::result<shard_actor> {
        auto it = self->state.shards->find(name);
        if (it == self->state.shards->end()) {
          return StatusToError(absl::NotFoundError(
              absl::StrCat("ps node ", self->state.task, " holds no shard ", name)));
        }
        return it->second;
      },
      [self](list_atom) -> std::vector<std::string> {
        std::vector<std::string> names;
        names.reserve(self->state.shards->size());
        for (const auto& entry : *self->state.shards) names.push_back(entry.first);
        return names;
      },
      [self](stats_atom) -> caf::result<PsNodeStats> {
        return CollectStats(self, kDefaultHottestRows);
      },
      [self](stats_atom, int32_t hottest_rows) -> caf::result<PsNodeStats> {
        return CollectStats(self, hottest_rows);
      },
      [self](adopt_atom, int32_t task) -> caf::result<void> {
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
      },
      [self](reclaim_atom, const caf::actor& owner, const std::string& run)
          -> std::vector<HeldShard> { return Reclaim(self, owner, run); },
      [self](lease_atom, uint64_t lease) {
        for (auto& [owner, entry] : self->state.owners) {
          if (entry.lease == lease) {
            return DropOwner(
                self, owner,
                absl::StrCat("not back within its lease of ",
                             std::chrono::duration<double>(self->state.lease).count(), " s"));
          }
        }
      },
      [self](replicate_atom, const std::string& name, const caf::actor& backup,
             const std::string& backup_address, bool send_state) -> caf::result<int64_t> {
        return Replicate(self, name, backup, backup_address, send_state);
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
