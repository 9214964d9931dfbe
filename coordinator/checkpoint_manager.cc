#include "coordinator/checkpoint_manager.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "coordinator/checkpoint.h"
#include "core/status.h"
#include "schema/checkpoint_io.h"

namespace tessera {
namespace {

constexpr char kCheckpointPrefix[] = "ckpt-";

// The step of a directory named "ckpt-<step>" (digits only), or nullopt.
std::optional<int64_t> StepOf(absl::string_view name) {
  if (!absl::ConsumePrefix(&name, kCheckpointPrefix) || name.empty()) return std::nullopt;
  if (!std::all_of(name.begin(), name.end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return std::nullopt;
  }
  int64_t step = 0;
  if (!absl::SimpleAtoi(name, &step)) return std::nullopt;  // too large
  return step;
}

}  // namespace

CheckpointManager::CheckpointManager(std::string root, int32_t max_to_keep, Env* env)
    : root_(std::move(root)), max_to_keep_(max_to_keep < 1 ? 1 : max_to_keep), env_(env) {
  // "/data/run/" and "/data/run" name the same checkpoints, as root/ckpt-<step> either way.
  while (root_.size() > 1 && root_.back() == '/') root_.pop_back();
}

absl::StatusOr<std::string> CheckpointManager::Save(const ParameterServerStrategy& strategy,
                                                    int64_t global_step) {
  return Save(global_step, [&strategy, global_step](const std::string& dir) {
    return SaveCheckpoint(strategy, dir, global_step);
  });
}

absl::StatusOr<std::string> CheckpointManager::Save(
    int64_t global_step, absl::FunctionRef<absl::Status(const std::string& dir)> write) {
  const std::string dir = absl::StrCat(root_, "/", kCheckpointPrefix, global_step);
  RETURN_IF_ERROR(env_->CreateDirectories(dir));
  RETURN_IF_ERROR(write(dir));
  const std::vector<Entry> entries = Scan();
  std::vector<const Entry*> complete;
  for (const Entry& entry : entries) {
    if (entry.complete) complete.push_back(&entry);
  }
  const size_t keep = static_cast<size_t>(max_to_keep_);
  const int64_t newest = complete.empty() ? global_step : complete.back()->step;
  size_t complete_seen = 0;
  for (const Entry& entry : entries) {
    const bool drop = entry.complete ? complete.size() - complete_seen++ > keep
                                     : entry.step < newest;
    // Best effort (see the header): a failure leaves the entry for the next Save to retry.
    if (drop) env_->RemoveTree(entry.path).IgnoreError();
  }
  return dir;
}

std::vector<CheckpointManager::Entry> CheckpointManager::Scan() const {
  std::vector<Entry> entries;
  absl::StatusOr<std::vector<std::string>> names = env_->ListDirectory(root_);
  if (!names.ok()) return entries;  // no root yet: no checkpoints
  for (const std::string& name : *names) {
    const std::optional<int64_t> step = StepOf(name);
    if (!step.has_value()) continue;
    std::string path = absl::StrCat(root_, "/", name);
    const bool complete = env_->FileExists(absl::StrCat(path, "/", kManifestFile));
    entries.push_back({*step, std::move(path), complete});
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.step < b.step; });
  return entries;
}

std::vector<std::string> CheckpointManager::Checkpoints() const {
  std::vector<std::string> out;
  for (Entry& entry : Scan()) {
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
