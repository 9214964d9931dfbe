#include "actors/shard_actor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/error.h"
#include "core/status.h"
#include "schema/checkpoint_io.h"

namespace tessera {
namespace {

// The reply of a mutating op: the new version, or the error.
caf::result<int64_t> VersionOr(const absl::Status& status, const ShardState& shard) {
  if (!status.ok()) return StatusToError(status);
  return shard.version();
}

// Writes the shard's block, slots and step to dir/file, straight from the shard's memory: the
// actor handles nothing else meanwhile, so the block cannot change under the write.
absl::StatusOr<SavedSlice> Save(const ShardState& s, const std::string& dir,
                                const std::string& file) {
  TensorSliceView slice;
  slice.variable = s.spec().variable;
  slice.full_shape = s.full_shape();
  slice.dtype = s.spec().dtype;
  slice.row_offset = s.row_offset();
  slice.value = s.value().view();
  if (s.optimizer() != nullptr) slice.slot_names = s.optimizer()->SlotNames();
  for (const Tensor& slot : s.slots().tensors) slice.slots.push_back(slot.view());
  slice.step = s.slots().step;
  RETURN_IF_ERROR(Annotate(WriteSliceFile(absl::StrCat(dir, "/", file), slice),
                           absl::StrCat("saving ", s.name())));
  SavedSlice saved;
  saved.ref = SliceFileRef{file, s.row_offset(), s.spec().rows};
  saved.slot_names = std::move(slice.slot_names);
  saved.step = slice.step;
  if (s.optimizer() != nullptr) saved.optimizer = s.optimizer()->spec();
  return saved;
}

// Restores the shard from the slices of `variable` (saved under `dir`) that its rows overlap.
// Slots come along when the checkpoint's slot names are the shard's own; a checkpoint without
// slots restores the values and gives the optimizer fresh slots.
absl::Status Load(ShardState& s, const std::string& dir, const CheckpointVariable& variable) {
  const std::string what = absl::StrCat("restoring ", s.name(), " from ", dir);
  if (variable.shape != s.full_shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the checkpoint's ", variable.name, " has shape ", variable.shape.ToString(),
        " but the variable has ", s.full_shape().ToString()));
  }
  if (variable.dtype != s.spec().dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the checkpoint's dtype is ",
                                                   DTypeName(variable.dtype), ", the variable's ",
                                                   DTypeName(s.spec().dtype)));
  }
  // Reads only the rows this shard holds, straight into a fresh block (the shard is unchanged
  // until the whole block has been read and checked).
  ASSIGN_OR_RETURN(TensorSlice block,
                   ReadSliceBlock(dir, variable, s.row_offset(), s.spec().rows));
  ShardSnapshot snapshot;
  snapshot.value = std::move(block.value);
  snapshot.step = block.step;
  const std::vector<std::string> own_slots =
      s.optimizer() != nullptr ? s.optimizer()->SlotNames() : std::vector<std::string>{};
  if (!block.slot_names.empty() && block.slot_names == own_slots) {
    snapshot.slot_names = std::move(block.slot_names);
    snapshot.slots = std::move(block.slots);
  } else if (!block.slot_names.empty() && !own_slots.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the checkpoint has optimizer slots [", absl::StrJoin(block.slot_names, ", "),
        "] but the shard's optimizer has [", absl::StrJoin(own_slots, ", "), "]"));
  }
  return Annotate(s.Restore(std::move(snapshot)), what);
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
      [&s](save_atom, const std::string& dir,
           const std::string& file) -> caf::result<SavedSlice> {
        absl::StatusOr<SavedSlice> saved = Save(s, dir, file);
        if (!saved.ok()) return StatusToError(saved.status());
        return *std::move(saved);
      },
      [&s](load_atom, const std::string& dir,
           const CheckpointVariable& variable) -> caf::result<int64_t> {
        return VersionOr(Load(s, dir, variable), s);
      },
  };
}

shard_actor SpawnShard(caf::actor_system& system, ShardState shard) {
  return system.spawn(ShardActor, std::make_shared<ShardState>(std::move(shard)));
}

}  // namespace tessera
