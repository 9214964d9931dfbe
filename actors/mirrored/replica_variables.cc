// A replica's variables through its actor: created, read for a checkpoint and put back from
// one.
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/base/error.h"
#include "actors/mirrored/internal/replica_state.h"

namespace tessera::mirrored_internal {

caf::result<bool> CreateVariable(Self self, const MirroredVariableSpec& spec) {
  absl::Status created = self->state.replica->CreateVariable(spec);
  if (!created.ok()) return StatusToError(created);
  return true;
}

caf::result<TensorSlice> ReadSlice(Self self, const std::string& name) {
  absl::StatusOr<TensorSlice> slice = self->state.replica->Slice(name);
  if (!slice.ok()) return StatusToError(slice.status());
  return *std::move(slice);
}

caf::result<bool> LoadSlice(Self self, const TensorSlice& slice) {
  absl::Status loaded = self->state.replica->Load(slice);
  if (!loaded.ok()) return StatusToError(loaded);
  return true;
}

caf::result<SavedSlice> SaveSlice(Self self, const std::string& name, const SaveOp& op) {
  absl::StatusOr<SavedSlice> saved =
      self->state.replica->Save(name, op, *self->state.options.store);
  if (!saved.ok()) return StatusToError(saved.status());
  return *std::move(saved);
}

}  // namespace tessera::mirrored_internal
