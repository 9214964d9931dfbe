// CheckpointManager: a directory of numbered checkpoints (root/ckpt-<step>) written by one run, of
// which it keeps the newest few — TF's tf.train.CheckpointManager.
//
// A checkpoint is complete once its manifest (schema/checkpoint/checkpoint_io.h's kManifestFile)
// exists. A save writes into a fresh temporary directory (root/ckpt-<step>.tmp-<random>) and
// renames it to root/ckpt-<step> once its manifest has landed, so a root/ckpt-<step> directory is
// complete from the moment it appears and is never written into again. A save that fails removes
// its temporary directory; what a crashed process left (temporary directories, and ckpt-<step>
// directories without a manifest, which older builds wrote in place) is removed by the next save. A
// checkpoint is removed by renaming it to a temporary name first, so it vanishes whole, never half
// deleted.
//
// Only a directory named ckpt-<step>, the step in plain decimal (no sign, no leading zero, at
// most int64's maximum), is a checkpoint. Other ckpt-... names, and a ckpt-<step> that is not a
// directory, are ignored with a warning (once per name); nothing else in the root is touched.
// Removal never follows a symbolic link out of the root.
//
// One root, one run (Note [One run per checkpoint folder] in checkpoint_manager.cc): the manager
// belongs to a run (run_id(): random, or the run it resumes), a fresh run refuses a root that
// holds checkpoints unless told to overwrite them, and Save refuses a root where another run's
// checkpoint appeared.
//
// The manager reads, writes and removes directories through an Env (tessera/env.h), and so does
// Save(strategy, ...)'s SaveCheckpoint, except for the files the shards write themselves where
// they live (Env::Default() on their PS nodes), so with a strategy `env` must see the PS nodes'
// filesystem; the Save that takes a writer works on any Env (tests use core/base/mem_env.h's).
//
// Thread-safety: not thread-safe; call from one thread (the driver's). Several managers may read
// one root, but only one may save into it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/checkpoint/checkpoint.h"
#include "tessera/env.h"

namespace tessera {

class ParameterServerStrategy;

// Keeps the last `max_to_keep` checkpoints under `root` as root/ckpt-<step>.
//
// Example:
//   CheckpointManager checkpoints("/data/run1", 3);
//   TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> latest, checkpoints.ResumeRun());
//   if (latest.has_value()) ... RestoreCheckpoint(strategy, *latest) ...
//   TESSERA_ASSIGN_OR_RETURN(std::string dir, checkpoints.Save(strategy, step));
class CheckpointManager {
 public:
  // `max_to_keep` below 1 keeps 1. `env` must outlive the manager. The manager starts as a run
  // of its own (a random run id) until BeginFreshRun or ResumeRun.
  CheckpointManager(std::string root, int32_t max_to_keep, Env* env = Env::Default());

  // Starts a fresh run in root (created if missing) with a new run id. FailedPrecondition naming
  // root and its checkpoints when it holds complete checkpoints, unless `overwrite`: they are
  // deleted first then (every ckpt-<step> and temporary directory, nothing else; oldest first, so
  // a failure leaves the newest whole), or the error names the one that could not be. Also fails,
  // with the Env's error, when root is not writable (a directory cannot be created and removed in
  // it), so a run that could never save a checkpoint stops before it trains.
  absl::Status BeginFreshRun(bool overwrite);

  // Continues the run whose checkpoints root holds: adopts their run id (a new one when they have
  // none: written before run ids), and returns the newest complete checkpoint, or nullopt when
  // there is none (the run then starts fresh, with a new run id). FailedPrecondition naming root
  // when its checkpoints belong to several runs; the newest checkpoint's manifest errors (DataLoss
  // when it is the checkpoint of another step than its directory's name says); root not writable
  // as BeginFreshRun.
  absl::StatusOr<std::optional<std::string>> ResumeRun();

  // The run every checkpoint this manager saves belongs to.
  const RunId& run_id() const { return run_id_; }

  // Saves every variable of `strategy` as root/ckpt-<global_step> (SaveCheckpoint), then applies
  // retention. Returns the checkpoint's directory. See the other Save for the rules. With
  // `on_cut`, the shards write while training goes on and `on_cut` runs once they have copied
  // their state (SaveCheckpoint's `on_cut`; also run when the save fails before).
  absl::StatusOr<std::string> Save(const ParameterServerStrategy& strategy, int64_t global_step,
                                   std::function<void()> on_cut = nullptr);

  // The same with the checkpoint written by `write` into the (temporary) directory it is given,
  // created first through the Env; `write` must write the manifest last, with this run's id.
  // Then the directory is renamed to root/ckpt-<global_step>, and retention removes the oldest
  // complete checkpoints beyond max_to_keep (never the one just saved); retention is best
  // effort: what cannot be removed now is tried again by the next Save.
  //   - A complete root/ckpt-<global_step> of this run (or of no run) is left as it is and
  //     returned: this run saved or restored that step already. FailedPrecondition when it holds
  //     another step's checkpoint (a renamed directory).
  //   - FailedPrecondition naming root when it holds a checkpoint of another run, or naming the
  //     path when root/ckpt-<global_step> is something other than a directory; InvalidArgument
  //     for a negative step.
  //   - On an error of `write` or the Env the temporary directory is removed and the error
  //     returned, naming the checkpoint; the checkpoints already there are unchanged. (Only when
  //     syncing root after the rename fails is the new checkpoint in place despite the error.)
  absl::StatusOr<std::string> Save(int64_t global_step,
                                   absl::FunctionRef<absl::Status(const std::string& dir)> write);

  // The newest complete checkpoint's directory (one with a manifest), or nullopt.
  std::optional<std::string> Latest() const;
  // Complete checkpoints, oldest first (by step). Empty when root does not exist.
  std::vector<std::string> Checkpoints() const;

  const std::string& root() const { return root_; }
  // What the manager reads and writes through.
  Env* env() const { return env_; }

 private:
  struct Entry {
    int64_t step;
    std::string path;
    bool complete;  // it has its manifest
  };
  struct Listing {
    std::vector<Entry> checkpoints;        // ckpt-<step> directories, by step
    std::vector<std::string> temporaries;  // paths of temporary directories
    std::set<int64_t> blocked;             // steps whose ckpt-<step> is not a directory
  };
  // What root holds (nothing when it does not exist), warning once per ignored name.
  Listing List() const;
  // A fresh temporary path for `label` (a step): root/ckpt-<label>.tmp-<16 hex digits>.
  std::string TemporaryPath(const std::string& label) const;
  // Renames `entry` to a temporary path, then removes that (a failure to remove is only logged:
  // the next Save retries). The rename's error otherwise.
  absl::Status Discard(const Entry& entry) const;
  // The Env's error unless a directory can be created and removed in root (created if missing).
  absl::Status CheckWritable() const;
  // FailedPrecondition when a complete checkpoint in `listing` belongs to another run.
  absl::Status CheckOneRun(const Listing& listing) const;
  // Removes the oldest complete checkpoints beyond max_to_keep, never `saved`.
  void ApplyRetention(const std::string& saved) const;

  std::string root_;
  int32_t max_to_keep_;
  Env* env_;
  RunId run_id_;
  mutable std::set<std::string> warned_;  // names already warned about
};

}  // namespace tessera
