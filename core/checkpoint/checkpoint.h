// Checkpoints as plain data: what one shard saves (a TensorSlice), the manifest that names every
// variable and the slice files holding it, and the restore plan that lets any layout of shards read
// a checkpoint saved by any other (N shards -> M shards, sharded <-> unsharded, slots included).
// schema/checkpoint/checkpoint_io.h reads and writes them; coordinator/checkpoint/save_restore.h
// orchestrates.
//
// On disk (docs/design.md §3): a checkpoint is a directory of slice files, one per saved shard, each
// written by its own shard in parallel, and a manifest written last (temporary file, fsync,
// rename), so a checkpoint without its manifest is invisible. Every file names the checkpoint it
// belongs to (CheckpointId: the run and the global step), so a file of another run or another
// checkpoint is refused on restore (Note [Checkpoint identity]).
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"

namespace tessera {

// Note [Checkpoint identity]
// A checkpoint folder is only as good as the files in it: copied, restored from a backup, or
// written by two runs pointed at one folder, it can hold a slice file of another run or of another
// checkpoint of the same run (same variable, same rows, other values) that nothing in the file's
// format would notice. So every file names the checkpoint it belongs to: the run (RunId, 128
// random bits chosen when a run starts and kept across resumes) and the global step it was saved
// at. The manifest carries the run id and the step; each slice file carries both too, and a
// restore refuses (DataLoss, naming the file) a slice whose pair differs from its manifest's.
// Files written before run ids existed carry none: a manifest without one accepts only slices
// without one (a restore says so in a warning), and a slice without one is refused by a manifest
// that has one.

// A run's identity: 128 random bits. Empty (zero) means none: a file written before run ids.
struct RunId {
  uint64_t high = 0;
  uint64_t low = 0;

  // A fresh random id, never empty.
  static RunId Random();
  bool empty() const { return high == 0 && low == 0; }
  // 32 hex digits; "none" when empty.
  std::string ToString() const;
  friend bool operator==(const RunId& a, const RunId& b) {
    return a.high == b.high && a.low == b.low;
  }
  friend bool operator!=(const RunId& a, const RunId& b) { return !(a == b); }
};

// The checkpoint a file belongs to: the run that saved it and the global step it was saved at.
struct CheckpointId {
  RunId run;
  int64_t global_step = 0;

  // "run 0123...cdef step 400"; "no run id" when run is empty.
  std::string ToString() const;
  friend bool operator==(const CheckpointId& a, const CheckpointId& b) {
    return a.run == b.run && a.global_step == b.global_step;
  }
  friend bool operator!=(const CheckpointId& a, const CheckpointId& b) { return !(a == b); }
};

// One shard's saved state: rows [row_offset, row_offset + value.rows()) of `variable` (a scalar
// variable: offset 0 and a value of shape []), its optimizer slots and step.
struct TensorSlice {
  std::string variable;
  Shape full_shape;
  DType dtype = DType::kFloat32;
  int64_t row_offset = 0;
  Tensor value;
  std::vector<std::string> slot_names;  // the optimizer's, in order; empty without one
  std::vector<Tensor> slots;            // one per name, each of value's shape
  int64_t step = 0;                     // the optimizer's step count
  CheckpointId checkpoint;              // in a file: the checkpoint it belongs to
};

// A slice file checksums (and a copy-on-write snapshot hands out) a tensor's data in chunks of
// this many bytes, the last one shorter.
inline constexpr int64_t kSliceChunkBytes = int64_t{1} << 20;

// Calls `use` with the bytes of chunk `chunk` of tensor `tensor` (0 the value, then each slot)
// and returns what it returns (CowSnapshot::ReadChunk).
using SliceChunkReader = std::function<absl::Status(
    size_t tensor, int64_t chunk, absl::FunctionRef<absl::Status(absl::string_view)> use)>;

// A TensorSlice whose value and slots are borrowed: what a shard saves straight from its own
// memory (no snapshot copy). Valid while the tensors it views live unchanged.
struct TensorSliceView {
  std::string variable;
  Shape full_shape;
  DType dtype = DType::kFloat32;
  int64_t row_offset = 0;
  ConstTensorView value;
  std::vector<std::string> slot_names;
  std::vector<ConstTensorView> slots;
  int64_t step = 0;
  CheckpointId checkpoint;
  // When set, a writer takes the tensors' data from it, chunk by chunk, each once and in order,
  // and uses the views for their shapes only (Note [Copy-on-write snapshots],
  // core/ps/cow_snapshot.h).
  SliceChunkReader chunks;
};

// A view of `slice` (valid while it lives unchanged).
TensorSliceView ViewOf(const TensorSlice& slice);
// A copy of what `view` views (whose tensors, not `chunks`, hold the data).
TensorSlice CopyOf(const TensorSliceView& view);

// InvalidArgument unless the slice is consistent: a name, a value whose shape is full_shape with
// value.rows() rows lying inside full_shape, slots matching slot_names one to one and of the
// value's shape, step >= 0.
absl::Status ValidateTensorSlice(const TensorSlice& slice);
absl::Status ValidateTensorSlice(const TensorSliceView& slice);

// Where a variable's rows [row_offset, row_offset + rows) are saved: a file in the checkpoint
// directory (a plain file name, no directories).
struct SliceFileRef {
  std::string file;
  int64_t row_offset = 0;
  int64_t rows = 0;
};

struct CheckpointVariable {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  std::optional<OptimizerSpec> optimizer;  // none: saved without slots
  std::vector<std::string> slot_names;
  int64_t step = 0;                  // the optimizer step (the largest over its shards)
  std::vector<SliceFileRef> slices;  // in row order, tiling [0, rows) exactly
  // The checkpoint the entry belongs to, which every slice file read must name: ReadManifest
  // sets it from the manifest's run id and global step; WriteManifest does not write it.
  CheckpointId checkpoint;
};

struct CheckpointManifest {
  int64_t global_step = 0;  // training steps when it was saved
  std::vector<CheckpointVariable> variables;
  RunId run_id;  // the run that saved it (empty: written before run ids)
  // Read from a file: the Tessera version that wrote it (tessera/version.h); empty for a manifest
  // written before versions were recorded. WriteManifest records its own Version(), not this.
  std::string writer_version;
};

// InvalidArgument naming the variable unless: names are unique and non-empty; every variable's
// slices tile its rows exactly (a scalar: one slice of 1 row at 0) and name plain files, no file
// twice in the manifest; steps are >= 0; an optimizer is one MakeOptimizer builds (a known rule,
// known and finite hyperparameters in range) and the slot names are that rule's (none without an
// optimizer).
absl::Status ValidateManifest(const CheckpointManifest& manifest);
// The variable named `name`; NotFound listing the names the checkpoint has otherwise.
absl::StatusOr<const CheckpointVariable*> FindVariable(const CheckpointManifest& manifest,
                                                       const std::string& name);

// Part of a restore: rows [source_row, source_row + rows) of slice file `slice` (an index into
// CheckpointVariable::slices; rows relative to that slice) go to the target's rows
// [target_row, target_row + rows).
struct SliceRead {
  size_t slice = 0;
  int64_t source_row = 0;
  int64_t target_row = 0;
  int64_t rows = 0;
};

// What a target shard holding the variable's rows [offset, offset + rows) reads: only the slices
// it overlaps, in row order, covering its rows exactly. InvalidArgument when the range is
// outside the variable.
absl::StatusOr<std::vector<SliceRead>> PlanSliceReads(const CheckpointVariable& variable,
                                                      int64_t offset, int64_t rows);

// Assembles the target block [offset, offset + rows) from the slices `reads` names, given each
// read slice (`slices[i]` is the slice of reads[i].slice). The result has the block's value and,
// when every slice carries the same slot names, its slots; step is the largest slice step.
// InvalidArgument on any shape or name mismatch.
// Precisely: every read slice must be valid and be the file the manifest entry names (variable,
// full shape, dtype, rows, and slot names equal to variable.slot_names) and belong to the entry's
// checkpoint (Note [Checkpoint identity]; DataLoss naming the file otherwise), and the reads must
// tile the block in order (as PlanSliceReads returns them). The result's slots are variable.slot_names
// (none when it has none). A block that reads nothing (0 rows) gets variable.step.
absl::StatusOr<TensorSlice> AssembleSlice(const CheckpointVariable& variable, int64_t offset,
                                          int64_t rows, const std::vector<SliceRead>& reads,
                                          const std::vector<const TensorSlice*>& slices);

// The block [offset, offset + rows) of `variable` at `step`, zero-filled, with one slot per
// variable.slot_names: what AssembleSlice, or a reader copying straight from the files, fills.
TensorSlice EmptyBlock(const CheckpointVariable& variable, int64_t offset, int64_t rows,
                       int64_t step);

// AssembleSlice's checks alone, for a reader that copies the rows itself (straight from the
// files): only the shapes of the slices' tensors are looked at, so their views may have no data.
// Returns the block's step; InvalidArgument as AssembleSlice.
absl::StatusOr<int64_t> CheckSliceReads(const CheckpointVariable& variable, int64_t offset,
                                        int64_t rows, const std::vector<SliceRead>& reads,
                                        const std::vector<const TensorSliceView*>& slices);

}  // namespace tessera
