// The inspect overloads of the core/ types that travel between actors as they are (Tensor,
// ShardSpec, TensorSlice, ShardInfo, every ShardOp and its result, closures, checkpoint entries,
// ring messages): part of the registry of message types, actors/base/messages.h, which includes
// this file. Bulk payloads go through actors/base/wire.h (Note [Bulk tensor payloads]).
//
// Thread-safety: the types are values.
#pragma once

#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/base/wire.h"
#include "core/checkpoint/checkpoint.h"
#include "core/mirrored/collective.h"
#include "core/mirrored/mirrored_replica.h"
#include "core/ps/shard_op.h"
#include "core/ps/shard_state.h"
#include "core/scheduling/closure.h"
#include "core/variables/indexed_slices.h"
#include "core/variables/scatter.h"
#include "tessera/model.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"

namespace tessera {

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
// On the wire exactly as an IndexedSlices of its rows (Note [A step's gradient is split without a
// copy], core/variables/indexed_slices.h); a loaded one owns its values.
template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, SparseRows& x) {
  return wire::Dispatch(
      f, x,
      [](caf::serializer& s, SparseRows& v) -> caf::error {
        if (auto err = wire::SaveIds(s, v.indices())) return err;
        return wire::SaveTensor(s, v.values());
      },
      [](caf::deserializer& d, SparseRows& v) -> caf::error {
        IndexedSlices own;
        if (auto err = wire::LoadIds(d, own.indices)) return err;
        if (auto err = wire::LoadTensor(d, own.values)) return err;
        v = SparseRows(std::move(own));
        return caf::none;
      },
      [](Inspector& g, SparseRows& v) {
        Ids indices = v.indices();
        std::vector<int64_t> dims = v.values().shape().dims();
        return g(caf::meta::type_name("tessera::SparseRows"), indices, dims);
      });
}
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
  return f(caf::meta::type_name("tessera::Closure"), x.id, x.function, x.args, x.step, x.queue,
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

// -- Mirrored replicas' core types (core/mirrored/)
// -------------------------------------------------

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RingValues& x) {
  return wire::Dispatch(f, x, wire::SaveRingValues, wire::LoadRingValues,
                        [](Inspector& g, RingValues& v) {
                          int64_t size = v.size();  // the count only: values can be huge
                          return g(caf::meta::type_name("tessera::RingValues"), size);
                        });
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RingChunk& x) {
  return f(caf::meta::type_name("tessera::RingChunk"), x.chunk, x.step, x.values);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirroredVariableSpec& x) {
  return f(caf::meta::type_name("tessera::MirroredVariableSpec"), x.name, x.shape, x.dtype,
           x.initializer, x.synchronization, x.aggregation);
}

}  // namespace tessera
