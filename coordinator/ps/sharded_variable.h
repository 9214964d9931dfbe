// ShardedVariable: the driver's handle on a variable created under a ParameterServerStrategy —
// unpartitioned (one shard), sharded along axis 0, or ON_READ (one copy per worker).
//
// Every operation is a blocking convenience over the non-blocking operations of
// actors/ps/variable_ops.h, which workers use through handle() / ForWorker(). Errors are those of
// variable_ops.h: InvalidArgument for bad input (nothing touched), a shard's error reply, or
// Unavailable for a shard that is gone.
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(ShardedVariable emb, strategy.CreateVariable({.name = "emb", ...}));
//   TESSERA_ASSIGN_OR_RETURN(Tensor rows, emb.Gather({7, 3, 7}));   // rows 7, 3, 7
//   TESSERA_RETURN_IF_ERROR(emb.ScatterAdd({3}, Tensor(Shape{1, 4}, 1.0f)));
//
// Thread-safety: a ShardedVariable is a cheap, immutable handle; operations from several threads
// are serialized per shard by the shards' mailboxes.
#pragma once

#include <caf/actor_system.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "actors/ps/variable_ops.h"
#include "tessera/tensor.h"

namespace tessera {

// One shard as Variables() lists it.
struct VariableShard {
  std::string name;  // "emb/part_1"
  int64_t offset = 0;
  Shape shape;
  int32_t ps_task = 0;
};

class ShardedVariable {
 public:
  ShardedVariable() = default;
  // An ON_WRITE variable (partitioned or not).
  ShardedVariable(caf::actor_system* system, VariableHandle handle)
      : system_(system), handle_(std::move(handle)) {}
  // An ON_READ variable: one copy per worker.
  ShardedVariable(caf::actor_system* system, PerWorkerVariable per_worker);

  const std::string& name() const { return handle_.name; }
  const Shape& shape() const { return handle_.shape; }
  DType dtype() const { return handle_.dtype; }
  VariableSynchronization synchronization() const { return handle_.synchronization; }
  VariableAggregation aggregation() const { return handle_.aggregation; }
  bool is_on_read() const { return per_worker_.has_value(); }
  int64_t num_shards() const { return handle_.num_shards(); }
  // The shards (or, ON_READ, the per-worker copies) in order.
  std::vector<VariableShard> Variables() const;

  // For workers: the handle their non-blocking operations take. ON_READ: worker `slot`'s copy.
  const VariableHandle& handle() const { return handle_; }
  absl::StatusOr<VariableHandle> ForWorker(int32_t slot) const;

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

 private:
  friend class ParameterServerStrategy;  // moves shards to a replacement PS node
  // Networked PS recovery: shard `shard` (or worker `copy`'s ON_READ copy) is now `actor`, on PS
  // task `task`.
  void ReplaceShard(int64_t shard, shard_actor actor, int32_t task) {
    handle_.shards[shard] = std::move(actor);
    handle_.ps_tasks[shard] = task;
  }
  void ReplaceCopy(int64_t copy, shard_actor actor, int32_t task) {
    per_worker_->copies[copy].shards[0] = std::move(actor);
    per_worker_->copies[copy].ps_tasks[0] = task;
  }

  absl::Status AssignWith(AssignKind kind, const Tensor& value) const;
  absl::Status RequireOnWrite(absl::string_view op) const;

  caf::actor_system* system_ = nullptr;
  VariableHandle handle_;  // ON_READ: name, shape and dtype only
  std::optional<PerWorkerVariable> per_worker_;
};

}  // namespace tessera
