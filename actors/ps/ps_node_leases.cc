// A PS node's owners and their leases (Note [Shards die with their coordinator]): watching an
// owner, keeping a lost owner's shards for a lease, dropping them when it ends, and handing them
// back on reclaim_atom.
#include <caf/actor_cast.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/ps/internal/ps_node_parts.h"
#include "core/base/logging.h"

namespace tessera::ps_node_internal {

std::vector<HeldShard> Reclaim(NodePointer self, const caf::actor& owner, const std::string& run);

namespace {

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

// How many owners other than `claimant` named `run`, hold shards here and have not gone down.
size_t LivePredecessors(const PsNodeState& state, const caf::actor_addr& claimant,
                        const std::string& run) {
  size_t live = 0;
  for (const auto& [address, entry] : state.owners) {
    if (address != claimant && entry.run == run && !entry.lease.has_value() &&
        !ShardsOf(state, address).empty()) {
      ++live;
    }
  }
  return live;
}

// Answers every waiting claim whose run has no live predecessor left.
void AnswerClaims(NodePointer self) {
  std::vector<PsNodeState::Claim>& claims = self->state.claims;
  for (size_t k = 0; k < claims.size();) {
    if (LivePredecessors(self->state, claims[k].owner.address(), claims[k].run) > 0) {
      ++k;
      continue;
    }
    PsNodeState::Claim claim = std::move(claims[k]);
    claims.erase(claims.begin() + static_cast<std::ptrdiff_t>(k));
    claim.promise.deliver(Reclaim(self, claim.owner, claim.run));
  }
}

}  // namespace

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

caf::result<std::vector<HeldShard>> Claim(NodePointer self, const caf::actor& owner,
                                          const std::string& run) {
  if (!owner || run.empty()) return Reclaim(self, owner, run);
  const size_t live = LivePredecessors(self->state, owner.address(), run);
  if (live == 0) return Reclaim(self, owner, run);
  const uint64_t timer = ++self->state.leases_started;
  auto promise = self->make_response_promise<std::vector<HeldShard>>();
  self->state.claims.push_back(PsNodeState::Claim{owner, run, timer, promise});
  Log().info(
      "a coordinator claims run {}'s shards while {} earlier owner(s) of the run still hold "
      "some: waiting up to {} s for them to go",
      run, live, std::chrono::duration<double>(kClaimPatience).count());
  self->delayed_send(self, kClaimPatience, lease_atom::value, timer);
  return promise;
}

// reclaim_atom, answered (Note [Shards die with their coordinator]).
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
                             state.backed_up.count(name) > 0});
  }
  if (was_lost) Log().info("the coordinator is back: it reclaimed {} shard(s)", held.size());
  if (inherited > 0) {
    Log().info("a coordinator of the same run took over {} shard(s) of its lost predecessor",
               inherited);
  }
  return held;
}

void EndLease(NodePointer self, uint64_t lease) {
  for (auto& [owner, entry] : self->state.owners) {
    if (entry.lease == lease) {
      DropOwner(self, owner,
                absl::StrCat("not back within its lease of ",
                             std::chrono::duration<double>(self->state.lease).count(), " s"));
      return AnswerClaims(self);
    }
  }
  std::vector<PsNodeState::Claim>& claims = self->state.claims;
  for (auto it = claims.begin(); it != claims.end(); ++it) {
    if (it->timer != lease) continue;
    PsNodeState::Claim claim = std::move(*it);
    claims.erase(it);
    Log().warn(
        "run {}: an earlier owner of the run still holds shards after {} s; the claim "
        "goes on without them",
        claim.run, std::chrono::duration<double>(kClaimPatience).count());
    claim.promise.deliver(Reclaim(self, claim.owner, claim.run));
    return;
  }
}

bool OnOwnerDown(NodePointer self, const caf::down_msg& msg) {
  PsNodeState& state = self->state;
  auto owner = state.owners.find(msg.source);
  if (owner == state.owners.end()) return false;
  // A down from a proxy the node no longer watches (the owner came back on a newer
  // connection first) is stale.
  if (caf::actor_cast<caf::actor_control_block*>(owner->second.handle) !=
      caf::actor_cast<caf::actor_control_block*>(msg.source)) {
    return true;
  }
  const std::string why = self->system().render(msg.reason);
  const size_t held = ShardsOf(state, owner->first).size();
  if (state.lease.count() <= 0 || held == 0) {
    DropOwner(self, owner->first, why);
    AnswerClaims(self);
    return true;
  }
  const uint64_t lease = ++state.leases_started;
  owner->second.lease = lease;
  Log().warn(
      "the coordinator that owns {} shard(s) is gone ({}): keeping them for {} s, "
      "for it to reclaim",
      held, why, std::chrono::duration<double>(state.lease).count());
  self->delayed_send(self, state.lease, lease_atom::value, lease);
  AnswerClaims(self);
  return true;
}

}  // namespace tessera::ps_node_internal
