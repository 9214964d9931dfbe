// Checkpoints of the variables of a ParameterServerStrategy (docs/design.md §3.8); their export
// for serving is coordinator/serving/export.h.
//
// Save: every shard writes its block, slots and step straight from its memory into its own slice
// file (SaveOp, the one save path: Note [One save path], core/checkpoint/save.h), all in
// parallel; the manifest is written last (schema/checkpoint/checkpoint_io.h:
// temporary file, fsync, rename), so a checkpoint is complete or invisible. Restore: into the
// strategy's current layout, whatever layout saved it (N shards -> M shards, sharded <->
// unsharded): each shard reads only the slice files its rows overlap; names, shapes and dtypes are
// checked with messages that say what differs. An export (coordinator/serving/export.h) can also
// be restored as a checkpoint.
//
// ON_READ variables (per-worker metrics and counters) are saved as their reduced value and
// restored as each worker's share of it, as TF does (Note [ON_READ variables in checkpoints] in
// save_restore.cc).
//
// Thread-safety: call from the driver's thread; shards serialize their own work.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/checkpoint/checkpoint_manager.h"  // CheckpointManager, once declared here
#include "coordinator/ps/strategy.h"
#include "core/checkpoint/checkpoint.h"
#include "tessera/env.h"

namespace tessera {

// Saves every variable of `strategy` (ON_READ ones reduced) into `dir` (created if missing) as run
// `run`'s checkpoint of `global_step`: the manifest and every slice file carry that identity (Note
// [Checkpoint identity], core/checkpoint/checkpoint.h). The checkpoint is visible once its manifest
// lands. A complete checkpoint is never overwritten in place: FailedPrecondition when `dir` already
// holds a manifest. Slice files an incomplete save left are replaced. CheckpointManager saves into
// a fresh temporary directory and renames it into place. With `on_cut`, the shards write while
// training goes on (Note [Checkpoints without pausing] in save_restore.cc): `on_cut` runs (on
// another thread, once, whatever happens) as soon as every shard has copied its state, and the call
// returns once the files and the manifest are written. The caller must keep every update away from
// the variables until `on_cut` (it joined its coordinator before, and schedules nothing until
// then). The directory, the ON_READ values' files and the manifest go through `env`; each shard
// writes its own file where it lives, on its PS node's filesystem (the same one in process).
absl::Status SaveCheckpoint(const ParameterServerStrategy& strategy, const std::string& dir,
                            int64_t global_step, const RunId& run,
                            std::function<void()> on_cut = nullptr, Env* env = Env::Default());
// The same as a run of its own (a fresh RunId).
absl::Status SaveCheckpoint(const ParameterServerStrategy& strategy, const std::string& dir,
                            int64_t global_step);

// The file a checkpoint saves shard `shard` of `num_shards` of its `variable_index`-th variable
// in: "hidden/kernel" shard 1 of 4 -> "v3.hidden_kernel.part-1-of-4.slice" (a plain, unique name;
// the mirrored strategy saves each variable as shard 0 of 1).
std::string CheckpointSliceFileName(size_t variable_index, const std::string& name, int64_t shard,
                                    int64_t num_shards);

// An ON_READ variable's value reduced over its copies, as a checkpoint holds it (Note [ON_READ
// variables in checkpoints] in save_restore.cc): no one holder has it, so the driver writes it,
// whatever the strategy.
struct ReducedValue {
  std::string name;
  DType dtype = DType::kFloat32;
  Tensor value;  // the variable's whole shape
};
// Writes each value as its variable's one slice file (file names numbered from `first_index`),
// through `env` by the one save path (WriteSlice: Note [One save path], core/checkpoint/save.h),
// and adds its manifest entry. The Env's error, naming the variable.
absl::Status SaveReducedValues(const std::vector<ReducedValue>& values, const std::string& dir,
                               const CheckpointId& checkpoint, size_t first_index,
                               CheckpointManifest& manifest, Env* env);

// Restores every variable of `strategy` (ON_READ ones: each copy its share) from the checkpoint
// in `dir` and returns its global step. NotFound without a manifest, or when the checkpoint lacks
// an ON_WRITE variable (a missing ON_READ one is a warning: its copies keep their values);
// InvalidArgument naming the variable when its shape or dtype differ, or when it was trained
// with another optimizer (Note [Resuming an optimizer] in save_restore.cc: a changed
// hyperparameter is logged, not refused); DataLoss naming the file for a slice file of another
// checkpoint. A checkpoint without a run id (written before run ids) restores with a warning. A
// directory holding an exported model (and no manifest) restores its values with fresh
// optimizer slots, and returns the export's step.
absl::StatusOr<int64_t> RestoreCheckpoint(const ParameterServerStrategy& strategy,
                                          const std::string& dir);

// Networked PS recovery: restores only the shards placed on PS `ps_task` from the checkpoint in
// `dir` (the others keep their newer values). Returns the checkpoint's global step. Errors as
// RestoreCheckpoint (an exported model is refused: it has no optimizer slots), and
// FailedPrecondition when the checkpoint belongs to another run than `run` (one without a run
// id, or an empty `run`, is not checked).
absl::StatusOr<int64_t> RestoreShardsOf(const ParameterServerStrategy& strategy,
                                        const std::string& dir, int32_t ps_task,
                                        const RunId& run = {});

}  // namespace tessera
