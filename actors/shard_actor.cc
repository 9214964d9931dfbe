#include "actors/shard_actor.h"

#include <utility>

#include "actors/error.h"

namespace tessera {
namespace {

// The reply of a mutating op: the new version, or the error.
caf::result<int64_t> VersionOr(const absl::Status& status, const ShardState& shard) {
  if (!status.ok()) return StatusToError(status);
  return shard.version();
}

}  // namespace

shard_actor::behavior_type ShardActor(shard_actor::stateful_pointer<ShardActorState> self,
                                      std::shared_ptr<ShardState> shard) {
  self->state.shard = std::move(shard);
  // The handlers capture the ShardState by reference: it lives in the actor's state, which
  // outlives the behaviour.
  ShardState& s = *self->state.shard;
  return {
      [&s](info_atom) -> ShardInfo { return s.Info(); },
      [&s](read_atom) -> ShardValue {
        return ShardValue{s.Read(), s.version()};
      },
      [&s](gather_atom, const RowIds& ids) -> caf::result<ShardValue> {
        auto rows = s.Gather(ids.ids);
        if (!rows.ok()) return StatusToError(rows.status());
        return ShardValue{std::move(rows).value(), s.version()};
      },
      [&s](assign_atom, AssignKind kind, const Tensor& value) -> caf::result<int64_t> {
        return VersionOr(s.Assign(kind, value), s);
      },
      [&s](scatter_atom, ScatterOp op, const IndexedSlices& rows) -> caf::result<int64_t> {
        return VersionOr(s.Scatter(op, rows.indices, rows.values), s);
      },
      [&s](apply_grad_atom, const Tensor& grad) -> caf::result<int64_t> {
        return VersionOr(s.ApplyDenseGradient(grad), s);
      },
      [&s](apply_grad_atom, const IndexedSlices& grad) -> caf::result<int64_t> {
        return VersionOr(s.ApplySparseGradient(grad.indices, grad.values), s);
      },
      [&s](set_opt_atom, const OptimizerSpec& spec) -> caf::result<int64_t> {
        return VersionOr(s.SetOptimizer(spec), s);
      },
      [&s](snapshot_atom) -> ShardSnapshot { return s.Snapshot(); },
      [&s](restore_atom, const ShardSnapshot& snapshot) -> caf::result<int64_t> {
        return VersionOr(s.Restore(snapshot), s);
      },
  };
}

shard_actor SpawnShard(caf::actor_system& system, ShardState shard) {
  return system.spawn(ShardActor, std::make_shared<ShardState>(std::move(shard)));
}

}  // namespace tessera
