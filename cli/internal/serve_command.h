// `tessera serve`: an exported model behind TensorFlow Serving's REST API (model_service.h)
// until SIGINT or SIGTERM.
//
//   $ tessera serve --model /tmp/recsys_export --port 8501
//   tessera serve: model 'recsys' version 1200 at http://127.0.0.1:8501/v1/models/recsys
//
// Thread-safety: RunServe blocks SIGINT and SIGTERM in the calling thread (and so in every
// thread it starts) and waits for them on one thread of its own; call it from the main thread
// before starting other threads.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace tessera::cli {

struct ServeOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";  // loopback only unless asked otherwise
  int port = 8501;                 // 0: a free port (printed)
  std::string name;                // the model's name in URLs; empty: the spec's name
};

// Loads the model (LoadPredictor's errors), binds (Unavailable when it cannot), writes the URL it
// serves on to `out`, and serves until SIGINT or SIGTERM; OK after a clean shutdown.
// InvalidArgument for a bad name or port.
absl::Status RunServe(const ServeOptions& options, std::ostream& out);

}  // namespace tessera::cli
