#include "serving/version_watcher.h"

#include <algorithm>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "schema/serving/model_io.h"
#include "serving/load_predictor.h"
#include "tessera/status.h"

namespace tessera::serving {
namespace {

// END records kept for the status of versions no longer on disk (the newest).
constexpr size_t kMaxGoneVersions = 16;

// The versions `policy` serves among `candidates` (ascending).
std::set<int64_t> Choose(const VersionPolicy& policy, const std::vector<int64_t>& candidates) {
  std::set<int64_t> chosen;
  switch (policy.kind) {
    case VersionPolicy::Kind::kLatest: {
      const size_t n = static_cast<size_t>(
          std::min<int64_t>(policy.latest, static_cast<int64_t>(candidates.size())));
      chosen.insert(candidates.end() - static_cast<std::ptrdiff_t>(n), candidates.end());
      break;
    }
    case VersionPolicy::Kind::kAll:
      chosen.insert(candidates.begin(), candidates.end());
      break;
    case VersionPolicy::Kind::kSpecific:
      for (int64_t v : candidates) {
        if (policy.specific.count(v) != 0) chosen.insert(v);
      }
      break;
  }
  return chosen;
}

absl::StatusOr<std::shared_ptr<const ServedVersion>> Load(const std::string& dir, int64_t version,
                                                          Env* env) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Predictor> predictor, LoadPredictor(dir, env));
  return ServedVersion::Create(std::move(predictor), version);
}

}  // namespace

int64_t VersionOfDirectory(const std::string& name) {
  if (name.empty()) return -1;
  for (char c : name) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return -1;
  }
  int64_t version = -1;
  return absl::SimpleAtoi(name, &version) ? version : -1;
}

VersionWatcher::VersionWatcher(std::vector<ModelConfig> models, ModelRegistry& registry, Env* env)
    : registry_(registry), env_(env) {
  for (ModelConfig& config : models) {
    Watched watched;
    watched.config = std::move(config);
    models_.push_back(std::move(watched));
  }
  for (const Watched& model : models_) Publish(model);
}

absl::Status VersionWatcher::Poll() {
  absl::Status first;
  for (Watched& model : models_) {
    absl::Status status = PollModel(model);
    if (first.ok()) first = std::move(status);
  }
  return first;
}

absl::Status VersionWatcher::PollModel(Watched& model) {
  const ModelConfig& config = model.config;
  const absl::StatusOr<std::vector<std::string>> entries = env_->ListDirectory(config.base_path);
  if (!entries.ok()) {
    if (!model.list_failed) {
      Log().warn("model '{}': cannot list its base path {}: {}; serving what it served",
                 config.name, config.base_path, entries.status().message());
    }
    model.list_failed = true;
    return absl::NotFoundError(absl::StrCat("model '", config.name,
                                            "': cannot list its base path '", config.base_path,
                                            "': ", entries.status().message()));
  }
  model.list_failed = false;

  // The complete versions on disk (Note [Versions appear whole]), and their model files.
  std::map<int64_t, std::string> ready;
  for (const std::string& name : *entries) {
    const int64_t version = VersionOfDirectory(name);
    if (version < 0) continue;
    const std::string file = absl::StrCat(config.base_path, "/", name, "/", kModelFile);
    if (!env_->FileExists(file)) continue;
    // Two names of one number ("7", "007"): the first in name order, whatever the listing's.
    std::string dir = absl::StrCat(config.base_path, "/", name);
    auto [it, inserted] = ready.emplace(version, dir);
    if (!inserted && dir < it->second) it->second = std::move(dir);
  }
  bool changed = false;
  // A version that failed is tried again once its file has changed size, or was away.
  for (auto& [version, known] : model.versions) {
    if (known.error.ok()) continue;
    auto dir = ready.find(version);
    const absl::StatusOr<uint64_t> size =
        dir == ready.end() ? absl::StatusOr<uint64_t>(absl::NotFoundError(""))
                           : env_->FileSize(absl::StrCat(dir->second, "/", kModelFile));
    if (!size.ok() || *size != known.failed_size) known.failed_size = UINT64_MAX;
    if (dir != ready.end() && known.failed_size == UINT64_MAX) {
      known.error = absl::OkStatus();
      changed = true;
    }
  }

  // Load what the policy wants, leaving out what fails to load (and choosing again without it).
  std::set<int64_t> wanted;
  for (bool failed = true; failed;) {
    failed = false;
    std::vector<int64_t> candidates;
    for (const auto& [version, dir] : ready) {
      auto known = model.versions.find(version);
      if (known == model.versions.end() || known->second.error.ok()) candidates.push_back(version);
    }
    wanted = Choose(config.policy, candidates);
    for (int64_t version : wanted) {
      Known& known = model.versions[version];
      if (known.loaded != nullptr) continue;
      const auto start = std::chrono::steady_clock::now();
      absl::StatusOr<std::shared_ptr<const ServedVersion>> loaded =
          Load(ready.at(version), version, env_);
      changed = true;
      if (loaded.ok()) {
        known.loaded = *std::move(loaded);
        known.ended = false;
        Log().info("model '{}': version {} available (loaded in {} ms)", config.name, version,
                   std::chrono::duration_cast<std::chrono::milliseconds>(
                       std::chrono::steady_clock::now() - start)
                       .count());
        continue;
      }
      known.error = loaded.status();
      known.ended = true;
      const absl::StatusOr<uint64_t> size =
          env_->FileSize(absl::StrCat(ready.at(version), "/", kModelFile));
      known.failed_size = size.ok() ? *size : UINT64_MAX;
      Log().warn("model '{}': version {} cannot be loaded: {}", config.name, version,
                 known.error.message());
      failed = true;
    }
  }

  // Unload what the policy no longer wants, or what left the disk.
  for (auto& [version, known] : model.versions) {
    if (known.loaded == nullptr || wanted.count(version) != 0) continue;
    known.loaded.reset();
    known.ended = true;
    changed = true;
    Log().info("model '{}': version {} unloaded ({})", config.name, version,
               ready.count(version) != 0 ? "superseded" : "removed from disk");
  }
  // Forget the oldest ended versions that left the disk.
  std::vector<int64_t> gone;
  for (const auto& [version, known] : model.versions) {
    if (known.ended && ready.count(version) == 0) gone.push_back(version);
  }
  for (size_t i = 0; i + kMaxGoneVersions < gone.size(); ++i) model.versions.erase(gone[i]);

  if (changed) Publish(model);
  return absl::OkStatus();
}

void VersionWatcher::Publish(const Watched& model) {
  ServedModel served;
  served.name = model.config.name;
  for (const auto& [version, known] : model.versions) {
    if (known.loaded != nullptr) {
      served.available.emplace(version, known.loaded);
      served.statuses.push_back({version, VersionState::kAvailable, absl::OkStatus()});
    } else if (known.ended) {
      served.statuses.push_back({version, VersionState::kEnd, known.error});
    }
  }
  registry_.Set(std::move(served));
}

void VersionWatcher::Start(std::chrono::milliseconds interval) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
  }
  thread_ = std::thread([this, interval] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, interval, [this] { return stopping_; })) {
      lock.unlock();
      Poll().IgnoreError();  // a base path that cannot be listed was warned about
      lock.lock();
    }
  });
}

void VersionWatcher::Stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

}  // namespace tessera::serving
