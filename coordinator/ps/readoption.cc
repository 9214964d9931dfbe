// ParameterServerStrategy's re-adoption of shards that outlived their coordinator: a restarted
// coordinator's claim on its run's shards (Note [A restarted coordinator re-adopts its run's
// shards], strategy.h) and a stalled one's taking back a PS's shards (Note [A stalled coordinator
// re-adopts its shards], coordinator/scheduling/ps_recovery.cc).
#include "coordinator/ps/strategy.h"

#include <algorithm>
#include <caf/event_based_actor.hpp>
#include <map>
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
#include "core/base/logging.h"
#include "tessera/status.h"

namespace tessera {

using internal::kPsRequestTimeout;

absl::StatusOr<int64_t> ShardPlacement::ClaimShardsOfRun(const std::string& run) {
  if (!cluster_.networked()) return 0;
  const int32_t num_ps = cluster_.num_ps();
  std::vector<ps_node_actor> nodes;
  for (int32_t task = 0; task < num_ps; ++task) nodes.push_back(cluster_.actors().ps_node(task));
  const caf::actor owner = cluster_.actors().session();
  using Claim = std::vector<HeldShard>;
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Claim> claims,
      internal::Await<std::vector<Claim>>(
          cluster_.actors().system(),
          [&nodes, owner, &run](caf::event_based_actor* self, auto done) {
            auto join = FanIn<Claim>::Start(nodes.size(),
                                            [self, done](absl::StatusOr<std::vector<Claim>> all) {
                                              self->quit();
                                              done(std::move(all));
                                            });
            for (size_t task = 0; task < nodes.size(); ++task) {
              self->request(nodes[task], kPsRequestTimeout, reclaim_atom::value, owner, run)
                  .then([slot = join->Slot(task)](Claim& held) { slot(std::move(held)); },
                        [slot = join->Slot(task), task](caf::error& err) {
                          slot(Annotate(ErrorToStatus(err),
                                        absl::StrCat("claiming the run's shards on ps ", task)));
                        });
            }
          }));
  int64_t claimed = 0;
  claimed_.clear();
  for (int32_t task = 0; task < num_ps; ++task) {
    claimed += static_cast<int64_t>(claims[task].size());
    if (!claims[task].empty()) claimed_[task] = std::move(claims[task]);
  }
  return claimed;
}

namespace {

// Whether a claimed shard's spec is the planned one's, the initializer aside (Note [A restarted
// coordinator re-adopts its run's shards]).
bool SameShard(const ShardSpec& held, const ShardSpec& planned) {
  const auto same_optimizer = [](const std::optional<OptimizerSpec>& a,
                                 const std::optional<OptimizerSpec>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a.has_value() || (a->name == b->name && a->params == b->params);
  };
  return held.variable == planned.variable && held.shard_index == planned.shard_index &&
         held.num_shards == planned.num_shards &&
         held.full_shape.dims() == planned.full_shape.dims() &&
         held.row_offset == planned.row_offset && held.rows == planned.rows &&
         held.dtype == planned.dtype && same_optimizer(held.optimizer, planned.optimizer);
}

}  // namespace

std::optional<std::vector<shard_actor>> ShardPlacement::AdoptClaimed(
    const std::vector<PlacedShard>& all, size_t num_primaries) {
  if (claimed_.empty()) return std::nullopt;
  std::map<int32_t, std::vector<HeldShard>> claimed = std::move(claimed_);
  claimed_.clear();
  size_t total = 0;
  for (const auto& [task, held] : claimed) total += held.size();
  std::vector<shard_actor> adopted;
  std::string mismatch;
  for (size_t k = 0; k < all.size() && mismatch.empty(); ++k) {
    const PlacedShard& placed = all[k];
    const std::string name = placed.name();
    const bool forwards = shard_copies_ == 2 && k < num_primaries;
    const std::vector<HeldShard>& held = claimed[placed.task];
    auto it = std::find_if(held.begin(), held.end(),
                           [&name](const HeldShard& h) { return h.name == name; });
    if (it == held.end()) {
      mismatch = absl::StrCat("ps ", placed.task, " holds no ", name);
    } else if (!SameShard(it->spec, placed.spec)) {
      mismatch = absl::StrCat(name, " on ps ", placed.task, " is not the shard planned");
    } else if (it->backed_up != forwards) {
      mismatch = absl::StrCat(
          name, " on ps ", placed.task, " is ",
          it->backed_up ? "a primary, not the backup planned" : "not a primary with a backup");
    } else {
      adopted.push_back(it->shard);
    }
  }
  if (mismatch.empty() && adopted.size() == total) {
    adopted_shards_ = static_cast<int64_t>(adopted.size());
    return adopted;
  }
  if (mismatch.empty()) {
    mismatch = absl::StrCat(total - adopted.size(),
                            " more than planned; a run's variables are adopted only when "
                            "created in one call, CreateVariables or CreateModelVariables");
  }
  Log().warn(
      "the lost coordinator's {} shard(s) are not this run's layout ({}): dropping them "
      "to create the shards afresh",
      total, mismatch);
  std::vector<std::pair<int32_t, std::string>> to_drop;
  for (const auto& [task, held] : claimed) {
    for (const HeldShard& shard : held) to_drop.emplace_back(task, shard.name);
  }
  DropShards(to_drop);
  return std::nullopt;
}

absl::Status ShardPlacement::AdoptShardsOn(int32_t task,
                                           const std::map<std::string, shard_actor>& held) {
  std::vector<std::string> missing;
  for (const PlacedShard& placed : shards_) {
    const std::string name =
        ShardName(placed.spec.variable, placed.spec.shard_index, placed.spec.num_shards);
    if (placed.task == task && held.count(name) == 0) missing.push_back(name);
  }
  if (!missing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("ps ", task, " no longer holds ", absl::StrJoin(missing, ", ")));
  }
  for (const PlacedShard& placed : shards_) {
    if (placed.task != task) continue;
    Repoint(placed, held.at(placed.name()), task);
  }
  return absl::OkStatus();
}

}  // namespace tessera
