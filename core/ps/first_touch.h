// UninitializedRows: the rows of a shard's block still waiting for their initializer, and filling
// them when an operation first touches them. A ShardState keeps one and asks it to fill the rows
// an operation is about to read or write.
//
// Note [Rows initialized on first touch]
// A shard's rows get their initializer's values when something first looks at them, not when the
// shard is created: a gather or scatter or sparse gradient initializes the rows it names, and
// anything that sees the whole block (read, assign, a dense gradient, a save, value())
// initializes every row left. Values depend only on (seed, global element position) (core/
// initializer.h), so no one can tell the difference — except in time and memory: creating the
// RFC-scale model's 2.64 GB of embeddings took seconds of Philox and page faults before the first
// step, most of it for rows a run never trains (200,000 examples touch a fraction of 600,000
// users), and those rows now cost neither. A restore or an assignment of the whole block leaves
// nothing to initialize. Blocks whose initializer is zeros are zeros already (Note [Tensor
// storage]). A background save's snapshot initializes nothing either: its writer computes the
// rows still waiting (Note [Copy-on-write snapshots], core/ps/cow_snapshot.h).
//
// Thread-safety: none; owned by its ShardState (one actor or thread at a time).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"
#include "core/ps/cow_snapshot.h"
#include "tessera/model.h"
#include "tessera/tensor.h"

namespace tessera {

class UninitializedRows {
 public:
  // No row waiting.
  UninitializedRows() = default;
  // Every one of the block's `rows` rows waiting for `initializer`, the block being rows
  // [row_offset, row_offset + rows) of a variable of `full_shape`. Precondition: the initializer
  // is valid (ValidateInitializer), so filling cannot fail.
  UninitializedRows(InitializerSpec initializer, Shape full_shape, int64_t row_offset,
                    int64_t rows);

  // True when no row waits any more.
  bool empty() const { return num_uninitialized_ == 0; }

  // Gives the rows `local_ids` (block-local) of `block` that still wait their initializer's
  // values. Ids outside the block are skipped (the operation's own checks report them).
  // `snapshot`, when not null, is told first which rows change (CowSnapshot::BeforeFillRows).
  void InitializeRows(absl::Span<const int64_t> local_ids, TensorView block,
                      CowSnapshot* snapshot);
  // The same for every row still waiting; none waits after.
  void InitializeAllRows(TensorView block, CowSnapshot* snapshot);
  // Nothing is left to initialize (the block was restored or assigned whole).
  void Forget();
  // Rows [begin, end) are not the initializer's to fill (restored). Precondition: inside the block.
  void ForgetRange(int64_t begin, int64_t end);
  // The rows still waiting and how to compute them, for a snapshot's writer (Note
  // [Copy-on-write snapshots]); no rows when none waits.
  UnfilledRows Unfilled() const;

 private:
  InitializerSpec initializer_;
  Shape full_shape_;
  int64_t row_offset_ = 0;
  // Per block row, 1 while the row still waits for its initializer; empty once none does.
  std::vector<uint8_t> uninitialized_;
  int64_t num_uninitialized_ = 0;
};

}  // namespace tessera
