// ModelRegistry: the models a server serves — for each, its available versions and the status of
// every version it knows of — as an immutable snapshot that request threads take and that
// `tessera serve` (a single export) or a VersionWatcher (version_watcher.h) replaces.
//
//   ModelRegistry registry;
//   registry.Set({"recsys", {{3, version3}}, {{3, VersionState::kAvailable, absl::OkStatus()}}});
//   std::shared_ptr<const ModelRegistry::Models> models = registry.Snapshot();
//   const ServedModel& model = models->at("recsys");      // model.Newest(): version 3
//
// A request holds its snapshot (and so its version's Predictor and mapped file) until it is
// answered, however the registry changes meanwhile: a version unloaded while serving finishes
// the requests already using it.
//
// Thread-safety: Snapshot and Set may be called from any threads; a snapshot is immutable.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "serving/metadata.h"
#include "serving/served_version.h"

namespace tessera::serving {

struct ServedModel {
  std::string name;
  std::map<int64_t, std::shared_ptr<const ServedVersion>> available;  // by version
  std::vector<VersionStatus> statuses;                                // ascending by version

  // The newest available version; null when none is.
  const ServedVersion* Newest() const {
    return available.empty() ? nullptr : available.rbegin()->second.get();
  }
};

class ModelRegistry {
 public:
  using Models = std::map<std::string, ServedModel>;

  ModelRegistry() : models_(std::make_shared<const Models>()) {}

  std::shared_ptr<const Models> Snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return models_;
  }

  // Adds `model`, or replaces the model of its name.
  void Set(ServedModel model) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto models = std::make_shared<Models>(*models_);
    const std::string name = model.name;
    (*models)[name] = std::move(model);
    models_ = std::move(models);
  }

 private:
  mutable std::mutex mutex_;
  std::shared_ptr<const Models> models_;  // guarded by mutex_ (the pointer, not what it holds)
};

}  // namespace tessera::serving
