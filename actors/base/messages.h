// Every atom and message type Tessera's actors exchange, their `inspect` overloads (so they can
// cross the network), and the one function that registers them all with an actor system.
//
// Wire format (see Note [Bulk tensor payloads]): tensors and id lists travel as their shape or
// count followed by one raw block of bytes, never element by element. Loading validates before
// allocating: a negative or overflowing shape, an absurd size or a truncated buffer becomes a
// DataLoss error (a Tessera caf::error, actors/base/error.h), never a crash or a huge allocation.
//
// Thread-safety: the types are values; RegisterTesseraTypes mutates only the config it is given.
#pragma once

#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/deserializer.hpp>
#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <caf/serializer.hpp>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "core/base/tensor.h"
#include "core/checkpoint/checkpoint.h"
#include "core/model/optimizer.h"
#include "core/ps/shard_op.h"
#include "core/ps/shard_state.h"
#include "core/scheduling/closure.h"
#include "core/variables/indexed_slices.h"
#include "core/variables/initializer.h"
#include "core/variables/scatter.h"

namespace tessera {

// -- Atoms (at most 10 characters each) ------------------------------------------------------

// PS node actor (actors/ps/ps_node_actor.h).
using create_shard_atom = caf::atom_constant<caf::atom("new_shard")>;
using drop_shard_atom = caf::atom_constant<caf::atom("drop_shard")>;
using lookup_atom = caf::atom_constant<caf::atom("lookup")>;
using list_atom = caf::atom_constant<caf::atom("list")>;
using stats_atom = caf::atom_constant<caf::atom("stats")>;
using adopt_atom = caf::atom_constant<caf::atom("adopt")>;
using reclaim_atom = caf::atom_constant<caf::atom("reclaim")>;
using lease_atom = caf::atom_constant<caf::atom("lease")>;
// Shard actor (actors/ps/shard_actor.h): the backup it forwards its changes to.
using replicate_atom = caf::atom_constant<caf::atom("replicate")>;
using backup_lost_atom = caf::atom_constant<caf::atom("bkp_lost")>;
// A PS node's forward link (actors/ps/forward_link.h), local only.
using forward_atom = caf::atom_constant<caf::atom("forward")>;
using round_atom = caf::atom_constant<caf::atom("round")>;
// A shard's background writer (actors/ps/shard_actor.cc), local only.
using write_atom = caf::atom_constant<caf::atom("write")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using batch_atom = caf::atom_constant<caf::atom("batch")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;

// Worker actor (actors/scheduling/worker_actor.h) and coordinator actor (actors/scheduling/coordinator_actor.h).
using run_atom = caf::atom_constant<caf::atom("run")>;
using dispatch_atom = caf::atom_constant<caf::atom("dispatch")>;
using add_worker_atom = caf::atom_constant<caf::atom("add_worker")>;
using kill_worker_atom = caf::atom_constant<caf::atom("kill_wrkr")>;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using watch_ps_atom = caf::atom_constant<caf::atom("watch_ps")>;
using chaos_atom = caf::atom_constant<caf::atom("chaos")>;
using workers_atom = caf::atom_constant<caf::atom("workers")>;
using abort_atom = caf::atom_constant<caf::atom("abort")>;

// Networked nodes (actors/base/node_gate.h, cluster/network/network.h).
using hello_atom = caf::atom_constant<caf::atom("hello")>;
using join_atom = caf::atom_constant<caf::atom("join")>;
using directory_atom = caf::atom_constant<caf::atom("directory")>;

// The protocol every networked node speaks. Bump it with any change to a message type, an actor
// interface or their meaning: a node refuses a peer of another version (actors/base/node_gate.h).
// 2: create_shard names the shard's owner; 3: shard calls batched per PS node; 4: every shard
// operation is a ShardOp (core/ps/shard_op.h), sent alone or in a batch; 5: slices, SaveOp and
// manifest entries carry their checkpoint's identity (CheckpointId, core/checkpoint/checkpoint.h); 6: a
// worker asks for the variable directory with its task and JobDescription, and is refused when
// its job differs; 7: ShardInfo carries update counts and hottest rows, InfoOp and stats_atom
// ask for K of them; 8: closures carry their queue and resolved mark, updates their UpdateId
// (Note [Exactly-once updates], core/ps/update_ledger.h), ShardInfo the step and duplicates; a PS
// node keeps a lost coordinator's shards for a lease and gives them back on reclaim_atom;
// SaveOp::in_background; 9: the mirrored replica actor (actors/mirrored/mirrored_replica_actor.h) and its
// messages, a ring naming its previous replica; 10: a shard replicates to a backup
// (replicate_atom, Note [Replicated shards] in actors/ps/shard_actor.h); 11: RestoreOp carries the
// ledger of updates applied (a backup takes its primary's); 12: reclaim_atom names the run and
// answers HeldShards (a restarted coordinator re-adopts its run's shards), ShardInfo carries the
// ledger's marks; 13: a primary whose backup failed holds its acknowledgements and reports the
// loss (backup_lost_atom) through its node to its owner, which answers with replicate_atom (Note
// [A lost backup is struck before the primary acknowledges alone], actors/ps/shard_actor.h); 14: a
// PS node sends its primaries' changes to a backup node as batches to that node (Note [A node's
// forwards travel together], actors/ps/forward_link.h).
constexpr int32_t kProtocolVersion = 14;

// -- Message types (the core types ShardSpec, TensorSlice, ShardInfo, Tensor, IndexedSlices,
// OptimizerSpec, InitializerSpec and every ShardOp and its result travel as they are) -----------

// One op's outcome in a batch: `error` (none when it succeeded), else the op's result.
struct ShardReply {
  caf::error error;
  ShardOpResult result;
};

// An op addressed to one of a PS node's shards by the shard actor's id (a batch to the node,
// actors/ps/ps_node_actor.h).
struct ShardCall {
  uint64_t shard = 0;
  ShardOp op;
};

// The hottest rows per shard a stats request without a K asks for.
constexpr int32_t kDefaultHottestRows = 5;

// What a PS node holds.
struct PsNodeStats {
  int32_t task = 0;               // the node's PS task index
  int64_t num_shards = 0;         // == shards.size()
  int64_t bytes = 0;              // sum of the shards' bytes (blocks and optimizer slots)
  std::vector<ShardInfo> shards;  // sorted by name
};

// One worker slot as the coordinator actor sees it (the dashboard's workers table).
struct WorkerSlotStatus {
  int32_t slot = 0;  // the worker's index (networked: its task)
  bool live = false;
  int32_t running = 0;          // closures sent to its worker and not answered yet
  int64_t completed = 0;        // closures its workers answered with a result
  int64_t errors = 0;           // closures its workers answered with an error
  int64_t failures = 0;         // its workers that died
  int64_t starts = 0;           // workers started (or joined) in it; restarts are starts - 1
  int64_t last_closure = -1;    // the id of the latest closure sent to it (-1: none yet)
  std::string last_function;    // that closure's function ("train_step")
  int64_t last_batch = -1;      // and its int64 "batch" argument, the step it trains (-1: none)
};

// What the coordinator actor knows of its workers.
struct WorkerPoolStatus {
  std::vector<int32_t> live_slots;  // the slot index of every live worker, ascending
  int64_t worker_failures = 0;      // workers that died (killed or crashed)
  int64_t worker_restarts = 0;      // replacements started
  // Networked: why worker processes were refused at join, by task (the latest refusal each).
  std::map<int32_t, std::string> refusals;
  bool run_failed = false;  // a lost PS could not be restored (or the run was aborted)
  // Networked, once the run failed: the worker tasks known to have learned of it (their worker
  // was stopped with the failure and is gone, or a request of theirs was answered with it),
  // ascending.
  std::vector<int32_t> told_of_failure;
  std::vector<WorkerSlotStatus> slots;  // every slot that ever had a worker, ascending
};

// Registers every type above and below, the actor handles (shard_actor, ps_node_actor) and the
// Tessera error category (actors/base/error.h) with `cfg`. Call once per config, before the system is
// built.
void RegisterTesseraTypes(caf::actor_system_config& cfg);

// For CAF's stringification (logs, to_string of messages).
std::string to_string(ScatterOp op);
std::string to_string(AssignKind kind);
std::string to_string(DType dtype);

// Note [Bulk tensor payloads]
// CAF 0.17 serializes a std::vector<float> element by element (~110 MB/s); one apply_raw over a
// byte block is ~13x faster (docs/design.md §4). So a Tensor is written as its dims (rank, then int64
// each) followed by rows * row_size float32 values as raw little-endian bytes, and an id list as
// its count followed by raw int64s. Loading first checks the dims against the one policy for
// tensors from outside (Note [Limits on tensors from outside], core/base/tensor.h) and, with a binary_deserializer, that the
// buffer still holds that many bytes; with any other deserializer it reads in bounded chunks, so
// memory grows only with bytes that actually arrived.
namespace wire {

caf::error SaveShape(caf::serializer& sink, const Shape& shape);
caf::error LoadShape(caf::deserializer& source, Shape& shape);
caf::error SaveTensor(caf::serializer& sink, const Tensor& tensor);
caf::error LoadTensor(caf::deserializer& source, Tensor& tensor);
caf::error SaveIds(caf::serializer& sink, const Ids& ids);
caf::error LoadIds(caf::deserializer& source, Ids& ids);

// Dispatches a bulk-payload type to its save / load function, or shows a summary for CAF's
// read-only inspectors (stringification).
template <class Inspector, class T, class Save, class Load, class Show>
typename Inspector::result_type Dispatch(Inspector& f, T& x, Save save, Load load, Show show) {
  if constexpr (std::is_base_of_v<caf::serializer, Inspector>) {
    return save(static_cast<caf::serializer&>(f), x);
  } else if constexpr (std::is_base_of_v<caf::deserializer, Inspector>) {
    return load(static_cast<caf::deserializer&>(f), x);
  } else {
    static_assert(Inspector::reads_state, "unknown loading inspector for a bulk payload");
    return show(f, x);
  }
}

}  // namespace wire

// -- inspect overloads -------------------------------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Shape& x) {
  return wire::Dispatch(f, x, wire::SaveShape, wire::LoadShape, [](Inspector& g, Shape& s) {
    std::vector<int64_t> dims = s.dims();
    return g(caf::meta::type_name("tessera::Shape"), dims);
  });
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Tensor& x) {
  return wire::Dispatch(f, x, wire::SaveTensor, wire::LoadTensor, [](Inspector& g, Tensor& t) {
    std::vector<int64_t> dims = t.shape().dims();  // the shape only: values can be huge
    return g(caf::meta::type_name("tessera::Tensor"), dims);
  });
}

namespace wire {

// An id list travels as one raw block (Note [Bulk tensor payloads]): wrap the member for the
// duration of one inspect call.
struct BulkIds {
  Ids* ids;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, BulkIds& x) {
  return Dispatch(
      f, x, [](caf::serializer& s, BulkIds& b) { return SaveIds(s, *b.ids); },
      [](caf::deserializer& d, BulkIds& b) { return LoadIds(d, *b.ids); },
      [](Inspector& g, BulkIds& b) { return g(caf::meta::type_name("tessera::Ids"), *b.ids); });
}

// A std::variant travels as its alternative's index followed by the alternative. Loading an
// index out of range is DataLoss (a forged or newer message), never undefined behaviour.
template <class Variant, size_t... I>
void EmplaceAlternative(Variant& x, size_t index, std::index_sequence<I...>) {
  ((index == I ? (void)x.template emplace<I>() : (void)0), ...);
}

caf::error BadVariantIndex(absl::string_view what, int32_t index);

template <class Inspector, class... Ts>
typename Inspector::result_type InspectVariant(Inspector& f, std::variant<Ts...>& x,
                                               absl::string_view what) {
  if constexpr (Inspector::reads_state) {
    int32_t index = static_cast<int32_t>(x.index());
    return std::visit([&](auto& alternative) { return f(index, alternative); }, x);
  } else {
    int32_t index = 0;
    if (auto err = f(index)) return err;
    if (index < 0 || index >= static_cast<int32_t>(sizeof...(Ts))) {
      return BadVariantIndex(what, index);
    }
    EmplaceAlternative(x, static_cast<size_t>(index), std::index_sequence_for<Ts...>{});
    return std::visit([&](auto& alternative) { return f(alternative); }, x);
  }
}

}  // namespace wire

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, IndexedSlices& x) {
  return wire::Dispatch(
      f, x,
      [](caf::serializer& s, IndexedSlices& v) -> caf::error {
        if (auto err = wire::SaveIds(s, v.indices)) return err;
        return wire::SaveTensor(s, v.values);
      },
      [](caf::deserializer& d, IndexedSlices& v) -> caf::error {
        if (auto err = wire::LoadIds(d, v.indices)) return err;
        return wire::LoadTensor(d, v.values);
      },
      [](Inspector& g, IndexedSlices& v) {
        std::vector<int64_t> dims = v.values.shape().dims();
        return g(caf::meta::type_name("tessera::IndexedSlices"), v.indices, dims);
      });
}

namespace wire {

// ClosureValues travel as their count, then per value (in name order) its name, its
// ClosureValueType as one tag byte and the value: an int64, a double, a string, or a tensor as in
// Note [Bulk tensor payloads]. Loading is the hostile-input path of every closure argument and
// result: an unknown tag, a name given twice or a malformed value is a DataLoss error, and a
// truncated buffer CAF's end-of-stream error.
caf::error SaveClosureValues(caf::serializer& sink, const ClosureValues& values);
caf::error LoadClosureValues(caf::deserializer& source, ClosureValues& values);

}  // namespace wire

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ClosureValues& x) {
  return wire::Dispatch(
      f, x, wire::SaveClosureValues, wire::LoadClosureValues,
      [](Inspector& g, ClosureValues& v) {
        std::vector<std::string> names;  // "batch: int64": names and types only, never tensors
        for (const auto& [name, value] : v.values()) {
          names.push_back(absl::StrCat(
              name, ": ", ClosureValueTypeName(static_cast<ClosureValueType>(value.index()))));
        }
        return g(caf::meta::type_name("tessera::ClosureValues"), names);
      });
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, Closure& x) {
  return f(caf::meta::type_name("tessera::Closure"), x.id, x.function, x.args, x.queue,
           x.resolved_below);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, OptimizerSpec& x) {
  return f(caf::meta::type_name("tessera::OptimizerSpec"), x.name, x.params);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, InitializerSpec& x) {
  return f(caf::meta::type_name("tessera::InitializerSpec"), x.name, x.params, x.seed);
}

namespace wire {

// std::optional has no CAF 0.17 support: an optional OptimizerSpec travels as a flag and a
// value, put back by a load callback. Wrap the member for the duration of one inspect call.
struct OptionalOptimizer {
  std::optional<OptimizerSpec>* target;
};

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, OptionalOptimizer& x) {
  bool has_value = x.target->has_value();
  OptimizerSpec value = has_value ? **x.target : OptimizerSpec{};
  auto put_back = caf::meta::load_callback([&]() -> caf::error {
    if (has_value) {
      *x.target = std::move(value);
    } else {
      x.target->reset();
    }
    return caf::none;
  });
  return f(caf::meta::type_name("tessera::OptionalOptimizer"), has_value, value, put_back);
}

}  // namespace wire

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardSpec& x) {
  wire::OptionalOptimizer optimizer{&x.optimizer};
  return f(caf::meta::type_name("tessera::ShardSpec"), x.variable, x.shard_index, x.num_shards,
           x.full_shape, x.row_offset, x.rows, x.dtype, x.initializer, optimizer);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RunId& x) {
  return f(caf::meta::type_name("tessera::RunId"), x.high, x.low);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CheckpointId& x) {
  return f(caf::meta::type_name("tessera::CheckpointId"), x.run, x.global_step);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, TensorSlice& x) {
  return f(caf::meta::type_name("tessera::TensorSlice"), x.variable, x.full_shape, x.dtype,
           x.row_offset, x.value, x.slot_names, x.slots, x.step, x.checkpoint);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardInfo& x) {
  return f(caf::meta::type_name("tessera::ShardInfo"), x.name, x.full_shape, x.row_offset,
           x.block_shape, x.dtype, x.optimizer, x.version, x.bytes, x.updates, x.rows_touched,
           x.hottest_rows, x.step, x.duplicate_updates, x.ledger_marks);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, UpdateId& x) {
  return f(caf::meta::type_name("tessera::UpdateId"), x.queue, x.closure, x.sequence,
           x.resolved_below);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RememberedQueue& x) {
  return f(caf::meta::type_name("tessera::RememberedQueue"), x.queue, x.resolved_below, x.applied);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, HotRow& x) {
  return f(caf::meta::type_name("tessera::HotRow"), x.row, x.updates);
}

// -- Shard operations (core/ps/shard_op.h) and their results ------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, InfoOp& x) {
  return f(caf::meta::type_name("tessera::InfoOp"), x.hottest_rows);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ReadOp&) {
  return f(caf::meta::type_name("tessera::ReadOp"));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, GatherOp& x) {
  wire::BulkIds ids{&x.ids};
  return f(caf::meta::type_name("tessera::GatherOp"), ids);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, AssignOp& x) {
  return f(caf::meta::type_name("tessera::AssignOp"), x.kind, x.value, x.update);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ScatterRowsOp& x) {
  return f(caf::meta::type_name("tessera::ScatterRowsOp"), x.op, x.rows, x.update);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ApplyDenseGradientOp& x) {
  return f(caf::meta::type_name("tessera::ApplyDenseGradientOp"), x.grad, x.update);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ApplySparseGradientOp& x) {
  return f(caf::meta::type_name("tessera::ApplySparseGradientOp"), x.grad, x.update);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SetOptimizerOp& x) {
  return f(caf::meta::type_name("tessera::SetOptimizerOp"), x.spec);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SnapshotOp&) {
  return f(caf::meta::type_name("tessera::SnapshotOp"));
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RestoreOp& x) {
  return f(caf::meta::type_name("tessera::RestoreOp"), x.slice, x.ledger);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SaveOp& x) {
  return f(caf::meta::type_name("tessera::SaveOp"), x.dir, x.file, x.checkpoint, x.in_background);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, LoadOp& x) {
  return f(caf::meta::type_name("tessera::LoadOp"), x.dir, x.variable);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardVersion& x) {
  return f(caf::meta::type_name("tessera::ShardVersion"), x.version);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardValue& x) {
  return f(caf::meta::type_name("tessera::ShardValue"), x.value, x.version);
}

// ShardOp and ShardOpResult (std::variants of Tessera types, so found here by ADL).
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardOp& x) {
  return wire::InspectVariant(f, x, "shard op");
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardOpResult& x) {
  return wire::InspectVariant(f, x, "shard op result");
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardCall& x) {
  return f(caf::meta::type_name("tessera::ShardCall"), x.shard, x.op);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, ShardReply& x) {
  return f(caf::meta::type_name("tessera::ShardReply"), x.error, x.result);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SliceFileRef& x) {
  return f(caf::meta::type_name("tessera::SliceFileRef"), x.file, x.row_offset, x.rows);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SavedSlice& x) {
  wire::OptionalOptimizer optimizer{&x.optimizer};
  return f(caf::meta::type_name("tessera::SavedSlice"), x.ref, x.slot_names, x.step, optimizer);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, CheckpointVariable& x) {
  wire::OptionalOptimizer optimizer{&x.optimizer};
  return f(caf::meta::type_name("tessera::CheckpointVariable"), x.name, x.shape, x.dtype,
           optimizer, x.slot_names, x.step, x.slices, x.checkpoint);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerPoolStatus& x) {
  return f(caf::meta::type_name("tessera::WorkerPoolStatus"), x.live_slots, x.refusals,
           x.worker_failures, x.worker_restarts, x.run_failed, x.told_of_failure, x.slots);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, WorkerSlotStatus& x) {
  return f(caf::meta::type_name("tessera::WorkerSlotStatus"), x.slot, x.live, x.running,
           x.completed, x.errors, x.failures, x.starts, x.last_closure, x.last_function,
           x.last_batch);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, PsNodeStats& x) {
  return f(caf::meta::type_name("tessera::PsNodeStats"), x.task, x.num_shards, x.bytes, x.shards);
}

}  // namespace tessera
