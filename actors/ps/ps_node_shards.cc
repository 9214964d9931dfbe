// The shards a PS node hosts: creating them (Note [Shards initialize themselves]), dropping them,
// finding them, and stopping them with the node (Note [Shard lifetimes]).
#include <caf/exit_reason.hpp>
#include <caf/make_message.hpp>
#include <caf/message_id.hpp>
#include <caf/system_messages.hpp>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/ps/internal/ps_node_parts.h"
#include "actors/ps/shard_actor.h"
#include "actors/ps/shard_client.h"
#include "core/base/logging.h"

namespace tessera::ps_node_internal {

// Note [Shard lifetimes] (ps_node_actor.h): when the node exits, each live shard and each forward
// link gets an exit message with the node's reason (a normal exit becomes user_shutdown, which
// they do not ignore).
void StopShardsOnExit(NodePointer self) {
  self->attach_functor([shards = self->state.shards, links = self->state.links,
                        node = self->address()](const caf::error& reason,
                                                caf::execution_unit* host) {
    caf::error why = reason;
    if (!why || why == caf::exit_reason::normal) why = caf::exit_reason::user_shutdown;
    for (const auto& entry : *shards) {
      entry.second->enqueue(nullptr, caf::make_message_id(),
                            caf::make_message(caf::exit_msg{node, why}), host);
    }
    for (const auto& entry : *links) {
      entry.second->enqueue(nullptr, caf::make_message_id(),
                            caf::make_message(caf::exit_msg{node, why}), host);
    }
    shards->clear();
    links->clear();
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
  self->state.backed_up.erase(name);
  self->state.shards->erase(it);
}

caf::result<shard_actor> CreateShard(NodePointer self, const ShardSpec& spec,
                                     const caf::actor& owner) {
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
          Log().info("holds shard {}", name);
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
}

caf::result<void> DropShardOf(NodePointer self, const std::string& name, const caf::actor& owner) {
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
  Log().info("dropped shard {}, as its coordinator asked", name);
  return caf::unit;
}

caf::result<shard_actor> LookUpShard(NodePointer self, const std::string& name) {
  auto it = self->state.shards->find(name);
  if (it == self->state.shards->end()) {
    return StatusToError(absl::NotFoundError(
        absl::StrCat("ps node ", self->state.task, " holds no shard ", name)));
  }
  return it->second;
}

std::vector<std::string> ListShards(NodePointer self) {
  std::vector<std::string> names;
  names.reserve(self->state.shards->size());
  for (const auto& entry : *self->state.shards) names.push_back(entry.first);
  return names;
}

bool ForgetShard(NodePointer self, const caf::actor_addr& source) {
  PsNodeState& state = self->state;
  auto& shards = *state.shards;
  for (auto it = shards.begin(); it != shards.end(); ++it) {
    if (it->second.address() == source) {
      state.owner_of.erase(it->first);
      state.by_id.erase(it->second.id());
      state.specs.erase(it->first);
      state.backed_up.erase(it->first);
      shards.erase(it);
      return true;
    }
  }
  return false;
}

}  // namespace tessera::ps_node_internal
