// The actor handles that travel in messages — each actor's typed_actor interface, whose requests,
// replies and errors its own header documents — and the messages that carry them (HeldShard,
// VariableHandle, VariableDirectory). Part of the registry of message types (actors/base/
// messages.h, on which it builds); the actor headers include it, never the other way round, so
// the registry needs no actor header.
//   - VariableHandle: everything needed to address one variable's shards — its shape and layout,
//     the shard actors in shard order and the PS task holding each. Built by the strategy
//     (coordinator/ps/strategy.h).
//   - VariableDirectory: every variable's handle and the PS nodes, what a networked worker
//     fetches from its coordinator to reach the variables.
//
// Thread-safety: handles and messages are values (immutable once built).
#pragma once

#include <caf/actor.hpp>
#include <caf/allowed_unsafe_message_type.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "core/ps/shard_state.h"
#include "core/scheduling/closure.h"
#include "core/training/job_description.h"
#include "core/variables/aggregation.h"
#include "core/variables/shard_layout.h"
#include "tessera/tensor.h"

namespace tessera {

class FaultInjector;  // actors/scheduling/fault_injector.h

// A shard actor (actors/ps/shard_actor.h).
using shard_actor =
    caf::typed_actor<caf::replies_to<ShardOp>::with<ShardOpResult>,
                     caf::replies_to<std::vector<ShardOp>>::with<std::vector<ShardReply>>,
                     caf::replies_to<backup_atom, caf::actor, caf::actor, bool>::with<int64_t>>;

// A shard a PS node gives back on reclaim_atom: the spec it was created from, and whether it
// forwards its changes to a backup (a primary with a backup, Note [Shard backups]).
struct HeldShard {
  std::string name;
  shard_actor shard;
  ShardSpec spec;
  bool backed_up = false;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, HeldShard& x) {
  return f(caf::meta::type_name("tessera::HeldShard"), x.name, x.shard, x.spec, x.backed_up);
}

// A PS node actor (actors/ps/ps_node_actor.h).
using ps_node_actor = caf::typed_actor<
    caf::replies_to<create_shard_atom, ShardSpec, caf::actor>::with<shard_actor>,
    caf::replies_to<drop_shard_atom, std::string, caf::actor>::with<void>,
    caf::replies_to<lookup_atom, std::string>::with<shard_actor>,                          //
    caf::replies_to<list_atom>::with<std::vector<std::string>>,                            //
    caf::replies_to<stats_atom>::with<PsNodeStats>,                                        //
    caf::replies_to<stats_atom, int32_t>::with<PsNodeStats>,                               //
    caf::replies_to<adopt_atom, int32_t>::with<void>,                                      //
    caf::replies_to<reclaim_atom, caf::actor, std::string>::with<std::vector<HeldShard>>,  //
    caf::reacts_to<lease_atom, uint64_t>,                                                  //
    caf::replies_to<backup_atom, std::string, caf::actor, std::string, bool>::with<int64_t>,
    caf::reacts_to<backup_lost_atom, std::string, caf::actor>,  //
    caf::replies_to<ping_atom>::with<pong_atom>,                //
    caf::replies_to<batch_atom, std::vector<ShardCall>>::with<std::vector<ShardReply>>>;

// A worker actor (actors/scheduling/worker_actor.h).
using worker_actor = caf::typed_actor<caf::replies_to<run_atom, Closure>::with<ClosureValues>>;

// What addresses one variable's shards (see above).
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

// A handle travels to networked workers inside a VariableDirectory
// (actors/scheduling/coordinator_actor.h): the shard handles as CAF actor handles, the layout as
// (rows, shards), rebuilt and checked on arrival so a forged handle cannot describe an impossible
// layout.
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

// The coordinator actor (actors/scheduling/coordinator_actor.h).
using coordinator_actor = caf::typed_actor<
    caf::reacts_to<dispatch_atom>,                                         //
    caf::reacts_to<add_worker_atom, int32_t>,                              //
    caf::replies_to<kill_worker_atom, int32_t>::with<bool>,                //
    caf::reacts_to<restart_atom, int32_t, int64_t>,                        //
    caf::reacts_to<watch_ps_atom, ps_node_actor, int32_t, std::string>,    //
    caf::reacts_to<chaos_atom, std::shared_ptr<FaultInjector>>,            //
    caf::reacts_to<chaos_atom, int64_t>,                                   //
    caf::replies_to<workers_atom>::with<WorkerPoolStatus>,                 //
    caf::replies_to<directory_atom, int32_t, JobDescription>::with<VariableDirectory>,  //
    caf::reacts_to<directory_atom, VariableDirectory>,                     //
    caf::replies_to<join_atom, worker_actor, int32_t, int64_t>::with<int32_t>,  //
    caf::reacts_to<abort_atom, std::string>>;

// A mirrored replica actor (actors/mirrored/mirrored_replica_actor.h).
using mirrored_replica_actor = caf::typed_actor<
    caf::replies_to<mirror_link_atom, MirrorRing>::with<bool>,
    caf::replies_to<mirror_step_atom, int64_t, int64_t, int64_t>::with<MirrorStepResult>,
    caf::replies_to<mirror_run_atom, int64_t, std::string, ClosureValues>::with<ClosureValues>,
    caf::replies_to<mirror_create_atom, MirroredVariableSpec>::with<bool>,
    caf::replies_to<mirror_read_atom, std::string>::with<TensorSlice>,
    caf::replies_to<mirror_load_atom, TensorSlice>::with<bool>,
    caf::replies_to<mirror_save_atom, std::string, SaveOp>::with<SavedSlice>,
    caf::replies_to<mirror_eval_atom, int64_t>::with<ClosureValues>,
    caf::replies_to<mirror_probe_atom, int64_t, int64_t, int64_t>::with<double>,
    caf::reacts_to<mirror_ring_atom, int64_t, RingChunk>,
    caf::reacts_to<mirror_abort_atom, int64_t>,
    caf::replies_to<mirror_listen_atom>::with<int32_t, std::string>,
    caf::reacts_to<mirror_data_atom, uint64_t, int64_t, RingChunk>,
    caf::reacts_to<mirror_data_atom, uint64_t, std::string>>;

}  // namespace tessera

// An injector travels to the coordinator as a pointer in a local message, never over the wire.
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(std::shared_ptr<tessera::FaultInjector>)
