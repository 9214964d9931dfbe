// `tessera ps`: a parameter-server node of a networked cluster. It needs no user code: the
// coordinator creates the variable shards on it, and workers talk to them directly.
//
//   $ tessera ps --port 7001 --task 0
//   tessera ps: ps 0 listening on 127.0.0.1:7001 (protocol version 2, plain TCP)
//   $ tessera ps --port 7009 --standby
//   tessera ps: standby listening on 127.0.0.1:7009 (protocol version 2, plain TCP)
//
// Thread-safety: RunPs blocks SIGINT and SIGTERM in the calling thread (and so in every thread
// it starts) and waits for one of them; call it from the main thread before other threads.
#pragma once

#include <cstdint>
#include <ostream>

#include "absl/status/status.h"
#include "cluster/network.h"

namespace tessera::cli {

struct PsOptions {
  int port = 0;           // 0: a free port (printed)
  int32_t task = 0;       // this node's index in the cluster spec's "ps" list
  bool standby = false;   // a standby (Cluster::ReplacePs) instead of task `task`
  int32_t threads = 0;    // scheduler threads; 0: one per core
  NetworkOptions network;  // bind address and TLS
};

// Listens (Unavailable when the port cannot be bound; InvalidArgument for a bad port, task or
// TLS files, or a task given to a standby), writes where to `out`, and serves until SIGINT or
// SIGTERM; OK then.
absl::Status RunPs(const PsOptions& options, std::ostream& out);

}  // namespace tessera::cli
