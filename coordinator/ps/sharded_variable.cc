#include "coordinator/ps/sharded_variable.h"

#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/ps/internal/await.h"
#include "tessera/status.h"

namespace tessera {

using internal::Await;
using internal::AwaitStatus;

absl::Status ShardedVariable::RequireOnWrite(absl::string_view op) const {
  if (state_ == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(op, " of no variable (an empty handle)"));
  }
  if (!is_on_read()) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      op, " of ON_READ variable ", name(),
      " from the driver: each worker updates its own copy (ForWorker) inside a closure"));
}

absl::StatusOr<Tensor> ShardedVariable::Read() const {
  if (state_ == nullptr)
    return absl::FailedPreconditionError("read of no variable (an empty handle)");
  if (is_on_read()) {
    return Await<Tensor>(*state_->system,
                         [v = *state_->per_worker](caf::event_based_actor* self, auto done) {
                           ShardClient client(self);
                           ReadReducedAsync(client, v, std::move(done));
                         });
  }
  return Await<Tensor>(*state_->system, [v = handle()](caf::event_based_actor* self, auto done) {
    ShardClient client(self);
    ReadAsync(client, v, std::move(done));
  });
}

absl::StatusOr<Tensor> ShardedVariable::Gather(absl::Span<const int64_t> ids,
                                               ShardingStrategy strategy) const {
  if (absl::Status s = RequireOnWrite("gather"); !s.ok()) return s;
  return Await<Tensor>(*state_->system, [v = handle(), ids = Ids(ids.begin(), ids.end()), strategy](
                                            caf::event_based_actor* self, auto done) {
    ShardClient client(self);
    GatherAsync(client, v, ids, strategy, std::move(done));
  });
}

absl::StatusOr<Tensor> ShardedVariable::Slice(std::optional<int64_t> start,
                                              std::optional<int64_t> stop, int64_t step) const {
  if (absl::Status s = RequireOnWrite("slice"); !s.ok()) return s;
  return Await<Tensor>(*state_->system,
                       [v = handle(), start, stop, step](caf::event_based_actor* self, auto done) {
                         ShardClient client(self);
                         SliceAsync(client, v, start, stop, step, std::move(done));
                       });
}

absl::StatusOr<Tensor> ShardedVariable::Index(int64_t index) const {
  if (absl::Status s = RequireOnWrite("index"); !s.ok()) return s;
  const VariableHandle& h = handle();
  absl::StatusOr<RowLocation> location = h.layout.LocateIndex(index);
  if (!location.ok()) return Annotate(location.status(), absl::StrCat(name(), "[", index, "]"));
  const int64_t row = h.layout.GlobalRow(*location);
  absl::StatusOr<Tensor> rows = Slice(row, row + 1, 1);
  if (!rows.ok()) return rows.status();
  Tensor out = *std::move(rows);
  std::vector<int64_t> dims(shape().dims().begin() + 1, shape().dims().end());
  if (absl::Status s = out.Reshape(Shape(dims)); !s.ok()) return s;
  return out;
}

absl::Status ShardedVariable::AssignWith(AssignKind kind, const Tensor& value) const {
  TESSERA_RETURN_IF_ERROR(RequireOnWrite(AssignKindName(kind)));
  return AwaitStatus(*state_->system,
                     [v = handle(), kind, value](caf::event_based_actor* self, auto done) {
                       ShardClient client(self);
                       AssignAsync(client, v, kind, value, std::move(done));
                     });
}

absl::Status ShardedVariable::Scatter(ScatterOp op, absl::Span<const int64_t> ids,
                                      const Tensor& rows) const {
  TESSERA_RETURN_IF_ERROR(RequireOnWrite(ScatterOpName(op)));
  return AwaitStatus(*state_->system, [v = handle(), op, ids = Ids(ids.begin(), ids.end()), rows](
                                          caf::event_based_actor* self, auto done) {
    ShardClient client(self);
    ScatterAsync(client, v, op, ids, rows, std::move(done));
  });
}

absl::Status ShardedVariable::UpdateFromReplicas(AssignKind kind,
                                                 absl::Span<const Tensor> per_replica) const {
  TESSERA_RETURN_IF_ERROR(RequireOnWrite("update from replicas"));
  return AwaitStatus(
      *state_->system,
      [v = handle(), kind, values = std::vector<Tensor>(per_replica.begin(), per_replica.end())](
          caf::event_based_actor* self, auto done) {
        ShardClient client(self);
        UpdateFromReplicasAsync(client, v, kind, values, std::move(done));
      });
}

}  // namespace tessera
