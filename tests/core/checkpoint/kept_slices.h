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
    written[path] = CopyOf(slice);
    return absl::OkStatus();
  }
  absl::StatusOr<TensorSlice> ReadBlock(const std::string&, const CheckpointVariable&, int64_t,
                                        int64_t) const override {
    return absl::UnimplementedError("not read here");
  }
};

}  // namespace tessera::testing
