#include "coordinator/ps/sharded_variable.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/ps/internal/await.h"
#include "tessera/status.h"

namespace tessera {

using internal::Await;
using internal::AwaitStatus;

ShardedVariable::ShardedVariable(caf::actor_system* system, PerWorkerVariable per_worker)
    : system_(system), per_worker_(std::move(per_worker)) {
  handle_.name = per_worker_->name;
  handle_.shape = per_worker_->shape;
  handle_.synchronization = VariableSynchronization::kOnRead;
  handle_.aggregation = per_worker_->aggregation;
  if (!per_worker_->copies.empty()) handle_.dtype = per_worker_->copies[0].dtype;
}

std::vector<VariableShard> ShardedVariable::Variables() const {
  std::vector<VariableShard> out;
  if (per_worker_.has_value()) {
    for (const VariableHandle& copy : per_worker_->copies) {
      out.push_back({copy.name, 0, copy.shape, copy.ps_tasks.empty() ? 0 : copy.ps_tasks[0]});
    }
    return out;
  }
  for (int64_t s = 0; s < handle_.num_shards(); ++s) {
    const ShardExtent e = handle_.layout.Extent(s);
    out.push_back({handle_.ShardNameOf(s), e.offset,
                   handle_.shape.rank() == 0 ? handle_.shape : handle_.shape.WithRows(e.rows),
                   handle_.ps_tasks[s]});
  }
  return out;
}

absl::StatusOr<VariableHandle> ShardedVariable::ForWorker(int32_t slot) const {
  if (!per_worker_.has_value()) return handle_;
  if (slot < 0 || slot >= static_cast<int32_t>(per_worker_->copies.size())) {
    return absl::InvalidArgumentError(absl::StrCat(name(), " has no copy for worker ", slot));
  }
  return per_worker_->copies[slot];
}

absl::Status ShardedVariable::RequireOnWrite(absl::string_view op) const {
  if (!per_worker_.has_value()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      op, " of ON_READ variable ", name(),
      " from the driver: each worker updates its own copy (ForWorker) inside a closure"));
}

absl::StatusOr<Tensor> ShardedVariable::Read() const {
  if (per_worker_.has_value()) {
    return Await<Tensor>(*system_, [v = *per_worker_](caf::event_based_actor* self, auto done) {
      ShardClient client(self);
      ReadReducedAsync(client, v, std::move(done));
    });
  }
  return Await<Tensor>(*system_, [v = handle_](caf::event_based_actor* self, auto done) {
    ShardClient client(self);
    ReadAsync(client, v, std::move(done));
  });
}

absl::StatusOr<Tensor> ShardedVariable::Gather(absl::Span<const int64_t> ids,
                                               ShardingStrategy strategy) const {
  if (absl::Status s = RequireOnWrite("gather"); !s.ok()) return s;
  return Await<Tensor>(*system_, [v = handle_, ids = Ids(ids.begin(), ids.end()), strategy](
                                     caf::event_based_actor* self, auto done) {
    ShardClient client(self);
    GatherAsync(client, v, ids, strategy, std::move(done));
  });
}

absl::StatusOr<Tensor> ShardedVariable::Slice(std::optional<int64_t> start,
                                              std::optional<int64_t> stop, int64_t step) const {
  if (absl::Status s = RequireOnWrite("slice"); !s.ok()) return s;
  return Await<Tensor>(*system_,
                       [v = handle_, start, stop, step](caf::event_based_actor* self, auto done) {
                         ShardClient client(self);
                         SliceAsync(client, v, start, stop, step, std::move(done));
                       });
}

absl::StatusOr<Tensor> ShardedVariable::Index(int64_t index) const {
  absl::StatusOr<RowLocation> location = handle_.layout.LocateIndex(index);
  if (!location.ok()) return Annotate(location.status(), absl::StrCat(name(), "[", index, "]"));
  const int64_t row = handle_.layout.GlobalRow(*location);
  absl::StatusOr<Tensor> rows = Slice(row, row + 1, 1);
  if (!rows.ok()) return rows.status();
  Tensor out = *std::move(rows);
  std::vector<int64_t> dims(shape().dims().begin() + 1, shape().dims().end());
  if (absl::Status s = out.Reshape(Shape(dims)); !s.ok()) return s;
  return out;
}

absl::Status ShardedVariable::AssignWith(AssignKind kind, const Tensor& value) const {
  TESSERA_RETURN_IF_ERROR(RequireOnWrite(AssignKindName(kind)));
  return AwaitStatus(*system_, [v = handle_, kind, value](caf::event_based_actor* self, auto done) {
    ShardClient client(self);
    AssignAsync(client, v, kind, value, std::move(done));
  });
}

absl::Status ShardedVariable::Scatter(ScatterOp op, absl::Span<const int64_t> ids,
                                      const Tensor& rows) const {
  TESSERA_RETURN_IF_ERROR(RequireOnWrite(ScatterOpName(op)));
  return AwaitStatus(*system_, [v = handle_, op, ids = Ids(ids.begin(), ids.end()), rows](
                                   caf::event_based_actor* self, auto done) {
    ShardClient client(self);
    ScatterAsync(client, v, op, ids, rows, std::move(done));
  });
}

absl::Status ShardedVariable::UpdateFromReplicas(AssignKind kind,
                                                 absl::Span<const Tensor> per_replica) const {
  TESSERA_RETURN_IF_ERROR(RequireOnWrite("update from replicas"));
  return AwaitStatus(*system_,
                     [v = handle_, kind, values = std::vector<Tensor>(per_replica.begin(),
                                                                      per_replica.end())](
                         caf::event_based_actor* self, auto done) {
                       ShardClient client(self);
                       UpdateFromReplicasAsync(client, v, kind, values, std::move(done));
                     });
}

}  // namespace tessera
