#include "actors/ps/variable_ops.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/fan_in.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// Sends `make_op(shard, k)` to the k-th entry of `shards` and joins the results.
template <class Op, class MakeOp>
void FanOut(ShardClient& client, const VariableHandle& v, const std::vector<int64_t>& shards,
            MakeOp make_op, Done<std::vector<typename Op::Result>> done) {
  auto join = FanIn<typename Op::Result>::Start(shards.size(), std::move(done));
  for (size_t k = 0; k < shards.size(); ++k) {
    client.Call<Op>(v, shards[k], make_op(shards[k], k), join->Slot(k));
  }
}

std::vector<int64_t> AllShards(const VariableHandle& v) {
  std::vector<int64_t> out(v.shards.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<int64_t>(i);
  return out;
}

// Splits `value` (the full variable's shape) into one block per shard; an unpartitioned
// variable's value is moved, not copied.
std::vector<Tensor> SplitIntoShardBlocks(const VariableHandle& v, Tensor value) {
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

// done(OK) once every version arrived.
Done<std::vector<ShardVersion>> IgnoreVersions(DoneStatus done) {
  return [done = std::move(done)](absl::StatusOr<std::vector<ShardVersion>> versions) {
    done(versions.status());
  };
}

// Checks that block k of `parts` has part_rows[k] rows of `shape`'s other dimensions.
absl::Status CheckBlocks(const Shape& shape, const std::vector<Tensor>& parts,
                         const std::vector<int64_t>& part_rows, absl::string_view op) {
  for (size_t k = 0; k < parts.size(); ++k) {
    const Shape want = shape.WithRows(part_rows[k]);
    if (parts[k].shape() != want) {
      return CheckSameShape(parts[k].shape(), want, absl::StrCat(op, " reply from shard ", k));
    }
  }
  return absl::OkStatus();
}

// The replies' values, in order.
std::vector<Tensor> Values(std::vector<ShardValue>& replies) {
  std::vector<Tensor> values;
  values.reserve(replies.size());
  for (ShardValue& reply : replies) values.push_back(std::move(reply.value));
  return values;
}

// Appends the row blocks `parts` (in order, checked) into one tensor of shape `shape`: the parts
// tile its rows in order, so appending into reserved memory skips zero-filling the result.
absl::StatusOr<Tensor> Concatenate(const Shape& shape, std::vector<Tensor> parts) {
  if (parts.size() == 1 && parts[0].shape() == shape) return std::move(parts[0]);
  std::vector<float> values;
  values.reserve(static_cast<size_t>(shape.num_elements()));
  for (const Tensor& part : parts) {
    values.insert(values.end(), part.values().begin(), part.values().end());
  }
  return Tensor::FromVector(shape, std::move(values));
}

}  // namespace

void ReadAsync(ShardClient& client, const VariableHandle& v, Done<Tensor> done) {
  FanOut<ReadOp>(
      client, v, AllShards(v), [](int64_t, size_t) { return ReadOp{}; },
      [shape = v.shape, layout = v.layout,
       done = std::move(done)](absl::StatusOr<std::vector<ShardValue>> replies) {
        if (!replies.ok()) return done(replies.status());
        if (replies->size() == 1) return done(std::move((*replies)[0].value));
        std::vector<int64_t> rows(replies->size());
        for (size_t s = 0; s < rows.size(); ++s) {
          rows[s] = layout.Extent(static_cast<int64_t>(s)).rows;
        }
        std::vector<Tensor> blocks = Values(*replies);
        if (absl::Status s = CheckBlocks(shape, blocks, rows, "read"); !s.ok()) return done(s);
        done(Concatenate(shape, std::move(blocks)));
      });
}

namespace {

// Gathers the rows of `grouping` (of v's ids) in the ids' order, as row blocks: with the ids in
// shard order (a train step's sorted unique ids) the shards' replies as they came, else one
// block stitched from them.
void GatherGrouped(ShardClient& client, const VariableHandle& v,
                   std::shared_ptr<const IdGrouping> g, Done<std::vector<Tensor>> done) {
  FanOut<GatherOp>(
      client, v, g->touched_shards, [&](int64_t s, size_t) { return GatherOp{g->local_ids[s]}; },
      [g, shape = v.shape,
       done = std::move(done)](absl::StatusOr<std::vector<ShardValue>> replies) {
        if (!replies.ok()) return done(replies.status());
        if (g->in_shard_order) {
          std::vector<int64_t> rows;
          for (int64_t s : g->touched_shards) rows.push_back(g->local_ids[s].size());
          std::vector<Tensor> blocks = Values(*replies);
          if (absl::Status s = CheckBlocks(shape, blocks, rows, "gather"); !s.ok()) return done(s);
          return done(std::move(blocks));
        }
        std::vector<ConstTensorView> views(g->local_ids.size());
        for (size_t k = 0; k < g->touched_shards.size(); ++k) {
          views[g->touched_shards[k]] = (*replies)[k].value.view();
        }
        std::vector<Tensor> out;
        out.emplace_back(shape.WithRows(g->num_ids));
        if (absl::Status s = StitchGatheredRows(*g, views, out[0].view()); !s.ok()) return done(s);
        done(std::move(out));
      });
}

}  // namespace

void GatherAsync(ShardClient& client, const VariableHandle& v, absl::Span<const int64_t> ids,
                 ShardingStrategy strategy, Done<Tensor> done) {
  absl::StatusOr<IdGrouping> grouping = v.layout.GroupIds(ids, strategy, DuplicateIds::kMerge);
  if (!grouping.ok()) {
    return done(Annotate(grouping.status(), absl::StrCat("gather from ", v.name)));
  }
  GatherGrouped(client, v, std::make_shared<const IdGrouping>(*std::move(grouping)),
                [shape = v.shape.WithRows(static_cast<int64_t>(ids.size())),
                 done = std::move(done)](absl::StatusOr<std::vector<Tensor>> blocks) {
                  if (!blocks.ok()) return done(blocks.status());
                  done(Concatenate(shape, *std::move(blocks)));
                });
}

absl::StatusOr<std::shared_ptr<const IdGrouping>> GroupStepIds(const VariableHandle& v,
                                                               const SortedIds& ids) {
  absl::StatusOr<IdGrouping> grouping = v.layout.GroupIds(ids);
  if (!grouping.ok()) return Annotate(grouping.status(), absl::StrCat("gather from ", v.name));
  return std::make_shared<const IdGrouping>(*std::move(grouping));
}

void GatherBlocksAsync(ShardClient& client, const VariableHandle& v,
                       std::shared_ptr<const IdGrouping> grouping, Done<std::vector<Tensor>> done) {
  GatherGrouped(client, v, std::move(grouping), std::move(done));
}

void SliceAsync(ShardClient& client, const VariableHandle& v, std::optional<int64_t> start,
                std::optional<int64_t> stop, int64_t step, Done<Tensor> done) {
  absl::StatusOr<SliceDecomposition> slice = v.layout.DecomposeSlice(start, stop, step);
  if (!slice.ok()) return done(Annotate(slice.status(), absl::StrCat("slice of ", v.name)));
  auto d = std::make_shared<SliceDecomposition>(*std::move(slice));
  std::vector<int64_t> shards;
  for (const ShardSlice& piece : d->pieces) shards.push_back(piece.shard);
  FanOut<GatherOp>(
      client, v, shards, [&](int64_t, size_t k) { return GatherOp{d->pieces[k].LocalRows()}; },
      [d, shape = v.shape, done = std::move(done)](absl::StatusOr<std::vector<ShardValue>> replies) {
        if (!replies.ok()) return done(replies.status());
        Tensor out(shape.WithRows(d->length));
        for (size_t k = 0; k < d->pieces.size(); ++k) {
          const Tensor& rows = (*replies)[k].value;
          const Shape want = shape.WithRows(static_cast<int64_t>(d->pieces[k].LocalRows().size()));
          if (rows.shape() != want) {
            return done(CheckSameShape(rows.shape(), want, "slice reply"));
          }
          std::copy(rows.values().begin(), rows.values().end(),
                    out.row(d->pieces[k].output_offset).data());
        }
        done(std::move(out));
      });
}

void AssignAsync(ShardClient& client, const VariableHandle& v, AssignKind kind, Tensor value,
                 DoneStatus done) {
  if (value.shape() != v.shape) {  // the message is only built on a mismatch
    return done(CheckSameShape(value.shape(), v.shape,
                               absl::StrCat(AssignKindName(kind), " to ", v.name)));
  }
  std::vector<Tensor> blocks = SplitIntoShardBlocks(v, std::move(value));
  FanOut<AssignOp>(
      client, v, AllShards(v),
      [&](int64_t s, size_t) { return AssignOp{kind, std::move(blocks[s])}; },
      IgnoreVersions(std::move(done)));
}

void ScatterAsync(ShardClient& client, const VariableHandle& v, ScatterOp op,
                  absl::Span<const int64_t> ids, const Tensor& rows, DoneStatus done) {
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
  FanOut<ScatterRowsOp>(
      client, v, grouping->touched_shards,
      [&](int64_t s, size_t) { return ScatterRowsOp{op, std::move((*parts)[s])}; },
      IgnoreVersions(std::move(done)));
}

void ApplyDenseGradientAsync(ShardClient& client, const VariableHandle& v, Tensor grad,
                             DoneStatus done) {
  if (grad.shape() != v.shape) {  // the message is only built on a mismatch
    return done(CheckSameShape(grad.shape(), v.shape, absl::StrCat("gradient of ", v.name)));
  }
  std::vector<Tensor> blocks = SplitIntoShardBlocks(v, std::move(grad));
  FanOut<ApplyDenseGradientOp>(
      client, v, AllShards(v),
      [&](int64_t s, size_t) { return ApplyDenseGradientOp{std::move(blocks[s])}; },
      IgnoreVersions(std::move(done)));
}

void ApplySparseGradientAsync(ShardClient& client, const VariableHandle& v,
                              const IndexedSlices& grad, DoneStatus done) {
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
  // Every shard, even one without rows: each application is one step of the variable's optimizer
  // on all its shards (Note [One step count per variable] in core/ps/shard_state.h).
  FanOut<ApplySparseGradientOp>(
      client, v, AllShards(v),
      [&](int64_t s, size_t) { return ApplySparseGradientOp{std::move((*parts)[s])}; },
      IgnoreVersions(std::move(done)));
}

void ApplyStepGradientAsync(ShardClient& client, const VariableHandle& v,
                            const IdGrouping& grouping, std::shared_ptr<const Tensor> rows,
                            DoneStatus done) {
  if (!grouping.in_shard_order || v.shape.rank() == 0 ||
      rows->shape() != v.shape.WithRows(grouping.num_ids) ||
      grouping.local_ids.size() != v.shards.size()) {
    return done(absl::InternalError(
        absl::StrCat("sparse gradient of ", v.name, ": rows ", rows->shape().ToString(),
                     " do not follow the step's grouping of ", grouping.num_ids, " ids")));
  }
  std::vector<int64_t> begin(grouping.local_ids.size(), 0);
  int64_t next = 0;
  for (int64_t s : grouping.touched_shards) {
    begin[s] = next;
    next += static_cast<int64_t>(grouping.local_ids[s].size());
  }
  // Every shard, even one without rows, as ApplySparseGradientAsync.
  FanOut<ApplySparseGradientOp>(
      client, v, AllShards(v),
      [&](int64_t s, size_t) {
        return ApplySparseGradientOp{SparseRows::Share(grouping.local_ids[s], rows, begin[s])};
      },
      IgnoreVersions(std::move(done)));
}

void UpdateFromReplicasAsync(ShardClient& client, const VariableHandle& v, AssignKind kind,
                             absl::Span<const Tensor> per_replica, DoneStatus done) {
  absl::StatusOr<Tensor> combined = AggregateReplicaValues(v.aggregation, per_replica);
  if (!combined.ok()) return done(Annotate(combined.status(), absl::StrCat("update of ", v.name)));
  AssignAsync(client, v, kind, *std::move(combined), std::move(done));
}

void ReadReducedAsync(ShardClient& client, const PerWorkerVariable& v, Done<Tensor> done) {
  if (v.copies.empty()) return done(absl::FailedPreconditionError(v.name + " has no copies"));
  auto join = FanIn<Tensor>::Start(
      v.copies.size(), [aggregation = v.aggregation, name = v.name,
                        done = std::move(done)](absl::StatusOr<std::vector<Tensor>> values) {
        if (!values.ok()) return done(values.status());
        absl::StatusOr<Tensor> reduced = AggregateReplicaValues(aggregation, *values);
        done(reduced.ok() ? std::move(reduced) : Annotate(reduced.status(), "reading " + name));
      });
  for (size_t k = 0; k < v.copies.size(); ++k) ReadAsync(client, v.copies[k], join->Slot(k));
}

}  // namespace tessera
