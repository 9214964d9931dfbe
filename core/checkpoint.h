// Checkpoints as plain data: what one shard saves (a TensorSlice), the manifest that names every
// variable and the slice files holding it, and the restore plan that lets any layout of shards
// read a checkpoint saved by any other (N shards -> M shards, sharded <-> unsharded, slots
// included). schema/checkpoint_io.h reads and writes them; coordinator/checkpoint.h orchestrates.
//
// On disk (docs/design.md §3): a checkpoint is a directory of slice files, one per saved shard, each
// written by its own shard in parallel, and a manifest written last (temporary file, fsync,
// rename), so a checkpoint without its manifest is invisible.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/optimizer.h"
#include "core/tensor.h"

namespace tessera {

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
};

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
};

// A view of `slice` (valid while it lives unchanged).
TensorSliceView ViewOf(const TensorSlice& slice);

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
};

struct CheckpointManifest {
  int64_t global_step = 0;  // training steps when it was saved
  std::vector<CheckpointVariable> variables;
};

// InvalidArgument naming the variable unless: names are unique and non-empty; every variable's
// slices tile its rows exactly (a scalar: one slice of 1 row at 0) and name plain files; steps are
// >= 0.
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
// full shape, dtype, rows, and slot names equal to variable.slot_names), and the reads must tile
// the block in order (as PlanSliceReads returns them). The result's slots are variable.slot_names
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
