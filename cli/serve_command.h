// `tessera serve`: exported models behind TensorFlow Serving's REST API (model_service.h) until
// SIGINT or SIGTERM, within the bounds on what a client can cost that the options set
// (model_server.h, http_server.h). What it serves, one of:
//
//   --model DIR               one export, as version <its training step>
//   --model_base_path DIR     numbered versions DIR/1, DIR/2, ... as TF Serving serves them: the
//                             newest, new ones picked up and removed ones unloaded while serving,
//                             DIR polled every --file_system_poll_wait_seconds (version_watcher.h)
//   --model_config_file FILE  several models, each a base path (model_config.h)
//
//   $ tessera serve --model_base_path /models/recsys --port 8501
//   tessera serve: model 'recsys' version 3 at http://127.0.0.1:8501/v1/models/recsys
//
// Each request is a line of the request log (request_log.h): stderr by default; the counts and
// latencies are at GET /monitoring/prometheus/metrics (serving_metrics.h).
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
  // Exactly one of these three.
  std::string model_dir;
  std::string model_base_path;
  std::string model_config_file;
  std::string host = "127.0.0.1";  // loopback only unless asked otherwise
  int port = 8501;                 // TF Serving's REST port; 0: a free port (printed)
  // The model's name in URLs (--model, --model_base_path); empty: the export's own name
  // (--model), the base path's last directory (--model_base_path).
  std::string name;
  int threads = 0;  // request handler threads; 0: one per core
  // Base paths are polled this often; 0: once, at the start.
  int file_system_poll_wait_seconds = 1;
  // "stderr", "off", or a file the request log is appended to.
  std::string request_log = "stderr";
  // The limits, as HttpServerOptions and PredictLimits have them (flags of the same names).
  int64_t max_body_bytes = int64_t{64} << 20;
  int64_t max_instances = 10'000;
  int max_connections = 1024;
  int read_timeout_ms = 30'000;
  int idle_timeout_ms = 60'000;
  int write_timeout_ms = 30'000;
};

// Loads the models (LoadPredictor's errors for --model; NotFound for a base path that cannot be
// listed; ReadModelConfigFile's errors), binds (Unavailable when it cannot, naming the port, who
// has it and --port: cluster/network/port_check.h), writes the URL of each model to `out`, and
// serves until SIGINT or SIGTERM; OK after a clean shutdown. InvalidArgument for a bad name, port,
// limit or combination of flags (naming the flag).
absl::Status RunServe(const ServeOptions& options, std::ostream& out);

}  // namespace tessera::cli
