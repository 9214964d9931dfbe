// The non-blocking operations of one variable: each fans out to the variable's shards through a
// ShardClient (actors/ps/shard_client.h) and stitches the replies (docs/design.md §2). Workers call
// these from inside their handlers (a worker never blocks its thread); coordinator/'s
// ShardedVariable wraps them in blocking forms for drivers.
//
// Every operation sends at most one op per touched shard, all in flight at once (batched per PS
// node when the client batches: then they leave with the client's next Flush). It calls `done`
// exactly once, from the client's actor, when every reply has arrived or the first error did:
//   - InvalidArgument for bad input detected before anything is sent (an id out of range, a
//     value of the wrong shape): no shard is touched;
//   - a shard's own error, prefixed with the operation and the shard's name (shards validate
//     before they write, so a rejected shard is unchanged — but the other shards of a
//     multi-shard update may have applied theirs);
//   - Unavailable naming the shard and its PS task when the shard is gone.
//
// Example (inside a worker's handler):
//   GatherAsync(ctx.shards(), user_embedding, ids, ShardingStrategy::kDiv,
//               [=](absl::StatusOr<Tensor> rows) { ... });
//
// Thread-safety: run on the client's actor; the handles are immutable values.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "actors/base/actor_handles.h"
#include "actors/ps/shard_client.h"
#include "core/base/sorted_ids.h"
#include "core/variables/aggregation.h"
#include "core/variables/indexed_slices.h"
#include "core/variables/scatter.h"
#include "core/variables/shard_layout.h"
#include "tessera/status.h"
#include "tessera/tensor.h"

namespace tessera {

// The whole variable: the shards' blocks concatenated.
void ReadAsync(ShardClient& client, const VariableHandle& v, Done<Tensor> done);

// Rows `ids` (global) in the caller's order (TF's embedding_lookup / sparse_read). Ids are
// grouped by shard under `strategy`; a repeated id is requested once.
void GatherAsync(ShardClient& client, const VariableHandle& v, absl::Span<const int64_t> ids,
                 ShardingStrategy strategy, Done<Tensor> done);

// A step's sorted unique ids of one table, grouped by shard (div) once: the step's gather sends
// the grouping's requests (GatherBlocksAsync) and its sparse gradient is split along it
// (ApplyStepGradientAsync). The grouping is in_shard_order. InvalidArgument, naming the
// variable, for an id outside it.
absl::StatusOr<std::shared_ptr<const IdGrouping>> GroupStepIds(const VariableHandle& v,
                                                               const SortedIds& ids);

// Gathers a step's ids (grouped by GroupStepIds), as the row blocks the shards replied, in order:
// block k holds the rows of the k-th shard the ids touch. Nothing joins them (EmbeddingRows,
// core/model/model.h, takes them so).
void GatherBlocksAsync(ShardClient& client, const VariableHandle& v,
                       std::shared_ptr<const IdGrouping> grouping, Done<std::vector<Tensor>> done);

// numpy's v[start:stop:step]; only the shards the slice touches are contacted.
void SliceAsync(ShardClient& client, const VariableHandle& v, std::optional<int64_t> start,
                std::optional<int64_t> stop, int64_t step, Done<Tensor> done);

// assign / assign_add / assign_sub of the whole variable, split by the shards' offsets.
void AssignAsync(ShardClient& client, const VariableHandle& v, AssignKind kind, Tensor value,
                 DoneStatus done);

// A scatter op with global ids: rows[k] applies to row ids[k] (duplicates as
// core/variables/scatter.h).
void ScatterAsync(ShardClient& client, const VariableHandle& v, ScatterOp op,
                  absl::Span<const int64_t> ids, const Tensor& rows, DoneStatus done);

// One optimizer step with a dense gradient of the variable's shape, split by shard.
void ApplyDenseGradientAsync(ShardClient& client, const VariableHandle& v, Tensor grad,
                             DoneStatus done);

// One optimizer step on the rows of a sparse gradient with global ids; duplicates are summed and
// each touched shard gets one op with its local ids.
void ApplySparseGradientAsync(ShardClient& client, const VariableHandle& v,
                              const IndexedSlices& grad, DoneStatus done);

// One optimizer step on a step's sparse gradient: `rows` has one row per id the step gathered
// (`grouping`, from GroupStepIds), in their order. Each shard's op shares its range of `rows`
// rather than copying it (Note [A step's gradient is split without a copy],
// core/variables/indexed_slices.h), and every shard gets one, as ApplySparseGradientAsync does.
// `rows` must not change while an op holds it. Internal for a grouping not in shard order or
// rows that do not match it.
void ApplyStepGradientAsync(ShardClient& client, const VariableHandle& v,
                            const IdGrouping& grouping, std::shared_ptr<const Tensor> rows,
                            DoneStatus done);

// An ON_WRITE update made by several replicas in one step: the replicas' values are combined with
// the variable's aggregation (core/variables/aggregation.h; NONE is an error) and applied once with
// `kind`.
void UpdateFromReplicasAsync(ShardClient& client, const VariableHandle& v, AssignKind kind,
                             absl::Span<const Tensor> per_replica, DoneStatus done);

// An ON_READ variable: one unpartitioned copy per worker ("name/worker_k"), combined on read.
struct PerWorkerVariable {
  std::string name;
  Shape shape;
  VariableAggregation aggregation = VariableAggregation::kSum;
  std::vector<VariableHandle> copies;  // copies[k] belongs to worker k
};

// Reads every worker's copy and reduces them with the variable's aggregation.
void ReadReducedAsync(ShardClient& client, const PerWorkerVariable& v, Done<Tensor> done);

}  // namespace tessera
