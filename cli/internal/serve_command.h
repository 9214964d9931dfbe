// `tessera serve`: an exported model behind TensorFlow Serving's REST API (model_service.h)
// until SIGINT or SIGTERM, within the bounds on what a client can cost that the options set
// (model_server.h, http_server.h).
//
//   $ tessera serve --model /tmp/recsys_export --port 8501
//   tessera serve: model 'recsys' version 1200 at http://127.0.0.1:8501/v1/models/recsys
//
// Thread-safety: RunServe blocks SIGINT and SIGTERM in the calling thread (and so in every
// thread it starts) and waits for them on one thread of its own; call it from the main thread
// before starting other threads.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"

namespace tessera::cli {

struct ServeOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";  // loopback only unless asked otherwise
  int port = 8501;                 // TF Serving's REST port; 0: a free port (printed)
  std::string name;                // the model's name in URLs; empty: the spec's name
  int threads = 0;                 // request handler threads; 0: one per core
  // The limits, as HttpServerOptions and PredictLimits have them (flags of the same names).
  int64_t max_body_bytes = int64_t{64} << 20;
  int64_t max_instances = 10'000;
  int max_connections = 1024;
  int read_timeout_ms = 30'000;
  int idle_timeout_ms = 60'000;
  int write_timeout_ms = 30'000;
};

// Loads the model (LoadPredictor's errors), binds (Unavailable when it cannot, naming the port, who
// has it and --port: cluster/port_check.h), writes the URL it serves on to `out`, and serves
// until SIGINT or SIGTERM; OK after a clean shutdown.
// InvalidArgument for a bad name, port or limit (naming its flag).
absl::Status RunServe(const ServeOptions& options, std::ostream& out);

}  // namespace tessera::cli
