// A SliceStore for tests that keeps, by path, a copy of every slice it is given to write.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/checkpoint/save.h"

namespace tessera::testing {

// Keeps what it is given to write, by path; with `fail` it refuses every write (the disk is full).
class KeptSlices final : public SliceStore {
 public:
  bool fail = false;
  mutable std::map<std::string, TensorSlice> written;

  absl::Status Write(const std::string& path, const TensorSliceView& slice) const override {
    if (fail) return absl::ResourceExhaustedError("the disk is full");
    TensorSlice kept;
    kept.variable = slice.variable;
    kept.full_shape = slice.full_shape;
    kept.row_offset = slice.row_offset;
    kept.value = Tensor::Copy(slice.value);
    kept.slot_names = slice.slot_names;
    for (const ConstTensorView& slot : slice.slots) kept.slots.push_back(Tensor::Copy(slot));
    kept.step = slice.step;
    kept.checkpoint = slice.checkpoint;
    written[path] = std::move(kept);
    return absl::OkStatus();
  }
  absl::StatusOr<TensorSlice> ReadBlock(const std::string&, const CheckpointVariable&, int64_t,
                                        int64_t) const override {
    return absl::UnimplementedError("not read here");
  }
};

}  // namespace tessera::testing
