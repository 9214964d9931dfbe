// VariableHandle and its non-blocking operations: the code that fans one variable operation out
// to the variable's shards and stitches the replies (DESIGN.md §2). Workers call these from
// inside their handlers (a worker never blocks its thread); coordinator/'s ShardedVariable wraps
// them in blocking forms for drivers.
//
// Every operation sends at most one call per touched shard, all in flight at once: each as the
// shard's own request, or, given a ShardBatch (read, gather and the gradients), in the batch's
// one request per PS node, sent when the caller flushes it (Note [One request per PS node],
// actors/shard_call.h). It calls `done` exactly once, from the calling actor's context, when
// every reply has arrived or the first error did:
//   - InvalidArgument for bad input detected before anything is sent (an id out of range, a
//     value of the wrong shape): no shard is touched;
//   - a shard's own error reply, prefixed with the operation and the shard's name (shards
//     validate before they write, so a rejected shard is unchanged — but the other shards of a
//     multi-shard update may have applied theirs);
//   - Unavailable naming the shard and its PS task when the shard is gone.
//
// Self is any CAF actor pointer that can `request` (an event-based actor, typed or not).
//
// Example (inside a worker's handler):
//   GatherAsync(self, user_embedding, ids, ShardingStrategy::kDiv,
//               [=](absl::StatusOr<Tensor> rows) { ... });
//
// Thread-safety: a VariableHandle is an immutable value once built; the operations run on the
// calling actor and touch only its state.
#pragma once

#include <caf/error.hpp>
#include <caf/meta/load_callback.hpp>
#include <caf/meta/type_name.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/error.h"
#include "actors/messages.h"
#include "actors/shard_actor.h"
#include "actors/shard_call.h"
#include "core/aggregation.h"
#include "core/indexed_slices.h"
#include "core/shard_layout.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

// Everything needed to address one variable's shards.
struct VariableHandle {
  std::string name;
  Shape shape;  // the full variable's shape
  DType dtype = DType::kFloat32;
  ShardLayout layout;                // rows over shards ("div")
  std::vector<shard_actor> shards;   // layout.num_shards() entries, in shard order
  std::vector<int32_t> ps_tasks;     // the PS task holding each shard
  VariableSynchronization synchronization = VariableSynchronization::kAuto;
  VariableAggregation aggregation = VariableAggregation::kNone;
  bool trainable = true;

  int64_t num_shards() const { return static_cast<int64_t>(shards.size()); }
  // "emb/part_1" (or "emb" when unpartitioned).
  std::string ShardNameOf(int64_t shard) const {
    return ShardName(name, static_cast<int32_t>(shard), static_cast<int32_t>(shards.size()));
  }
};

// A handle travels to networked workers inside a VariableDirectory (actors/coordinator_actor.h):
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

template <class T>
using Done = std::function<void(absl::StatusOr<T>)>;
using DoneStatus = std::function<void(absl::Status)>;

namespace internal {

// Joins one reply per touched shard (0.17 has no fan_out_request: a counter, DESIGN.md §4).
// `done` runs once: with every reply (indexed like `shards`), or with the first error.
template <class Reply>
struct ShardJoin {
  std::vector<Reply> replies;
  size_t pending = 0;
  bool finished = false;
  std::function<void(absl::StatusOr<std::vector<Reply>>)> done;
  // For error messages only: a shard's name is rendered from these when it fails. `op` is a
  // literal or a static name (ScatterOpName, AssignKindName), so it is not copied.
  absl::string_view op;
  std::string variable;
  int32_t num_shards = 1;
};

// The status for a shard's error reply: its own message when it is a Tessera error, Unavailable
// naming the shard when the shard is gone.
inline absl::Status ShardError(const std::string& shard_name, int32_t ps_task,
                               absl::string_view op, const caf::error& err) {
  absl::Status status = ErrorToStatus(err);
  if (absl::IsUnavailable(status)) {
    return absl::UnavailableError(absl::StrCat(op, ": shard ", shard_name, " on ps ", ps_task,
                                               " is unavailable (", status.message(), ")"));
  }
  return Annotate(status, absl::StrCat(op, " on ", shard_name));
}

// Reply as a fan-out's caller wants it: the rows (ShardValue) or the shard's new version.
template <class Reply>
Reply TakeReply(ShardCallReply& reply) {
  if constexpr (std::is_same_v<Reply, ShardValue>) {
    return std::move(reply.value);
  } else {
    static_assert(std::is_same_v<Reply, int64_t>);
    return reply.value.version;
  }
}

// Sends `make_call(shard, k)` for the k-th entry of `shards` (through `batch` when it takes the
// shard's PS task, else as the shard's own request) and joins the replies as Reply. `op` must
// outlive the replies: a literal or a static name.
template <class Reply, class Self, class MakeCall>
void FanOut(Self* self, const VariableHandle& v, absl::string_view op,
            const std::vector<int64_t>& shards, MakeCall make_call, ShardBatch* batch,
            std::function<void(absl::StatusOr<std::vector<Reply>>)> done) {
  if (shards.empty()) {
    done(std::vector<Reply>{});
    return;
  }
  auto join = std::make_shared<ShardJoin<Reply>>();
  join->replies.resize(shards.size());
  join->pending = shards.size();
  join->done = std::move(done);
  join->op = op;
  join->variable = v.name;
  join->num_shards = static_cast<int32_t>(v.num_shards());
  for (size_t k = 0; k < shards.size(); ++k) {
    const int64_t shard = shards[k];
    const int32_t task = v.ps_tasks.empty() ? -1 : v.ps_tasks[shard];
    // The error path renders its message from the shard's name, computed only on error.
    auto reply = [join, k, shard, task](ShardCallReply answer) {
      if (join->finished) return;
      if (answer.error) {
        join->finished = true;
        return join->done(ShardError(
            ShardName(join->variable, static_cast<int32_t>(shard), join->num_shards), task,
            join->op, answer.error));
      }
      join->replies[k] = TakeReply<Reply>(answer);
      if (--join->pending > 0) return;
      join->finished = true;
      join->done(std::move(join->replies));
    };
    ShardCall call = make_call(shard, k);
    if (batch != nullptr && batch->Takes(task)) {
      batch->Add(task, v.shards[shard], std::move(call), std::move(reply));
    } else {
      SendShardCall(self, v.shards[shard], std::move(call), std::move(reply));
    }
  }
}

inline std::vector<int64_t> AllShards(const VariableHandle& v) {
  std::vector<int64_t> out(v.shards.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(i);
  return out;
}

// Splits `value` (the full variable's shape) into one block per shard; an unpartitioned
// variable's value is moved, not copied.
inline std::vector<Tensor> SplitIntoShardBlocks(const VariableHandle& v, Tensor value) {
  std::vector<Tensor> blocks;
  blocks.reserve(v.shards.size());
  if (v.shape.rank() == 0 || v.num_shards() == 1) {
    blocks.push_back(std::move(value));
    return blocks;
  }
  for (int64_t s = 0; s < v.num_shards(); ++s) {
    const ShardExtent e = v.layout.Extent(s);
    blocks.push_back(Tensor::Copy(value.RowBlock(e.offset, e.rows)));
  }
  return blocks;
}

// done(OK) once every version reply arrived.
inline std::function<void(absl::StatusOr<std::vector<int64_t>>)> IgnoreVersions(DoneStatus done) {
  return [done = std::move(done)](absl::StatusOr<std::vector<int64_t>> versions) {
    done(versions.status());
  };
}

}  // namespace internal

// The whole variable: the shards' blocks concatenated.
template <class Self>
void ReadAsync(Self* self, const VariableHandle& v, Done<Tensor> done,
               ShardBatch* batch = nullptr) {
  internal::FanOut<ShardValue>(
      self, v, "read", internal::AllShards(v), [](int64_t, size_t) { return ReadCall(); }, batch,
      [shape = v.shape, layout = v.layout,
       done = std::move(done)](absl::StatusOr<std::vector<ShardValue>> replies) {
        if (!replies.ok()) return done(replies.status());
        if (replies->size() == 1) return done(std::move((*replies)[0].value));
        // The div extents tile the rows in shard order, so appending the blocks in order puts
        // each at its offset; appending into reserved memory skips zero-filling the result.
        std::vector<float> values;
        values.reserve(static_cast<size_t>(shape.num_elements()));
        for (size_t s = 0; s < replies->size(); ++s) {
          const Tensor& block = (*replies)[s].value;
          const ShardExtent e = layout.Extent(static_cast<int64_t>(s));
          if (block.size() != e.rows * shape.row_size()) {
            return done(absl::InternalError(absl::StrCat("read: shard ", s, " returned ",
                                                         block.shape().ToString())));
          }
          values.insert(values.end(), block.values().begin(), block.values().end());
        }
        done(Tensor::FromVector(shape, std::move(values)));
      });
}

// Rows `ids` (global) in the caller's order (TF's embedding_lookup / sparse_read). Ids are
// grouped by shard under `strategy`; a repeated id is requested once.
template <class Self>
void GatherAsync(Self* self, const VariableHandle& v, absl::Span<const int64_t> ids,
                 ShardingStrategy strategy, Done<Tensor> done, ShardBatch* batch = nullptr) {
  absl::StatusOr<IdGrouping> grouping = v.layout.GroupIds(ids, strategy, DuplicateIds::kMerge);
  if (!grouping.ok()) return done(Annotate(grouping.status(), absl::StrCat("gather from ", v.name)));
  auto g = std::make_shared<IdGrouping>(*std::move(grouping));
  internal::FanOut<ShardValue>(
      self, v, "gather", g->touched_shards,
      [&](int64_t s, size_t) { return GatherCall(g->local_ids[s]); }, batch,
      [g, shape = v.shape, done = std::move(done)](absl::StatusOr<std::vector<ShardValue>> replies) {
        if (!replies.ok()) return done(replies.status());
        if (g->in_shard_order) {
          // Sorted unique ids (a train step's): the replies in order are the rows in order;
          // appending them into reserved memory skips zero-filling and stitching the output.
          if (replies->size() == 1 && (*replies)[0].value.shape() == shape.WithRows(g->num_ids)) {
            return done(std::move((*replies)[0].value));
          }
          std::vector<float> values;
          values.reserve(static_cast<size_t>(g->num_ids * shape.row_size()));
          for (size_t k = 0; k < g->touched_shards.size(); ++k) {
            const Tensor& rows = (*replies)[k].value;
            const Shape want = shape.WithRows(
                static_cast<int64_t>(g->local_ids[g->touched_shards[k]].size()));
            if (rows.shape() != want) {
              return done(CheckSameShape(rows.shape(), want,
                                         absl::StrCat("gather reply from shard ",
                                                      g->touched_shards[k])));
            }
            values.insert(values.end(), rows.values().begin(), rows.values().end());
          }
          return done(Tensor::FromVector(shape.WithRows(g->num_ids), std::move(values)));
        }
        std::vector<ConstTensorView> views(g->local_ids.size());
        for (size_t k = 0; k < g->touched_shards.size(); ++k) {
          views[g->touched_shards[k]] = (*replies)[k].value.view();
        }
        Tensor out(shape.WithRows(g->num_ids));
        if (absl::Status s = StitchGatheredRows(*g, views, out.view()); !s.ok()) return done(s);
        done(std::move(out));
      });
}

// numpy's v[start:stop:step]; only the shards the slice touches are contacted.
template <class Self>
void SliceAsync(Self* self, const VariableHandle& v, std::optional<int64_t> start,
                std::optional<int64_t> stop, int64_t step, Done<Tensor> done) {
  absl::StatusOr<SliceDecomposition> slice = v.layout.DecomposeSlice(start, stop, step);
  if (!slice.ok()) return done(Annotate(slice.status(), absl::StrCat("slice of ", v.name)));
  auto d = std::make_shared<SliceDecomposition>(*std::move(slice));
  std::vector<int64_t> shards;
  for (const ShardSlice& piece : d->pieces) shards.push_back(piece.shard);
  internal::FanOut<ShardValue>(
      self, v, "slice", shards,
      [&](int64_t, size_t k) { return GatherCall(d->pieces[k].LocalRows()); }, nullptr,
      [d, shape = v.shape, done = std::move(done)](absl::StatusOr<std::vector<ShardValue>> replies) {
        if (!replies.ok()) return done(replies.status());
        Tensor out(shape.WithRows(d->length));
        for (size_t k = 0; k < d->pieces.size(); ++k) {
          const Tensor& rows = (*replies)[k].value;
          std::copy(rows.values().begin(), rows.values().end(),
                    out.row(d->pieces[k].output_offset).data());
        }
        done(std::move(out));
      });
}

// assign / assign_add / assign_sub of the whole variable, split by the shards' offsets.
template <class Self>
void AssignAsync(Self* self, const VariableHandle& v, AssignKind kind, Tensor value,
                 DoneStatus done) {
  if (absl::Status s = CheckSameShape(value.shape(), v.shape,
                                      absl::StrCat(AssignKindName(kind), " to ", v.name));
      !s.ok()) {
    return done(s);
  }
  auto blocks = std::make_shared<std::vector<Tensor>>(
      internal::SplitIntoShardBlocks(v, std::move(value)));
  internal::FanOut<int64_t>(
      self, v, AssignKindName(kind), internal::AllShards(v),
      [&](int64_t s, size_t) { return AssignCall(kind, std::move((*blocks)[s])); }, nullptr,
      internal::IgnoreVersions(std::move(done)));
}

// A scatter op with global ids: rows[k] applies to row ids[k] (duplicates as core/scatter.h).
template <class Self>
void ScatterAsync(Self* self, const VariableHandle& v, ScatterOp op, absl::Span<const int64_t> ids,
                  const Tensor& rows, DoneStatus done) {
  const std::string what = absl::StrCat(ScatterOpName(op), " to ", v.name);
  if (v.shape.rank() == 0) return done(absl::InvalidArgumentError(what + ": a scalar has no rows"));
  if (absl::Status s = CheckSameShape(rows.shape(), v.shape.WithRows(ids.size()), what); !s.ok()) {
    return done(s);
  }
  absl::StatusOr<IdGrouping> grouping =
      v.layout.GroupIds(ids, ShardingStrategy::kDiv, DuplicateIds::kKeep);
  if (!grouping.ok()) return done(Annotate(grouping.status(), what));
  absl::StatusOr<std::vector<IndexedSlices>> parts = SplitRowsByShard(*grouping, rows);
  if (!parts.ok()) return done(Annotate(parts.status(), what));
  auto shared = std::make_shared<std::vector<IndexedSlices>>(*std::move(parts));
  internal::FanOut<int64_t>(
      self, v, ScatterOpName(op), grouping->touched_shards,
      [&](int64_t s, size_t) { return ScatterCall(op, std::move((*shared)[s])); }, nullptr,
      internal::IgnoreVersions(std::move(done)));
}

// One optimizer step with a dense gradient of the variable's shape, split by shard.
template <class Self>
void ApplyDenseGradientAsync(Self* self, const VariableHandle& v, Tensor grad, DoneStatus done,
                             ShardBatch* batch = nullptr) {
  if (grad.shape() != v.shape) {  // the message is only built on a mismatch
    return done(CheckSameShape(grad.shape(), v.shape, absl::StrCat("gradient of ", v.name)));
  }
  auto blocks =
      std::make_shared<std::vector<Tensor>>(internal::SplitIntoShardBlocks(v, std::move(grad)));
  internal::FanOut<int64_t>(
      self, v, "apply_gradient", internal::AllShards(v),
      [&](int64_t s, size_t) { return DenseGradientCall(std::move((*blocks)[s])); }, batch,
      internal::IgnoreVersions(std::move(done)));
}

// One optimizer step on the rows of a sparse gradient with global ids; duplicates are summed and
// each touched shard gets one request with its local ids.
template <class Self>
void ApplySparseGradientAsync(Self* self, const VariableHandle& v, const IndexedSlices& grad,
                              DoneStatus done, ShardBatch* batch = nullptr) {
  // Built only on an error: this runs once per embedding table per step.
  auto what = [&v] { return absl::StrCat("sparse gradient of ", v.name); };
  if (v.shape.rank() == 0) {
    return done(absl::InvalidArgumentError(what() + ": a scalar has no rows"));
  }
  if (const Shape want = v.shape.WithRows(grad.indices.size()); grad.values.shape() != want) {
    return done(CheckSameShape(grad.values.shape(), want, what()));
  }
  absl::StatusOr<IdGrouping> grouping =
      v.layout.GroupIds(grad.indices, ShardingStrategy::kDiv, DuplicateIds::kMerge);
  if (!grouping.ok()) return done(Annotate(grouping.status(), what()));
  absl::StatusOr<std::vector<IndexedSlices>> parts = SplitRowsByShard(*grouping, grad.values);
  if (!parts.ok()) return done(Annotate(parts.status(), what()));
  auto shared = std::make_shared<std::vector<IndexedSlices>>(*std::move(parts));
  internal::FanOut<int64_t>(
      self, v, "apply_sparse_gradient", grouping->touched_shards,
      [&](int64_t s, size_t) { return SparseGradientCall(std::move((*shared)[s])); }, batch,
      internal::IgnoreVersions(std::move(done)));
}

// An ON_WRITE update made by several replicas in one step: the replicas' values are combined with
// the variable's aggregation (core/aggregation.h; NONE is an error) and applied once with `kind`.
template <class Self>
void UpdateFromReplicasAsync(Self* self, const VariableHandle& v, AssignKind kind,
                             absl::Span<const Tensor> per_replica, DoneStatus done) {
  absl::StatusOr<Tensor> combined = AggregateReplicaValues(v.aggregation, per_replica);
  if (!combined.ok()) return done(Annotate(combined.status(), absl::StrCat("update of ", v.name)));
  AssignAsync(self, v, kind, *std::move(combined), std::move(done));
}

// An ON_READ variable: one unpartitioned copy per worker ("name/worker_k"), combined on read.
struct PerWorkerVariable {
  std::string name;
  Shape shape;
  VariableAggregation aggregation = VariableAggregation::kSum;
  std::vector<VariableHandle> copies;  // copies[k] belongs to worker k
};

// Reads every worker's copy and reduces them with the variable's aggregation.
template <class Self>
void ReadReducedAsync(Self* self, const PerWorkerVariable& v, Done<Tensor> done) {
  if (v.copies.empty()) return done(absl::FailedPreconditionError(v.name + " has no copies"));
  struct Join {
    std::vector<Tensor> values;
    size_t pending = 0;
    bool finished = false;
  };
  auto join = std::make_shared<Join>();
  join->values.resize(v.copies.size());
  join->pending = v.copies.size();
  auto finish = std::make_shared<Done<Tensor>>(std::move(done));
  for (size_t k = 0; k < v.copies.size(); ++k) {
    ReadAsync(self, v.copies[k],
              [join, finish, k, aggregation = v.aggregation, name = v.name](
                  absl::StatusOr<Tensor> value) {
                if (join->finished) return;
                if (!value.ok()) {
                  join->finished = true;
                  return (*finish)(value.status());
                }
                join->values[k] = *std::move(value);
                if (--join->pending > 0) return;
                join->finished = true;
                absl::StatusOr<Tensor> reduced = AggregateReplicaValues(aggregation, join->values);
                (*finish)(reduced.ok() ? std::move(reduced)
                                       : Annotate(reduced.status(), "reading " + name));
              });
  }
}

}  // namespace tessera
