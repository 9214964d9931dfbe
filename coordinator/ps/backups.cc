// ParameterServerStrategy's backups (Note [Backups on the next PS], strategy.h): attaching them
// to their primaries, promoting a lost PS's backups, striking a failed one and rebuilding the
// missing ones.
#include "coordinator/ps/strategy.h"

#include <algorithm>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/error.h"
#include "coordinator/ps/internal/await.h"
#include "coordinator/ps/internal/ps_request_timeout.h"
#include "core/base/fan_in.h"
#include "tessera/status.h"

namespace tessera {

using internal::kPsRequestTimeout;

absl::StatusOr<std::vector<std::string>> ShardPlacement::PromoteBackupsOf(int32_t task) {
  std::vector<std::string> unbacked;
  for (const PlacedShard& placed : shards_) {
    if (placed.task == task && (!placed.backup || placed.backup_task == task)) {
      unbacked.push_back(placed.name());
    }
  }
  if (!unbacked.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no backup to promote for ", absl::StrJoin(unbacked, ", ")));
  }
  std::vector<std::string> touched;
  for (PlacedShard& placed : shards_) {
    if (placed.backup_task == task) {  // a backup the lost node held
      placed.backup = shard_actor();
      placed.backup_task = -1;
      TellNoBackup(placed);
      continue;
    }
    if (placed.task != task) continue;
    Repoint(placed, placed.backup, placed.backup_task);
    placed.task = placed.backup_task;
    placed.backup = shard_actor();
    placed.backup_task = -1;
    if (touched.empty() || touched.back() != placed.variable) touched.push_back(placed.variable);
  }
  return touched;
}

void ShardPlacement::TellNoBackup(const PlacedShard& primary) {
  caf::anon_send(cluster_.actors().ps_node(primary.task), backup_atom::value, primary.name(),
                 caf::actor(), std::string(), false);
}

absl::StatusOr<int32_t> ShardPlacement::StrikeBackup(const std::string& shard,
                                                     const caf::actor_addr& backup) {
  for (PlacedShard& placed : shards_) {
    if (placed.name() != shard || !placed.backup || placed.backup.address() != backup) continue;
    const int32_t task = placed.backup_task;
    placed.backup = shard_actor();
    placed.backup_task = -1;
    TellNoBackup(placed);
    DropShards({{task, shard}});
    return task;
  }
  return absl::NotFoundError(
      absl::StrCat("the failed backup is not shard ", shard, "'s backup (any more)"));
}

std::optional<caf::actor_addr> ShardPlacement::BackupOf(const std::string& shard,
                                                        int32_t task) const {
  for (const PlacedShard& placed : shards_) {
    if (placed.task == task && placed.name() == shard && placed.backup) {
      return placed.backup.address();
    }
  }
  return std::nullopt;
}

int32_t ShardPlacement::ShardsWithoutBackup() const {
  if (shard_copies_ < 2) return 0;
  return static_cast<int32_t>(std::count_if(shards_.begin(), shards_.end(),
                                            [](const PlacedShard& p) { return !p.backup; }));
}

absl::StatusOr<int32_t> ShardPlacement::RebuildBackups(const std::vector<int32_t>& unavailable) {
  if (shard_copies_ < 2) return 0;
  const int32_t num_ps = cluster_.num_ps();
  auto usable = [&unavailable](int32_t t) {
    return std::find(unavailable.begin(), unavailable.end(), t) == unavailable.end();
  };
  std::vector<size_t> rebuilt;  // indices into shards_
  std::vector<PlacedShard> planned;
  std::vector<std::string> nowhere;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const PlacedShard& placed = shards_[i];
    if (placed.backup) continue;
    std::optional<int32_t> chosen;
    for (int32_t step = 1; step < num_ps && !chosen.has_value(); ++step) {
      const int32_t t = (placed.task + step) % num_ps;
      if (usable(t)) chosen = t;
    }
    if (!chosen.has_value()) {
      nowhere.push_back(placed.name());
      continue;
    }
    PlacedShard backup = placed;
    backup.task = *chosen;
    planned.push_back(std::move(backup));
    rebuilt.push_back(i);
  }
  if (!planned.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<shard_actor> backups, CreateShards(planned));
    std::vector<PlacedShard> primaries;
    for (size_t i : rebuilt) primaries.push_back(shards_[i]);
    if (absl::Status attached = AttachBackups(primaries, planned, backups, true); !attached.ok()) {
      std::vector<std::pair<int32_t, std::string>> to_drop;
      for (const PlacedShard& backup : planned) to_drop.emplace_back(backup.task, backup.name());
      DropShards(to_drop);
      return attached;
    }
    for (size_t k = 0; k < rebuilt.size(); ++k) {
      shards_[rebuilt[k]].backup = backups[k];
      shards_[rebuilt[k]].backup_task = planned[k].task;
    }
  }
  if (!nowhere.empty()) {
    return absl::UnavailableError(absl::StrCat("no live parameter server besides their own for ",
                                               "the backups of ", absl::StrJoin(nowhere, ", ")));
  }
  return static_cast<int32_t>(planned.size());
}

// Note [Two PS nodes never connect to each other at once]
// Across processes a primary's node first connects to its backup's node (Note [Backups reached
// directly], actors/ps/ps_node_actor.h). With backups on the next task, node t connects to t + 1
// while t + 1 connects to t. CAF 0.17's middleman mishandles two connections opened in opposite
// directions at the same moment: when both server handshakes arrive before either client
// handshake, each node keeps a different connection as its route and sends heartbeats only on
// the other, so after a quiet spell longer than the connection timeout one side closes a
// connection it thinks is the node's last, drops every proxy of a live node — each shard's
// backup reported down — and loses its route to it (a two-node program that connects both ways
// at once, then idles 3.5 s, saw it in 1 of 12 rounds; connecting one way first, 0 of 16). The
// CI run that found lost updates with shard backups had such a quiet spell: its workers spent
// seconds generating their data between the backups' attachment and the first step. So the
// backups are attached in two rounds, the second once the first is done: first every primary
// whose backup's task is higher than its own, then the rest; within a round all connections go
// the same way between any two nodes, and in the second round each pair is connected already (a
// second connection to a connected node is closed at once as redundant, harmlessly).
absl::Status ShardPlacement::AttachBackups(const std::vector<PlacedShard>& primaries,
                                           const std::vector<PlacedShard>& placed_backups,
                                           const std::vector<shard_actor>& backups,
                                           bool send_state) {
  const std::vector<std::string> addresses =
      cluster_.networked() ? cluster_.ps_addresses() : std::vector<std::string>{};
  for (const bool upward : {true, false}) {
    std::vector<size_t> round;
    for (size_t k = 0; k < primaries.size(); ++k) {
      if ((primaries[k].task < placed_backups[k].task) == upward) round.push_back(k);
    }
    if (round.empty()) continue;
    std::vector<ps_node_actor> nodes;
    std::vector<std::string> backup_addresses;
    for (size_t k : round) {
      nodes.push_back(cluster_.actors().ps_node(primaries[k].task));
      backup_addresses.push_back(addresses.empty() ? std::string()
                                                   : addresses.at(placed_backups[k].task));
    }
    TESSERA_RETURN_IF_ERROR(internal::AwaitStatus(
        cluster_.actors().system(), [&round, &primaries, &backups, &nodes, &backup_addresses,
                                     send_state](caf::event_based_actor* self, auto done) {
          auto join = FanIn<int64_t>::Start(round.size(),
                                            [self, done](absl::StatusOr<std::vector<int64_t>> all) {
                                              self->quit();
                                              done(all.status());
                                            });
          for (size_t j = 0; j < round.size(); ++j) {
            const size_t k = round[j];
            self->request(nodes[j], kPsRequestTimeout, backup_atom::value, primaries[k].name(),
                          caf::actor_cast<caf::actor>(backups[k]), backup_addresses[j], send_state)
                .then([slot = join->Slot(j)](int64_t version) { slot(version); },
                      [slot = join->Slot(j)](caf::error& err) {
                        slot(Annotate(ErrorToStatus(err), "giving a shard its backup"));
                      });
          }
        }));
  }
  return absl::OkStatus();
}

}  // namespace tessera
