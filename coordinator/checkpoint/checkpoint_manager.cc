#include "coordinator/checkpoint/checkpoint_manager.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "coordinator/checkpoint/save_restore.h"
#include "core/base/logging.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "tessera/status.h"

namespace tessera {

// Note [One run per checkpoint folder]
// A folder holding the checkpoints of two runs lies to both: retention counts the other run's
// checkpoints (a new run at step 400 next to an old one's ckpt-1000..3000 deleted its own newest
// checkpoint at once), Latest() is whichever run's step is higher, and a resume continues the
// wrong run. So a manager belongs to one run (its RunId, written into every file it saves) and
// keeps its root to that run:
//   - a fresh run (BeginFreshRun) refuses a root holding complete checkpoints, unless told to
//     overwrite them: it then deletes them (checkpoint directories only) before it trains;
//   - a resumed run (ResumeRun) adopts the run id of the checkpoints it continues, and refuses a
//     root whose checkpoints belong to several runs;
//   - Save refuses while the root holds another run's checkpoint (two runs writing into one
//     root), and leaves a complete ckpt-<step> of its own run alone: never overwritten in place.
// Checkpoints without a run id (written before run ids) belong to no run: they are resumed,
// counted and kept like the run's own, never refused.

namespace {

constexpr char kCheckpointPrefix[] = "ckpt-";
constexpr char kTemporaryMarker[] = ".tmp-";

// The step of a directory named "ckpt-<step>", the step in plain decimal (digits only, no leading
// zero, at most int64's maximum), or nullopt: "ckpt-007" and "ckpt-7" must not be two checkpoints
// of one step, nor "ckpt-99999999999999999999" the newest of all.
std::optional<int64_t> StepOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kCheckpointPrefix) || name.empty()) return std::nullopt;
  if (!std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return std::nullopt;
  }
  if (name.size() > 1 && name.front() == '0') return std::nullopt;
  int64_t step = 0;
  if (!absl::SimpleAtoi(name, &step)) return std::nullopt;  // too large
  return step;
}

// A temporary directory of a save (or of a removal) in progress, or left by a crashed one.
bool IsTemporary(absl::string_view name) {
  return absl::StartsWith(name, kCheckpointPrefix) && absl::StrContains(name, kTemporaryMarker);
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, int32_t max_to_keep, Env* env)
    : root_(std::move(root)),
      max_to_keep_(max_to_keep < 1 ? 1 : max_to_keep),
      env_(env),
      run_id_(RunId::Random()) {
  // "/data/run/" and "/data/run" name the same checkpoints, as root/ckpt-<step> either way.
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

CheckpointManager::Listing CheckpointManager::List() const {
  Listing listing;
  absl::StatusOr<std::vector<std::string>> names = env_->ListDirectory(root_);
  if (!names.ok()) return listing;  // no root yet: no checkpoints
  auto warn = [this](const std::string& path, absl::string_view why) {
    if (warned_.insert(path).second) Log().warn("ignoring {}: {}", path, why);
  };
  for (const std::string& name : *names) {
    if (!absl::StartsWith(name, kCheckpointPrefix)) continue;  // not ours
    std::string path = absl::StrCat(root_, "/", name);
    if (IsTemporary(name)) {
      listing.temporaries.push_back(std::move(path));
      continue;
    }
    const std::optional<int64_t> step = StepOf(name);
    if (!step.has_value()) {
      warn(path, "not a checkpoint name (ckpt-<step>, the step in plain decimal)");
      continue;
    }
    if (!env_->ListDirectory(path).ok()) {
      warn(path, "not a checkpoint directory");
      listing.blocked.insert(*step);
      continue;
    }
    // The manifest must be a regular file: a directory or a FIFO of that name is no checkpoint.
    const bool complete = env_->FileSize(absl::StrCat(path, "/", kManifestFile)).ok();
    listing.checkpoints.push_back({*step, std::move(path), complete});
  }
  std::sort(listing.checkpoints.begin(), listing.checkpoints.end(),
            [](const Entry& a, const Entry& b) { return a.step < b.step; });
  return listing;
}

std::string CheckpointManager::TemporaryPath(const std::string& label) const {
  return absl::StrCat(root_, "/", kCheckpointPrefix, label, kTemporaryMarker,
                      absl::StrFormat("%016x", RunId::Random().low));
}

absl::Status CheckpointManager::Discard(const Entry& entry) const {
  const std::string temporary = TemporaryPath(absl::StrCat(entry.step));
  TESSERA_RETURN_IF_ERROR(env_->RenameFile(entry.path, temporary));
  if (absl::Status removed = env_->RemoveTree(temporary); !removed.ok()) {
    Log().warn("{} (was {}) could not be removed, the next save tries again: {}", temporary,
               entry.path, removed);
  }
  return absl::OkStatus();
}

absl::Status CheckpointManager::CheckWritable() const {
  TESSERA_RETURN_IF_ERROR(Annotate(env_->CreateDirectories(root_),
                                   absl::StrCat("checkpoints cannot be written into ", root_)));
  const std::string probe = TemporaryPath("probe");
  TESSERA_RETURN_IF_ERROR(Annotate(env_->CreateDirectories(probe),
                                   absl::StrCat("checkpoints cannot be written into ", root_)));
  return Annotate(env_->RemoveTree(probe),
                  absl::StrCat("checkpoints cannot be removed from ", root_));
}

absl::Status CheckpointManager::CheckOneRun(const Listing& listing) const {
  for (const Entry& entry : listing.checkpoints) {
    if (!entry.complete) continue;
    // A manifest that cannot be read tells no run: a restore of it reports the error.
    absl::StatusOr<CheckpointManifest> manifest = ReadManifest(entry.path, env_);
    if (!manifest.ok() || manifest->run_id.empty() || manifest->run_id == run_id_) continue;
    return absl::FailedPreconditionError(absl::StrCat(
        root_, " holds ", entry.path, " of run ", manifest->run_id.ToString(), ", but this run is ",
        run_id_.ToString(), ": two runs are saving checkpoints into one directory"));
  }
  return absl::OkStatus();
}

absl::Status CheckpointManager::BeginFreshRun(bool overwrite) {
  TESSERA_RETURN_IF_ERROR(CheckWritable());
  const Listing listing = List();
  std::vector<std::string> complete;
  for (const Entry& entry : listing.checkpoints) {
    if (entry.complete) complete.push_back(entry.path);
  }
  if (!complete.empty() && !overwrite) {
    return absl::FailedPreconditionError(absl::StrCat(
        root_, " already holds ", complete.size(), " checkpoint(s) (", complete.front(),
        complete.size() > 1 ? absl::StrCat(" .. ", complete.back()) : "",
        "), which a new run there would mix with"));
  }
  if (overwrite) {
    for (const Entry& entry : listing.checkpoints) {
      TESSERA_RETURN_IF_ERROR(Annotate(Discard(entry), absl::StrCat("deleting the old checkpoint ",
                                                                    entry.path, " (overwrite)")));
    }
    for (const std::string& temporary : listing.temporaries) {
      env_->RemoveTree(temporary).IgnoreError();  // a leftover: the next save retries
    }
    if (!complete.empty()) {
      Log().warn("deleted {} old checkpoint(s) from {} before this new run", complete.size(),
                 root_);
    }
  }
  run_id_ = RunId::Random();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<std::string>> CheckpointManager::ResumeRun() {
  TESSERA_RETURN_IF_ERROR(CheckWritable());
  const Listing listing = List();
  std::vector<const Entry*> complete;
  for (const Entry& entry : listing.checkpoints) {
    if (entry.complete) complete.push_back(&entry);
  }
  run_id_ = RunId::Random();
  if (complete.empty()) return std::nullopt;
  std::map<std::string, std::vector<std::string>> runs;  // run id -> its checkpoints
  RunId run;
  for (const Entry* entry : complete) {
    absl::StatusOr<CheckpointManifest> manifest = ReadManifest(entry->path, env_);
    if (manifest.ok() && manifest->global_step != entry->step) {
      // A renamed (or copied) directory: its name would make it the checkpoint to resume.
      manifest = absl::DataLossError(
          absl::StrCat(entry->path, " holds the checkpoint of step ", manifest->global_step));
    }
    if (!manifest.ok()) {
      if (entry == complete.back()) return manifest.status();  // the one to resume
      Log().warn("{}: its run cannot be told: {}", entry->path, manifest.status());
      continue;
    }
    if (manifest->run_id.empty()) continue;
    run = manifest->run_id;
    runs[run.ToString()].push_back(entry->path);
  }
  if (runs.size() > 1) {
    return absl::FailedPreconditionError(absl::StrCat(
        root_, " holds the checkpoints of ", runs.size(), " runs (",
        absl::StrJoin(runs, "; ",
                      [](std::string* out, const auto& run_paths) {
                        absl::StrAppend(out, "run ", run_paths.first, ": ",
                                        absl::StrJoin(run_paths.second, ", "));
                      }),
        "), so which one to continue cannot be told: move the other runs' checkpoints away"));
  }
  if (runs.empty()) {
    Log().warn("the checkpoints in {} have no run id (written before run ids); this run "
               "continues them as run {}", root_, run_id_.ToString());
  } else {
    run_id_ = run;
  }
  return complete.back()->path;
}

absl::StatusOr<std::string> CheckpointManager::Save(const ParameterServerStrategy& strategy,
                                                    int64_t global_step,
                                                    std::function<void()> on_cut) {
  absl::StatusOr<std::string> saved =
      Save(global_step, [this, &strategy, global_step, &on_cut](const std::string& dir) {
        return SaveCheckpoint(strategy, dir, global_step, run_id_, std::exchange(on_cut, nullptr),
                              env_);
      });
  if (on_cut) on_cut();  // the save ended before it reached the shards
  return saved;
}

absl::StatusOr<std::string> CheckpointManager::Save(
    int64_t global_step, absl::FunctionRef<absl::Status(const std::string& dir)> write) {
  if (global_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a checkpoint's step must be >= 0, not ", global_step));
  }
  const std::string dir = absl::StrCat(root_, "/", kCheckpointPrefix, global_step);
  TESSERA_RETURN_IF_ERROR(env_->CreateDirectories(root_));
  const Listing listing = List();
  TESSERA_RETURN_IF_ERROR(CheckOneRun(listing));
  if (listing.blocked.count(global_step) != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " is in the way of the checkpoint of step ", global_step, ": not a directory"));
  }
  // Remains of crashed saves: temporary directories, and directories without a manifest.
  for (const std::string& temporary : listing.temporaries) {
    env_->RemoveTree(temporary).IgnoreError();  // best effort: the next save retries
  }
  for (const Entry& entry : listing.checkpoints) {
    if (entry.step == global_step && entry.complete) {
      // This run's (CheckOneRun), unless it is another step's checkpoint under this name.
      absl::StatusOr<CheckpointManifest> there = ReadManifest(dir, env_);
      TESSERA_RETURN_IF_ERROR(Annotate(there.status(), absl::StrCat("the existing ", dir)));
      if (there->global_step != global_step) {
        return absl::FailedPreconditionError(
            absl::StrCat(dir, " holds the checkpoint of step ", there->global_step,
                         ", not of step ", global_step, ": left as it is; remove it"));
      }
      Log().info("{} already holds this run's checkpoint of step {}: left as it is", dir,
                 global_step);
      return dir;
    }
    if (!entry.complete) {
      absl::Status discarded = Discard(entry);
      // The directory in the way of this save must go; any other is retried by the next save.
      if (entry.step == global_step) {
        TESSERA_RETURN_IF_ERROR(Annotate(discarded, absl::StrCat("removing the incomplete ", dir)));
      }
    }
  }
  const std::string temporary = TemporaryPath(absl::StrCat(global_step));
  absl::Status status = [&]() -> absl::Status {
    TESSERA_RETURN_IF_ERROR(env_->CreateDirectories(temporary));
    TESSERA_RETURN_IF_ERROR(write(temporary));
    TESSERA_RETURN_IF_ERROR(env_->RenameFile(temporary, dir));
    return env_->SyncDirectory(root_);  // the rename must survive a crash too
  }();
  if (!status.ok()) {
    env_->RemoveTree(temporary).IgnoreError();  // gone already when the rename happened
    return Annotate(status, absl::StrCat("saving the checkpoint of step ", global_step, " into ",
                                         root_));
  }
  ApplyRetention(dir);
  return dir;
}

void CheckpointManager::ApplyRetention(const std::string& saved) const {
  std::vector<const Entry*> complete;
  const Listing listing = List();
  for (const Entry& entry : listing.checkpoints) {
    if (entry.complete) complete.push_back(&entry);
  }
  const size_t keep = static_cast<size_t>(max_to_keep_);
  for (size_t i = 0; i + keep < complete.size(); ++i) {
    if (complete[i]->path == saved) continue;
    // Best effort (see the header): a failure leaves the checkpoint for the next Save to retry.
    if (absl::Status discarded = Discard(*complete[i]); !discarded.ok()) {
      Log().warn("cannot remove the old checkpoint {} (kept for now): {}", complete[i]->path,
                 discarded);
    }
  }
}

std::vector<std::string> CheckpointManager::Checkpoints() const {
  std::vector<std::string> out;
  for (Entry& entry : List().checkpoints) {
    if (entry.complete) out.push_back(std::move(entry.path));
  }
  return out;
}

std::optional<std::string> CheckpointManager::Latest() const {
  std::vector<std::string> all = Checkpoints();
  if (all.empty()) return std::nullopt;
  return all.back();
}

}  // namespace tessera
