// VersionWatcher: serves models from base paths of numbered versions, as TensorFlow Serving does —
// each poll of a base path loads the versions its policy wants (by default the newest) and
// unloads the others, publishing the result in a ModelRegistry (model_registry.h).
//
//   /models/recsys/1/model.tsr     versions are the directories named by a number (an int64)
//   /models/recsys/2/model.tsr     holding an export's model.tsr; other names are ignored
//
//   ModelRegistry registry;
//   VersionWatcher watcher({{"recsys", "/models/recsys", VersionPolicy{}}}, registry);
//   TESSERA_RETURN_IF_ERROR(watcher.Poll());            // the first poll: NotFound for a missing
//   base path watcher.Start(std::chrono::seconds(1));      // then every second on a thread, until
//   Stop
//
// Note [Versions appear whole]: a version is its model.tsr, and exports write that file whole
// under a temporary name and rename it into place (schema/serving/model_io.h), so a version
// directory is either without model.tsr (being written: ignored, looked at again at the next poll)
// or complete. A version whose model.tsr cannot be loaded (a corrupt file, or one copied in place
// by something other than an export and caught half-written) shows as END with its error in the
// model's status, is left out of the policy's choice (so the versions served before it stay),
// and is loaded again once its size changes. A new version is loaded before the one it replaces
// is unloaded, so a model never goes without a version; a version removed from disk is unloaded
// (requests using it finish first). A base path that cannot be listed at a later poll changes
// nothing (a warning says so once).
//
// Thread-safety: Poll is called by one thread at a time (Start's thread, once started); Start
// and Stop from one controlling thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "serving/model_config.h"
#include "serving/model_registry.h"
#include "tessera/env.h"

namespace tessera::serving {

class VersionWatcher {
 public:
  // `registry` and `env` must outlive the watcher. Every model is published at once, with no
  // version.
  VersionWatcher(std::vector<ModelConfig> models, ModelRegistry& registry,
                 Env* env = Env::Default());
  ~VersionWatcher() { Stop(); }
  VersionWatcher(const VersionWatcher&) = delete;
  VersionWatcher& operator=(const VersionWatcher&) = delete;

  // One pass over every base path, publishing each model whose versions changed. NotFound
  // naming the model and its base path when one cannot be listed (the others are polled).
  absl::Status Poll();

  // Polls every `interval` on a thread of its own until Stop.
  void Start(std::chrono::milliseconds interval);
  // Stops polling (waiting for a poll under way). Idempotent.
  void Stop();

 private:
  // What the watcher knows of one version of a model.
  struct Known {
    std::shared_ptr<const ServedVersion> loaded;  // null unless available
    absl::Status error;                           // why it could not be loaded
    uint64_t failed_size = 0;                     // model.tsr's size when that happened
    bool ended = false;                           // unloaded, or failed
  };
  struct Watched {
    ModelConfig config;
    std::map<int64_t, Known> versions;
    bool list_failed = false;  // the last listing failed (warned once)
  };

  absl::Status PollModel(Watched& model);
  void Publish(const Watched& model);

  std::vector<Watched> models_;
  ModelRegistry& registry_;
  Env* const env_;

  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;  // guarded by mutex_
};

// The version a directory name stands for: its digits as an int64 (no sign; leading zeros as
// TF Serving's "00000123"); -1 for any other name.
int64_t VersionOfDirectory(const std::string& name);

}  // namespace tessera::serving
