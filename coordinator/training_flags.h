// The command-line flags every training program shares, and what they say:
//   --mode=sim|local, --ps, --workers, --closures_per_worker, --checkpoint_dir,
//   --checkpoint_every, --eval_every, --resume, --overwrite_checkpoints, --export_dir,
//   --inject_worker_failures, --restart_delay_ms, --seed, --summary, and networked mode's
//   --cluster_spec, --role, --task, --min_workers,
//   --worker_wait_s, --connect_timeout_s, --threads, --bind, --tls_cert, --tls_key, --tls_ca,
//   --max_message_bytes.
// A program adds its own model, data and schedule flags (--steps, --batch_size, --partitioner,
// ... whose defaults differ from program to program).
//
// The flags are defined in training_flags.cc, which a program links only by calling
// ReadTrainingFlags: keep everything else out of that file, so that programs that do not train
// (the `tessera` binary) are free to define flags of the same names.
//
// Thread-safety: call ReadTrainingFlags after absl::ParseCommandLine, from the main thread.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/parameter_server_training.h"

namespace tessera {

enum class TrainingMode {
  kSimulation,  // --mode=sim: parameter servers and workers in this process (the default)
  kLocal,       // --mode=local: the single-thread baseline (TrainLocally)
  kNetworked,   // --cluster_spec: a networked cluster
};

enum class TrainingRole {
  kCoordinator,  // --role=coordinator: schedules, checkpoints, evaluates (the default)
  kWorker,       // --role=worker: serves train steps (networked mode only)
};

struct TrainingFlags {
  TrainingMode mode = TrainingMode::kSimulation;
  TrainingRole role = TrainingRole::kCoordinator;
  int32_t task = 0;  // the worker's task (--role=worker)
  // Everything but the partitioner, which the program sets.
  ParameterServerTrainingOptions parameter_servers;
  uint64_t seed = 1;    // --seed: the model's and the data shuffling's
  std::string summary;  // --summary: where to write the JSON summary ("": nowhere)
  int64_t eval_every = 0;  // --eval_every: steps between validations (0: only at the end)
};

// Reads the shared flags. InvalidArgument for a mode other than sim or local; checkpoint or
// export flags, or --cluster_spec, with --mode=local (they work on parameter servers);
// --overwrite_checkpoints with --resume or without --checkpoint_dir; a role
// other than coordinator or worker; --threads < 0; --min_workers outside 1..the spec's workers;
// incomplete or unreadable TLS flags (ValidateNetworkOptions). NotFound or InvalidArgument for a
// cluster spec that cannot be read or parsed (ReadClusterSpec).
absl::StatusOr<TrainingFlags> ReadTrainingFlags();

}  // namespace tessera
