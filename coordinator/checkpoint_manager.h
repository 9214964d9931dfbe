// CheckpointManager: a directory of numbered checkpoints (root/ckpt-<step>), of which it keeps
// the newest few — TF's tf.train.CheckpointManager.
//
// A checkpoint is complete once its manifest (schema/checkpoint_io.h's kManifestFile) exists:
// the manifest is written last, atomically, so a save that dies half way leaves a directory the
// manager never reports, and removes later.
//
// The manager reads and removes directories through an Env (core/env.h). Save(strategy, ...)
// writes the checkpoint with SaveCheckpoint, whose shards write their files through
// Env::Default(), so with it `env` must see the real filesystem; the Save that takes a writer
// works on any Env (tests use core/mem_env.h's).
//
// Thread-safety: not thread-safe; call from one thread (the driver's). Several managers may read
// one root, but only one should save into it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/env.h"

namespace tessera {

class ParameterServerStrategy;

// Keeps the last `max_to_keep` checkpoints under `root` as root/ckpt-<step>.
//
// Example:
//   CheckpointManager checkpoints("/data/run1", 3);
//   ASSIGN_OR_RETURN(std::string dir, checkpoints.Save(strategy, step));
//   if (std::optional<std::string> latest = checkpoints.Latest()) ... RestoreCheckpoint(...)
class CheckpointManager {
 public:
  // `max_to_keep` below 1 keeps 1. `env` must outlive the manager.
  CheckpointManager(std::string root, int32_t max_to_keep, Env* env = Env::Default());

  // Saves every variable of `strategy` into root/ckpt-<global_step> (SaveCheckpoint), then
  // applies retention (below). Returns the checkpoint's directory, or SaveCheckpoint's error
  // (the incomplete directory stays until a later Save removes it).
  absl::StatusOr<std::string> Save(const ParameterServerStrategy& strategy, int64_t global_step);

  // The same with the checkpoint written by `write` into the directory it is given (created
  // first through the Env); `write` must write the manifest last. Then retention: the oldest
  // complete checkpoints beyond max_to_keep are removed, and so are incomplete ones (no
  // manifest) older than the newest complete one. Retention is best effort: what cannot be
  // removed now is tried again by the next Save.
  absl::StatusOr<std::string> Save(int64_t global_step,
                                   absl::FunctionRef<absl::Status(const std::string& dir)> write);

  // The newest complete checkpoint's directory (one with a manifest), or nullopt.
  std::optional<std::string> Latest() const;
  // Complete checkpoints, oldest first (by step). Empty when root does not exist.
  std::vector<std::string> Checkpoints() const;

  const std::string& root() const { return root_; }

 private:
  struct Entry {
    int64_t step;
    std::string path;
    bool complete;
  };
  // Every root/ckpt-<step> entry, by step.
  std::vector<Entry> Scan() const;

  std::string root_;
  int32_t max_to_keep_;
  Env* env_;
};

}  // namespace tessera
