#include "core/ps/first_touch.h"

#include <utility>

namespace tessera {

UninitializedRows::UninitializedRows(InitializerSpec initializer, Shape full_shape,
                                     int64_t row_offset, int64_t rows)
    : initializer_(std::move(initializer)),
      full_shape_(std::move(full_shape)),
      row_offset_(row_offset),
      uninitialized_(static_cast<size_t>(rows), 1),
      num_uninitialized_(rows) {}

void UninitializedRows::InitializeRows(absl::Span<const int64_t> local_ids, TensorView block,
                                       CowSnapshot* snapshot) {
  if (num_uninitialized_ == 0) return;
  const auto rows = static_cast<int64_t>(uninitialized_.size());
  auto pending = [&](int64_t id) {
    return id >= 0 && id < rows && uninitialized_[static_cast<size_t>(id)] != 0;
  };
  if (snapshot != nullptr) {
    std::vector<int64_t> filling;
    for (const int64_t id : local_ids) {
      if (pending(id)) filling.push_back(id);
    }
    snapshot->BeforeFillRows(filling);
  }
  for (const int64_t id : local_ids) {
    if (!pending(id)) continue;
    // Cannot fail: Create validated the initializer, and the row is inside the block.
    InitializeBlock(initializer_, full_shape_, row_offset_ + id, block.RowBlock(id, 1))
        .IgnoreError();
    uninitialized_[static_cast<size_t>(id)] = 0;
    --num_uninitialized_;
  }
  if (num_uninitialized_ == 0) uninitialized_ = {};
}

void UninitializedRows::InitializeAllRows(TensorView block, CowSnapshot* snapshot) {
  if (num_uninitialized_ == 0) return;
  const auto rows = static_cast<int64_t>(uninitialized_.size());
  // Runs of consecutive rows in one call each.
  for (int64_t begin = 0; begin < rows;) {
    if (uninitialized_[static_cast<size_t>(begin)] == 0) {
      ++begin;
      continue;
    }
    int64_t end = begin + 1;
    while (end < rows && uninitialized_[static_cast<size_t>(end)] != 0) ++end;
    if (snapshot != nullptr) snapshot->BeforeFillRange(begin, end);
    InitializeBlock(initializer_, full_shape_, row_offset_ + begin,
                    block.RowBlock(begin, end - begin))
        .IgnoreError();
    begin = end;
  }
  Forget();
}

void UninitializedRows::Forget() {
  uninitialized_ = {};
  num_uninitialized_ = 0;
}

void UninitializedRows::ForgetRange(int64_t begin, int64_t end) {
  if (num_uninitialized_ == 0) return;
  for (int64_t row = begin; row < end; ++row) {
    uint8_t& pending = uninitialized_[static_cast<size_t>(row)];
    num_uninitialized_ -= pending;
    pending = 0;
  }
  if (num_uninitialized_ == 0) uninitialized_ = {};
}

UnfilledRows UninitializedRows::Unfilled() const {
  UnfilledRows unfilled;
  if (num_uninitialized_ > 0) {
    unfilled.rows = uninitialized_;
    unfilled.fill = [initializer = initializer_, full_shape = full_shape_,
                     row_offset = row_offset_](int64_t begin, TensorView out) {
      // Cannot fail: Create validated the initializer, and the rows are inside the block.
      InitializeBlock(initializer, full_shape, row_offset + begin, out).IgnoreError();
    };
  }
  return unfilled;
}

}  // namespace tessera
