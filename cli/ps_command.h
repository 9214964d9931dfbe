// `tessera ps`: a parameter-server node of a networked cluster. It needs no user code: the
// coordinator creates the variable shards on it, and workers talk to them directly. Which PS it
// is and its port come from its flags, else from its task in a --cluster_spec file or TF_CONFIG
// (tessera/cluster.h); without either, task 0 on port 7733 (kDefaultPsPort).
//
//   $ tessera ps --port 7001 --task 0
//   tessera ps: ps 0 listening on 127.0.0.1:7001 (protocol version 7, plain TCP)
//   $ tessera ps --port 7009 --standby
//   tessera ps: standby listening on 127.0.0.1:7009 (protocol version 7, plain TCP)
//   $ tessera ps --port 7001 --metrics_port 9101
//   tessera ps: ps 0 listening on 127.0.0.1:7001 (...)
//   tessera ps: metrics on http://127.0.0.1:9101/metrics
//   $ TF_CONFIG='{"cluster": {...}, "task": {"type": "ps", "index": 1}}' tessera ps
//   tessera ps: ps 1 listening on 127.0.0.1:<the port of the cluster's "ps"[1]> (...)
//
// Thread-safety: RunPs blocks SIGINT and SIGTERM in the calling thread (and so in every thread
// it starts) and waits for one of them; call it from the main thread before other threads.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cluster/network/network.h"
#include "tessera/cluster.h"

namespace tessera::cli {

// Note [The default PS port]: 7733 is in no /etc/services entry, IANA assignment or well-known
// server's default that we know of (TF Serving's 8500/8501, TF's 2222 and TensorBoard's 6006,
// Spark, Jupyter, Prometheus, Redis, ...), and below Linux's ephemeral range (32768-60999), so an
// outgoing connection never holds it.
inline constexpr int kDefaultPsPort = 7733;

struct PsOptions {
  int port = kDefaultPsPort;  // 0: a free port (printed)
  int32_t task = 0;           // this node's index in the cluster's "ps" list
  bool standby = false;       // a standby (Cluster::ReplacePs) instead of task `task`
  int32_t threads = 0;        // scheduler threads; 0: one per core
  // How long a lost coordinator's shards are kept for it to reclaim (Note [Shards die with their
  // coordinator], actors/ps/ps_node_actor.h); 0: dropped at once.
  absl::Duration shard_lease = absl::Seconds(30);
  NetworkOptions network;     // bind address and TLS
  // The Prometheus page (cli/ps_metrics.h): none without a port; 0: a free port
  // (printed).
  std::optional<int> metrics_port;
  std::string metrics_host = "127.0.0.1";
  // How the user picks another port, for the error when this one is taken.
  std::string how_to_change_port = "start tessera ps with another --port";
};

// What `tessera ps`'s command line says of its identity; an unset field is taken from the
// cluster config.
struct PsFlags {
  std::optional<int> port;      // --port
  std::optional<int32_t> task;  // --task
  bool standby = false;         // --standby
};

// Sets options.task, standby, port and how_to_change_port: --standby or --task override the
// config's task (a "ps" or "ps_standby" task, tessera/cluster.h); the port is --port,
// else the port of this node's address in the config's cluster, else kDefaultPsPort.
// InvalidArgument naming the task's source when the config's task is not a PS (and what runs it),
// for a --standby with a --task, and for a task that is not in the cluster.
absl::Status ResolvePsIdentity(const PsFlags& flags, const ClusterConfig& config,
                               PsOptions& options);

// Listens (Unavailable when the port or the metrics port cannot be bound; InvalidArgument for a
// bad port, task or TLS files, or a task given to a standby), writes where to `out` (and where
// the metrics are), and serves until SIGINT or SIGTERM; OK then.
absl::Status RunPs(const PsOptions& options, std::ostream& out);

}  // namespace tessera::cli
