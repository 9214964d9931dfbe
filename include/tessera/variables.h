// Variables on parameter servers: how a variable synchronizes and aggregates (TF's
// tf.VariableSynchronization and tf.VariableAggregation), the whole-variable assigns and the
// scatter ops, how ids map to shards, and ShardedVariable, the handle on a variable that a
// ParameterServerStrategy created (tessera/strategy.h) — unpartitioned (one shard), sharded
// along axis 0, or ON_READ (one copy per worker).
//
// - ON_WRITE (the default, AUTO): one copy of the variable (possibly sharded) on the parameter
//   servers. Updates that several replicas make in one step are first combined with the
//   variable's aggregation (SUM, MEAN or ONLY_FIRST_REPLICA) and applied once. NONE cannot
//   combine replica updates: such an update is an error.
// - ON_READ: one copy per worker (e.g. a per-worker counter); a read from the driver reduces the
//   copies with the aggregation. NONE is an error there too. MEAN needs a floating dtype.
//
// Every ShardedVariable operation blocks until the shards have answered. Errors:
// InvalidArgument for bad input (nothing touched), a shard's error reply (prefixed with the
// operation and the shard's name; shards validate before they write, so a rejected shard is
// unchanged, but the other shards of a multi-shard update may have applied theirs), or
// Unavailable naming the shard and its PS task when the shard is gone. Inside a replica function
// the same operations are non-blocking, through its ReplicaContext (tessera/coordinator.h).
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(ShardedVariable emb, strategy.CreateVariable({.name = "emb", ...}));
//   TESSERA_ASSIGN_OR_RETURN(Tensor rows, emb.Gather({7, 3, 7}));   // rows 7, 3, 7
//   TESSERA_RETURN_IF_ERROR(emb.ScatterAdd({3}, Tensor(Shape{1, 4}, 1.0f)));
//
// Thread-safety: a ShardedVariable is a cheap, immutable handle; operations from several threads
// are serialized per shard by the shards' mailboxes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

// -- The vocabulary -------------------------------------------------------------------------------
// The numeric values of these enums are part of the wire format: never renumber.

enum class VariableSynchronization : int32_t { kAuto = 0, kOnWrite = 1, kOnRead = 2 };
enum class VariableAggregation : int32_t {
  kNone = 0,
  kSum = 1,
  kMean = 2,
  kOnlyFirstReplica = 3,
};
absl::string_view SynchronizationName(VariableSynchronization sync);  // "auto", "on_write", ...
absl::string_view AggregationName(VariableAggregation aggregation);   // "none", "sum", ...

// Whole-variable assignment: v = value, v += value or v -= value.
enum class AssignKind : int32_t { kAssign = 0, kAdd = 1, kSub = 2 };
// "assign", "assign_add", "assign_sub"; "assign_<invalid>" outside the enum.
absl::string_view AssignKindName(AssignKind kind);

// The seven scatter ops (TF's tf.Variable.scatter_*): rows[k] applies to row ids[k]. A repeated
// id applies every one of its rows in the order given (add and sub accumulate them, mul, div, min
// and max compose, update's last row wins). Division follows IEEE 754 (x / 0 is +-inf); min and
// max propagate NaN.
enum class ScatterOp : int32_t {
  kAdd = 0,
  kSub = 1,
  kMul = 2,
  kDiv = 3,
  kMin = 4,
  kMax = 5,
  kUpdate = 6,
};
// "scatter_add", "scatter_sub", ..., "scatter_update"; "scatter_<invalid>" for a value outside the
// enum (one may arrive from the wire).
absl::string_view ScatterOpName(ScatterOp op);
// The inverse of ScatterOpName; InvalidArgument for anything else.
absl::StatusOr<ScatterOp> ParseScatterOp(absl::string_view name);

// How a gather's ids map to shards (TF's partition_strategy): "div" puts contiguous rows in each
// shard (how variables are sharded), "mod" row id % num_shards.
enum class ShardingStrategy : int { kDiv = 0, kMod = 1 };
absl::string_view ShardingStrategyName(ShardingStrategy strategy);  // "div", "mod"
// InvalidArgument for anything but "div" or "mod".
absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name);

// -- ShardedVariable
// -------------------------------------------------------------------------------

// One shard as ShardedVariable::Variables() lists it.
struct VariableShard {
  std::string name;  // "emb/part_1"
  int64_t offset = 0;
  Shape shape;
  int32_t ps_task = 0;
};

struct VariableHandle;  // internal: where the shards are (actors/base/actor_handles.h)

class ShardedVariable {
 public:
  // No variable: every operation is FailedPrecondition.
  ShardedVariable();

  const std::string& name() const;
  const Shape& shape() const;
  DType dtype() const;
  VariableSynchronization synchronization() const;
  VariableAggregation aggregation() const;
  bool is_on_read() const;
  int64_t num_shards() const;
  // The shards (or, ON_READ, the per-worker copies) in order.
  std::vector<VariableShard> Variables() const;

  // The whole value; ON_READ: the workers' copies reduced with the aggregation.
  absl::StatusOr<Tensor> Read() const;
  // Rows `ids` in order (embedding lookup), ids grouped under `strategy` (div by default).
  absl::StatusOr<Tensor> Gather(absl::Span<const int64_t> ids,
                                ShardingStrategy strategy = ShardingStrategy::kDiv) const;
  // numpy v[start:stop:step] (only the touched shards are contacted) and v[index].
  absl::StatusOr<Tensor> Slice(std::optional<int64_t> start, std::optional<int64_t> stop,
                               int64_t step = 1) const;
  absl::StatusOr<Tensor> Index(int64_t index) const;

  absl::Status Assign(const Tensor& value) const { return AssignWith(AssignKind::kAssign, value); }
  absl::Status AssignAdd(const Tensor& value) const { return AssignWith(AssignKind::kAdd, value); }
  absl::Status AssignSub(const Tensor& value) const { return AssignWith(AssignKind::kSub, value); }
  absl::Status Scatter(ScatterOp op, absl::Span<const int64_t> ids, const Tensor& rows) const;
  absl::Status ScatterAdd(absl::Span<const int64_t> ids, const Tensor& rows) const {
    return Scatter(ScatterOp::kAdd, ids, rows);
  }
  absl::Status ScatterUpdate(absl::Span<const int64_t> ids, const Tensor& rows) const {
    return Scatter(ScatterOp::kUpdate, ids, rows);
  }
  // An ON_WRITE update made by several replicas in one step, combined by the aggregation.
  absl::Status UpdateFromReplicas(AssignKind kind, absl::Span<const Tensor> per_replica) const;

  // Internal, for the library's workers: the handle the non-blocking operations take
  // (actors/ps/variable_ops.h); ON_READ: worker `slot`'s copy.
  const VariableHandle& handle() const;
  absl::StatusOr<VariableHandle> ForWorker(int32_t slot) const;
  // Internal: what stands behind the handle (actors/ps/sharded_variable_state.h).
  struct State;

 private:
  friend class ShardedVariableAccess;  // makes and repoints handles
  explicit ShardedVariable(std::shared_ptr<const State> state);

  absl::Status AssignWith(AssignKind kind, const Tensor& value) const;
  // OK when the variable exists and is ON_WRITE; FailedPrecondition naming `op` otherwise.
  absl::Status RequireOnWrite(absl::string_view op) const;

  std::shared_ptr<const State> state_;  // null: no variable
};

}  // namespace tessera
