// Fault injection for tests, kept out of Cluster's API: killing a PS node, and waiting for actors
// to be down. Header-only: nothing but the tests that include it carries it.
//
// Example:
//   REQUIRE(testing::KillPs(*cluster, 1).ok());  // ps 1 and its shards are down on return
//   REQUIRE(testing::AwaitDown(cluster->actors().system(), lost));  // e.g. a lost PS's proxy
//
// Thread-safety: safe from any non-actor thread, as Cluster's accessors.
#pragma once

#include <algorithm>
#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/after.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actors/base/messages.h"
#include "cluster/base/cluster.h"

namespace tessera::testing {

// How long KillPs waits for what it killed; a healthy kill takes milliseconds.
inline constexpr absl::Duration kDownPatience = absl::Seconds(20);

// Waits until every actor of `watched` is down (true), or `timeout` passes (false): the event a
// test means when it would otherwise sleep after a kill or a shutdown. An actor already down
// counts at once; null handles are skipped. A proxy of a remote actor goes down when that actor
// does or when its connection is lost. (Strong handles: monitoring an actor by its address alone
// could reach one already destroyed.)
inline bool AwaitDown(caf::actor_system& system, const std::vector<caf::actor>& watched,
                      absl::Duration timeout = kDownPatience) {
  caf::scoped_actor self(system);
  std::set<caf::actor_addr> pending;
  for (const caf::actor& actor : watched) {
    if (!actor) continue;
    pending.insert(actor.address());
    self->monitor(actor);
  }
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  while (!pending.empty() && !timed_out) {
    const absl::Duration left = std::max(deadline - absl::Now(), absl::ZeroDuration());
    self->receive([&](caf::down_msg& down) { pending.erase(down.source); },
                  caf::after(absl::ToChronoMilliseconds(left)) >> [&] { timed_out = true; });
  }
  return pending.empty();
}

// The same for one actor, of any handle type.
template <class Handle>
bool AwaitDown(caf::actor_system& system, const Handle& actor,
               absl::Duration timeout = kDownPatience) {
  return AwaitDown(system, std::vector<caf::actor>{caf::actor_cast<caf::actor>(actor)}, timeout);
}

// The shards PS node `node` holds now (empty when it cannot tell).
inline std::vector<caf::actor> ShardsHeldBy(caf::actor_system& system, const ps_node_actor& node) {
  caf::scoped_actor self(system);
  const auto patience = absl::ToChronoMilliseconds(kDownPatience);
  std::vector<std::string> names;
  self->request(node, patience, list_atom::value)
      .receive([&](std::vector<std::string>& listed) { names = std::move(listed); },
               [](caf::error&) {});
  std::vector<caf::actor> shards;
  for (const std::string& name : names) {
    self->request(node, patience, lookup_atom::value, name)
        .receive([&](shard_actor& shard) { shards.push_back(caf::actor_cast<caf::actor>(shard)); },
                 [](caf::error&) {});
  }
  return shards;
}

// Kills PS node `task` of `cluster` and every shard on it, and returns once the node and those
// shards are down, so a request sent to them afterwards fails at once (CAF closes an actor's
// mailbox before it tells its monitors) — what a test would otherwise sleep for. InvalidArgument
// for a task out of range; DeadlineExceeded when they are not all down within kDownPatience.
inline absl::Status KillPs(Cluster& cluster, int32_t task) {
  if (task < 0 || task >= cluster.num_ps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no PS task ", task, " (the cluster has ", cluster.num_ps(), ")"));
  }
  caf::actor_system& system = cluster.actors().system();
  const ps_node_actor node = cluster.actors().ps_node(task);
  std::vector<caf::actor> doomed = ShardsHeldBy(system, node);
  doomed.push_back(caf::actor_cast<caf::actor>(node));
  caf::anon_send_exit(node, caf::exit_reason::kill);
  if (!AwaitDown(system, doomed)) {
    return absl::DeadlineExceededError(absl::StrCat("PS task ", task,
                                                    " and its shards were not down within ",
                                                    absl::FormatDuration(kDownPatience)));
  }
  return absl::OkStatus();
}

}  // namespace tessera::testing
