// The command-line flags every training program shares, and what they say:
//   --mode=sim|local|net, --strategy=ps|mirrored, --on_replica_loss=restore|continue, --ps,
//   --shard_copies (--replicas: its deprecated old name), --workers, --closures_per_worker,
//   --checkpoint_dir, --checkpoint_every, --eval_every, --resume, --overwrite_checkpoints,
//   --export_dir, --inject_worker_failures, --restart_delay_ms, --seed, --summary, --metrics_file,
//   --log_level, -v, --dashboard_port, --dashboard_host, --dashboard_keep_serving, and networked
//   mode's --cluster_spec, --role, --task, --min_workers,
//   --worker_wait_s, --connect_timeout_s, --threads, --bind, --tls_cert, --tls_key, --tls_ca,
//   --max_message_bytes.
// A program adds its own model, data and schedule flags (--steps, --batch_size, --partitioner,
// ... whose defaults differ from program to program).
//
// A networked cluster comes from --cluster_spec or, without it, the TF_CONFIG environment
// variable; this process's role and worker task from --role and --task, else the task of the
// spec file or TF_CONFIG, else the coordinator (cluster/base/cluster_spec.h: TF's "chief" is the
// coordinator). --mode=sim or --mode=local runs in this process whatever TF_CONFIG says.
//
// The flags are defined in training_flags.cc, which a program links only by calling
// ReadTrainingFlags or TrainingFlagGroups: keep everything else out of that file, so that
// programs that do not train (the `tessera` binary) are free to define flags of the same names.
//
// Thread-safety: call ReadTrainingFlags after absl::ParseCommandLine, from the main thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "coordinator/base/command_line.h"
#include "coordinator/mirrored/mirrored_training.h"
#include "coordinator/monitoring/dashboard.h"
#include "coordinator/ps/parameter_server_training.h"

namespace tessera {

enum class TrainingMode {
  kSimulation,  // --mode=sim: parameter servers and workers in this process (the default)
  kLocal,       // --mode=local: the single-thread baseline (TrainLocally)
  kNetworked,   // --mode=net (the default with --cluster_spec or TF_CONFIG): a networked cluster
};

enum class TrainingStrategy {
  kParameterServer,  // --strategy=ps: asynchronous, variables on parameter servers (the default)
  kMirrored,         // --strategy=mirrored: synchronous, a copy per worker (mirrored_training.h)
};

enum class TrainingRole {
  kCoordinator,  // --role=coordinator (or a "chief" task): schedules, checkpoints (the default)
  kWorker,       // --role=worker (or a "worker" task): serves train steps (networked mode only)
};

struct TrainingFlags {
  TrainingMode mode = TrainingMode::kSimulation;
  TrainingRole role = TrainingRole::kCoordinator;
  TrainingStrategy strategy = TrainingStrategy::kParameterServer;
  // --on_replica_loss (the mirrored strategy): restore (the default) or continue.
  ReplicaLossPolicy on_replica_loss = ReplicaLossPolicy::kRestore;
  int32_t task = 0;  // the worker's task (a worker's --task, or its task's index)
  // Everything but the partitioner, which the program sets.
  ParameterServerTrainingOptions parameter_servers;
  uint64_t seed = 1;    // --seed: the model's and the data shuffling's
  std::string summary;  // --summary: where to write the JSON summary ("": nowhere)
  // --metrics_file: where to write the run's JSON lines as it goes ("": nowhere; metrics_file.h)
  std::string metrics_file;
  int64_t eval_every = 0;  // --eval_every: steps between validations (0: only at the end)
  // --dashboard_port (and --dashboard_host): the run's dashboard
  // (coordinator/monitoring/dashboard.h); none without the flag.
  std::optional<DashboardOptions> dashboard;
  bool dashboard_keep_serving = false;  // --dashboard_keep_serving: serve on after the run
};

// Whether `host` names this machine's loopback interface ("localhost", "::1", "127.x.y.z").
bool IsLoopbackHost(absl::string_view host);

// Applies --log_level and -v (= --log_level=debug) to the process's logger (core/base/logging.h);
// InvalidArgument naming the flag for a level ParseLogLevel refuses, or -v with another level.
absl::Status ApplyLogLevelFlags();

// Reads the shared flags (and TF_CONFIG), first applying the log level (ApplyLogLevelFlags).
// InvalidArgument for a mode other than sim, local or
// net; --shard_copies other than 1 or 2, or given with a different --replicas (its deprecated
// alias); checkpoint or export flags with --mode=local (they work on parameter servers);
// --cluster_spec, --role or --task with --mode=sim or local; --mode=net, --role or --task without
// a cluster; --overwrite_checkpoints with --resume or without --checkpoint_dir; a role other than
// coordinator (chief) or worker, or a task of TF_CONFIG or the spec that is a parameter server;
// a worker task not in the cluster; --threads < 0; --min_workers outside 1..the cluster's
// workers; incomplete or unreadable TLS flags (ValidateNetworkOptions). Unavailable for a
// networked coordinator whose port another process listens on (CheckCanListen). NotFound or
// InvalidArgument, naming the file or TF_CONFIG, for a cluster that cannot be read or parsed
// (ResolveClusterConfig).
absl::StatusOr<TrainingFlags> ReadTrainingFlags();

// The shared flags in groups, for a program's --help (coordinator/base/command_line.h).
std::vector<FlagGroup> TrainingFlagGroups();

}  // namespace tessera
