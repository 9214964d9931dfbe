#include "core/checkpoint/save.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {

absl::StatusOr<SavedSlice> WriteSlice(TensorSliceView slice, std::optional<OptimizerSpec> optimizer,
                                      const SaveOp& op, const SliceStore& store,
                                      absl::string_view what) {
  slice.checkpoint = op.checkpoint;
  TESSERA_RETURN_IF_ERROR(Annotate(store.Write(absl::StrCat(op.dir, "/", op.file), slice),
                                   absl::StrCat("saving ", what)));
  SavedSlice saved;
  saved.ref = SliceFileRef{op.file, slice.row_offset, slice.value.shape().rows()};
  saved.slot_names = std::move(slice.slot_names);
  saved.step = slice.step;
  saved.optimizer = std::move(optimizer);
  return saved;
}

CheckpointVariable ManifestEntry(const std::string& name, const Shape& shape, DType dtype,
                                 const std::vector<SavedSlice>& saved) {
  CheckpointVariable entry;
  entry.name = name;
  entry.shape = shape;
  entry.dtype = dtype;
  for (const SavedSlice& slice : saved) {
    entry.slices.push_back(slice.ref);
    entry.step = std::max(entry.step, slice.step);
    entry.slot_names = slice.slot_names;
    if (slice.optimizer.has_value()) entry.optimizer = slice.optimizer;
  }
  return entry;
}

}  // namespace tessera
