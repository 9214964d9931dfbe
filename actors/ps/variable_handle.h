// The messages that carry actor handles (they need the actor interfaces, which include
// actors/base/messages.h, so they cannot sit there; their codecs are here beside them and registered
// with the others in messages.cc):
//   - VariableHandle: everything needed to address one variable's shards — its shape and layout,
//     the shard actors in shard order and the PS task holding each. Built by the strategy
//     (coordinator/ps/strategy.h).
//   - VariableDirectory: every variable's handle and the PS nodes, what a networked worker
//     fetches from its coordinator to reach the variables.
//
// Thread-safety: immutable values once built.
#pragma once

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/ps/ps_node_actor.h"
#include "actors/ps/shard_actor.h"
#include "core/base/tensor.h"
#include "core/ps/shard_state.h"
#include "core/training/job_description.h"
#include "core/variables/aggregation.h"
#include "core/variables/shard_layout.h"

namespace tessera {

struct VariableHandle {
  std::string name;
  Shape shape;  // the full variable's shape
  DType dtype = DType::kFloat32;
  ShardLayout layout;               // rows over shards ("div")
  std::vector<shard_actor> shards;  // layout.num_shards() entries, in shard order
  std::vector<int32_t> ps_tasks;    // the PS task holding each shard
  VariableSynchronization synchronization = VariableSynchronization::kAuto;
  VariableAggregation aggregation = VariableAggregation::kNone;
  bool trainable = true;

  int64_t num_shards() const { return static_cast<int64_t>(shards.size()); }
  // "emb/part_1" (or "emb" when unpartitioned).
  std::string ShardNameOf(int64_t shard) const {
    return ShardName(name, static_cast<int32_t>(shard), static_cast<int32_t>(shards.size()));
  }
  // The PS task of shard `shard`, -1 when unknown.
  int32_t PsTaskOf(int64_t shard) const {
    return shard >= 0 && shard < static_cast<int64_t>(ps_tasks.size()) ? ps_tasks[shard] : -1;
  }
};

// A handle travels to networked workers inside a VariableDirectory (actors/scheduling/coordinator_actor.h):
// the shard handles as CAF actor handles, the layout as (rows, shards), rebuilt and checked on
// arrival so a forged handle cannot describe an impossible layout.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, VariableHandle& x) {
  int64_t rows = x.layout.rows();
  int64_t num_shards = x.layout.num_shards();
  int32_t synchronization = static_cast<int32_t>(x.synchronization);
  int32_t aggregation = static_cast<int32_t>(x.aggregation);
  auto rebuild = caf::meta::load_callback([&]() -> caf::error {
    absl::StatusOr<ShardLayout> layout = ShardLayout::Make(rows, num_shards);
    if (!layout.ok()) return StatusToError(layout.status());
    if (static_cast<int64_t>(x.shards.size()) != num_shards ||
        x.ps_tasks.size() != x.shards.size() || synchronization < 0 || synchronization > 2 ||
        aggregation < 0 || aggregation > 3) {
      return StatusToError(absl::DataLossError(
          absl::StrCat("malformed handle of variable ", x.name, ": ", x.shards.size(),
                       " shards for a layout of ", num_shards)));
    }
    x.layout = *layout;
    x.synchronization = static_cast<VariableSynchronization>(synchronization);
    x.aggregation = static_cast<VariableAggregation>(aggregation);
    return caf::none;
  });
  return f(caf::meta::type_name("tessera::VariableHandle"), x.name, x.shape, x.dtype, rows,
           num_shards, x.shards, x.ps_tasks, synchronization, aggregation, x.trainable, rebuild);
}

// What a networked worker needs to reach the variables: every variable's handle (shard actors
// included), and the generation, which changes whenever shards move (a lost PS was restored
// elsewhere). A worker joins with the generation it fetched; an older one is refused.
struct VariableDirectory {
  int64_t generation = 0;
  int32_t num_workers = 0;  // worker slots
  std::vector<VariableHandle> variables;
  std::vector<std::string> ps_addresses;  // networked: "host:port" of each PS task's node now
  std::vector<ps_node_actor> ps_nodes;    // networked: each PS task's node actor now
  JobDescription job;  // networked: the coordinator's job, which a joining worker must match
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, VariableDirectory& x) {
  return f(caf::meta::type_name("tessera::VariableDirectory"), x.generation, x.num_workers,
           x.variables, x.ps_addresses, x.ps_nodes, x.job);
}

}  // namespace tessera
