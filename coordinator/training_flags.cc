#include "coordinator/training_flags.h"

#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cluster/network.h"
#include "core/status.h"

ABSL_FLAG(std::string, mode, "sim", "sim (parameter servers in one process) or local (baseline)");
ABSL_FLAG(int32_t, ps, 2, "parameter-server tasks");
ABSL_FLAG(int32_t, workers, 2, "worker tasks");
ABSL_FLAG(int32_t, closures_per_worker, 1,
          "closures each worker runs at once (1: TF's behaviour; 2 overlaps communication with "
          "compute)");
ABSL_FLAG(std::string, checkpoint_dir, "", "save checkpoints under this directory (on parameter servers: sim or networked)");
ABSL_FLAG(int64_t, checkpoint_every, 0, "steps between checkpoints (0: only at the end)");
ABSL_FLAG(int64_t, eval_every, 0,
          "steps between validations on the test set while training (0: only at the end)");
ABSL_FLAG(bool, resume, false,
          "continue from the latest checkpoint in --checkpoint_dir (any --ps or --partitioner)");
ABSL_FLAG(bool, overwrite_checkpoints, false,
          "start a new run even though --checkpoint_dir holds checkpoints: delete them first "
          "(without it, such a run is refused)");
ABSL_FLAG(std::string, export_dir, "", "export the trained model here for serving (on parameter servers: sim or networked)");
ABSL_FLAG(int32_t, inject_worker_failures, 0,
          "kill this many workers at random moments (mid-closure); each restarts after a delay");
ABSL_FLAG(int64_t, restart_delay_ms, 100, "how long a killed worker stays down");
ABSL_FLAG(uint64_t, seed, 1, "model and shuffling seed");
ABSL_FLAG(std::string, summary, "", "write a JSON summary of the run here");
ABSL_FLAG(std::string, cluster_spec, "",
          "networked mode: a JSON cluster spec listing the ps, worker and coordinator addresses "
          "(--ps and --workers are then taken from it)");
ABSL_FLAG(std::string, role, "coordinator",
          "networked mode: coordinator (schedules, checkpoints, evaluates) or worker");
ABSL_FLAG(int32_t, task, 0, "networked mode, --role=worker: this worker's index in the spec");
ABSL_FLAG(int32_t, min_workers, 1, "networked coordinator: workers to wait for before training");
ABSL_FLAG(int64_t, worker_wait_s, 300, "networked coordinator: how long to wait for them");
ABSL_FLAG(int64_t, connect_timeout_s, 30, "networked mode: how long to retry reaching a node");
ABSL_FLAG(int32_t, threads, 0,
          "networked mode: this process's scheduler threads (0: one per core; 1 when several "
          "nodes share a small machine)");
ABSL_FLAG(std::string, bind, "127.0.0.1",
          "networked coordinator: the address to listen on for workers (0.0.0.0: all)");
ABSL_FLAG(std::string, tls_cert, "", "networked mode: this node's certificate (PEM)");
ABSL_FLAG(std::string, tls_key, "", "networked mode: this node's private key (PEM)");
ABSL_FLAG(std::string, tls_ca, "", "networked mode: the cluster CA's certificate (PEM)");
ABSL_FLAG(uint64_t, max_message_bytes, tessera::kDefaultMaxMessageBytes,
          "networked mode: the largest message a peer may send this node (a whole shard read "
          "or assigned at once, a batch's rows or gradients); a larger one closes its "
          "connection");

namespace tessera {
namespace {

// The networked flags, read once --cluster_spec names a spec.
absl::Status ReadNetworkedFlags(const std::string& spec_path,
                                ParameterServerTrainingOptions& options) {
  ASSIGN_OR_RETURN(options.cluster, ReadClusterSpec(spec_path));
  options.ps = static_cast<int32_t>(options.cluster->ps.size());
  options.workers = static_cast<int32_t>(options.cluster->workers.size());
  options.min_workers = absl::GetFlag(FLAGS_min_workers);
  options.worker_wait = absl::Seconds(absl::GetFlag(FLAGS_worker_wait_s));
  options.network.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  options.threads = absl::GetFlag(FLAGS_threads);
  if (options.threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  options.network.bind = absl::GetFlag(FLAGS_bind);
  options.network.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  options.network.tls_key = absl::GetFlag(FLAGS_tls_key);
  options.network.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  options.network.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  RETURN_IF_ERROR(ValidateNetworkOptions(options.network));
  if (options.min_workers < 1 || options.min_workers > options.workers) {
    return absl::InvalidArgumentError(absl::StrCat("--min_workers must be in 1..",
                                                   options.workers, " (the spec's workers)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainingFlags> ReadTrainingFlags() {
  TrainingFlags flags;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode == "sim") {
    flags.mode = TrainingMode::kSimulation;
  } else if (mode == "local") {
    flags.mode = TrainingMode::kLocal;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--mode must be sim or local, not ", mode));
  }
  ParameterServerTrainingOptions& options = flags.parameter_servers;
  options.ps = absl::GetFlag(FLAGS_ps);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.closures_per_worker = absl::GetFlag(FLAGS_closures_per_worker);
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.overwrite_checkpoints = absl::GetFlag(FLAGS_overwrite_checkpoints);
  options.export_dir = absl::GetFlag(FLAGS_export_dir);
  options.inject_worker_failures = absl::GetFlag(FLAGS_inject_worker_failures);
  options.restart_delay = absl::Milliseconds(absl::GetFlag(FLAGS_restart_delay_ms));
  options.seed = flags.seed = absl::GetFlag(FLAGS_seed);
  flags.summary = absl::GetFlag(FLAGS_summary);
  flags.eval_every = absl::GetFlag(FLAGS_eval_every);
  // Counts and delays below zero mean nothing: refuse them rather than guess.
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"--ps", options.ps}, {"--workers", options.workers},
        {"--closures_per_worker", options.closures_per_worker}}) {
    if (value < 1) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be >= 1, not ", value));
    }
  }
  for (const auto& [name, value] :
       {std::pair<const char*, int64_t>{"--checkpoint_every", options.checkpoint_every},
        {"--eval_every", flags.eval_every},
        {"--inject_worker_failures", options.inject_worker_failures},
        {"--restart_delay_ms", absl::GetFlag(FLAGS_restart_delay_ms)}}) {
    if (value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be >= 0, not ", value));
    }
  }
  if (flags.mode == TrainingMode::kLocal &&
      (!options.checkpoint_dir.empty() || options.resume || options.overwrite_checkpoints ||
       !options.export_dir.empty())) {
    return absl::InvalidArgumentError(
        "--checkpoint_dir, --resume, --overwrite_checkpoints and --export_dir work on parameter "
        "servers: use --mode=sim");
  }
  if (options.overwrite_checkpoints && options.resume) {
    return absl::InvalidArgumentError(
        "--overwrite_checkpoints starts a new run, --resume continues one: pass one of them");
  }
  if (options.overwrite_checkpoints && options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--overwrite_checkpoints needs --checkpoint_dir");
  }
  const std::string role = absl::GetFlag(FLAGS_role);
  flags.task = absl::GetFlag(FLAGS_task);
  const std::string spec_path = absl::GetFlag(FLAGS_cluster_spec);
  if (spec_path.empty()) return flags;
  if (flags.mode == TrainingMode::kLocal) {
    return absl::InvalidArgumentError(
        "--cluster_spec runs on parameter servers: drop --mode=local");
  }
  if (role == "coordinator") {
    flags.role = TrainingRole::kCoordinator;
  } else if (role == "worker") {
    flags.role = TrainingRole::kWorker;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--role must be coordinator or worker, not ", role));
  }
  flags.mode = TrainingMode::kNetworked;
  RETURN_IF_ERROR(ReadNetworkedFlags(spec_path, options));
  return flags;
}

}  // namespace tessera
