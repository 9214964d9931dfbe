// The save path: how whatever holds a variable's state writes its part of a checkpoint, and how
// the driver turns what was written into the manifest.
//
// Note [One save path]
// Every holder of state answers the same request, a SaveOp, with what it wrote, a SavedSlice:
// each shard of a parameter-server variable writes its block (ApplyShardOp, core/ps/shard_op.h;
// in the background from a copy-on-write snapshot when asked, Note [Checkpoints without
// pausing]), and a mirrored replica writes one parameter or ON_WRITE variable whole
// (MirroredReplica::Save, core/mirrored/mirrored_replica.h; every replica holds the same bits, so
// the driver spreads the variables over the replicas). Both write through WriteSlice and the
// holder's SliceStore, on the holder's own machine: the checkpoint directory is one every holder
// reaches (a shared filesystem across machines). The driver then makes each variable's manifest
// entry from its SavedSlices with ManifestEntry, whatever the strategy, and writes the ON_READ
// variables' reduced values itself (no one holder has them: Note [ON_READ variables in
// checkpoints], coordinator/checkpoint/save_restore.h) through the same WriteSlice, then the
// manifest, last. An export is another artifact (one file for serving, written from the
// variables' rows: core/serving/exported_model.h), not a checkpoint.
//
// Thread-safety: plain values and pure functions; a SliceStore is called from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/checkpoint/checkpoint.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"

namespace tessera {

// What a holder wrote when saving: enough for the manifest's entry.
struct SavedSlice {
  SliceFileRef ref;  // file name (relative to the checkpoint) and rows
  std::vector<std::string> slot_names;
  int64_t step = 0;                        // the optimizer's step
  std::optional<OptimizerSpec> optimizer;  // none: the holder has no optimizer for the variable
};

// Write your part of checkpoint `checkpoint` as `dir`/`file`.
struct SaveOp {
  using Result = SavedSlice;
  static constexpr const char* kName = "save";
  std::string dir;          // the checkpoint directory
  std::string file;         // the slice file's name in it
  CheckpointId checkpoint;  // the checkpoint the file belongs to (written into it)
  // Written while the holder serves on: a shard actor marks its block, slots and step (a
  // copy-on-write snapshot, core/ps/cow_snapshot.h) and a writer of its own writes them as they
  // were, answering once written (Note [Checkpoints without pausing],
  // coordinator/checkpoint/save_restore.cc). ApplyShardOp itself, and a mirrored replica, write
  // in place.
  bool in_background = false;
};

// The file I/O behind saving and loading (schema/ writes slice files; core cannot include it).
class SliceStore {
 public:
  virtual ~SliceStore() = default;
  // Writes `slice` to `path` (a complete file or none).
  virtual absl::Status Write(const std::string& path, const TensorSliceView& slice) const = 0;
  // Rows [offset, offset + rows) of `variable` from the slice files under `dir` it overlaps.
  virtual absl::StatusOr<TensorSlice> ReadBlock(const std::string& dir,
                                                const CheckpointVariable& variable, int64_t offset,
                                                int64_t rows) const = 0;
};

// Writes `slice` as `op.dir`/`op.file`, naming `op.checkpoint`, and says what was written; the
// holder's optimizer spec (none without one) goes into the result for the manifest. The store's
// error otherwise, "saving <what>: ..." (the file is then complete or absent).
absl::StatusOr<SavedSlice> WriteSlice(TensorSliceView slice, std::optional<OptimizerSpec> optimizer,
                                      const SaveOp& op, const SliceStore& store,
                                      absl::string_view what);

// A variable's manifest entry from what its holders wrote, in row order: their files, the largest
// step, the slot names and optimizer (any holder's: a variable's holders share one rule).
CheckpointVariable ManifestEntry(const std::string& name, const Shape& shape, DType dtype,
                                 const std::vector<SavedSlice>& saved);

}  // namespace tessera
