#include "coordinator/training/training_flags.h"

#include <cmath>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "cluster/network/network.h"
#include "cluster/network/port_check.h"
#include "core/base/logging.h"
#include "tessera/cluster.h"
#include "tessera/status.h"

ABSL_FLAG(std::optional<std::string>, mode, std::nullopt,
          "sim (parameter servers and workers in this process), local (the single-thread "
          "baseline) or net (a networked cluster, from --cluster_spec or TF_CONFIG); default: net "
          "when --cluster_spec or TF_CONFIG gives a cluster, else sim");
ABSL_FLAG(std::string, strategy, "ps",
          "ps: asynchronous training, variables on parameter servers; mirrored: synchronous "
          "training, a copy of every variable on each worker, gradients all-reduced between "
          "them (--batch_size is then each worker's share of a step)");
ABSL_FLAG(std::string, on_replica_loss, "restore",
          "mirrored strategy, a worker lost: restore (wait for it, resume everyone from the latest "
          "checkpoint) or continue (go on without it, the global batch shrinks)");
ABSL_FLAG(int32_t, ps, 2, "parameter-server tasks");
ABSL_FLAG(int32_t, workers, 2, "worker tasks");
// Both optional, so that ReadTrainingFlags sees whether each was given (Note [A deprecated
// flag's alias]).
ABSL_FLAG(std::optional<int32_t>, shard_copies, std::nullopt,
          "on parameter servers, the copies of each shard: 1 (the default): no backup; 2: a "
          "backup of every shard on another PS, so a lost PS loses no acknowledged update (its "
          "backups take over); needs --ps >= 2");
ABSL_FLAG(std::optional<int32_t>, replicas, std::nullopt,
          "deprecated: the old name of --shard_copies (same values)");
ABSL_FLAG(int32_t, closures_per_worker, 1,
          "closures each worker runs at once (1: TF's behaviour; 2 overlaps communication with "
          "compute)");
ABSL_FLAG(std::string, checkpoint_dir, "", "save checkpoints under this directory (on parameter servers: sim or networked)");
ABSL_FLAG(int64_t, checkpoint_every, 0, "steps between checkpoints (0: only at the end)");
ABSL_FLAG(double, checkpoint_every_seconds, 0,
          "seconds of training between checkpoints (0: only at the end); with --checkpoint_every, "
          "whichever comes first");
ABSL_FLAG(bool, checkpoint_in_background, true,
          "on parameter servers: a checkpoint during training pauses it only while each shard "
          "marks its state, and is written while training goes on (a shard copies aside each "
          "4 KiB page it updates before it is written); false: training waits until it is "
          "written");
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
ABSL_FLAG(std::string, metrics_file, "",
          "write the run here as it goes, one JSON object a line: every second the step, "
          "examples/s, mean training loss, queue depth, closures completed and worker failures; "
          "each validation's loss and AUC (pandas: read_json(path, lines=True))");
ABSL_FLAG(std::string, log_level, "",
          "diagnostics on stderr from this level up: debug, info, warning, error or off "
          "(default: the TESSERA_LOG_LEVEL environment variable, else info)");
ABSL_FLAG(bool, v, false, "verbose: --log_level=debug");
ABSL_FLAG(int32_t, dashboard_port, -1,
          "serve the run's live dashboard (a web page, its JSON API and Prometheus /metrics) on "
          "this port of the coordinator (-1: none; 0: a free port, printed)");
ABSL_FLAG(std::string, dashboard_host, "127.0.0.1",
          "the address the dashboard listens on (0.0.0.0: all; plain HTTP, read-only)");
ABSL_FLAG(bool, dashboard_keep_serving, false,
          "once the run is over, keep serving the dashboard until SIGINT or SIGTERM");
ABSL_FLAG(std::string, cluster_spec, "",
          "networked mode: a JSON file in TF_CONFIG's shape listing the ps, worker and chief "
          "(coordinator) addresses, and optionally this process's \"task\" (--ps and --workers "
          "are then taken from it); without it, the TF_CONFIG environment variable is read");
ABSL_FLAG(std::optional<std::string>, role, std::nullopt,
          "networked mode: coordinator (or chief: schedules, checkpoints, evaluates) or worker; "
          "default: the task's type in --cluster_spec or TF_CONFIG, else coordinator");
ABSL_FLAG(std::optional<int32_t>, task, std::nullopt,
          "networked mode, a worker: its index in the cluster's \"worker\" list; default: the "
          "task's index in --cluster_spec or TF_CONFIG, else 0");
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

// The networked flags, read once options.cluster is set.
absl::Status ReadNetworkedFlags(ParameterServerTrainingOptions& options) {
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
  TESSERA_RETURN_IF_ERROR(ValidateNetworkOptions(options.network));
  if (options.min_workers < 1 || options.min_workers > options.workers) {
    return absl::InvalidArgumentError(absl::StrCat("--min_workers must be in 1..",
                                                   options.workers, " (the workers of ",
                                                   options.cluster->source, ")"));
  }
  return absl::OkStatus();
}

// The mode --mode names, if any.
absl::StatusOr<std::optional<TrainingMode>> ModeFlag() {
  const std::optional<std::string> mode = absl::GetFlag(FLAGS_mode);
  if (!mode.has_value()) return std::nullopt;
  if (*mode == "sim") return TrainingMode::kSimulation;
  if (*mode == "local") return TrainingMode::kLocal;
  if (*mode == "net") return TrainingMode::kNetworked;
  return absl::InvalidArgumentError(
      absl::StrCat("--mode must be sim, local or net, not ", *mode));
}

// This process's role and worker task in `config`'s cluster: --role and --task override the
// config's task (Note [TF_CONFIG's task types], tessera/cluster.h).
absl::Status ReadRole(const ClusterConfig& config, TrainingFlags& flags) {
  const std::optional<std::string> role = absl::GetFlag(FLAGS_role);
  const std::optional<int32_t> task = absl::GetFlag(FLAGS_task);
  const std::optional<ClusterTask>& given = config.task;
  if (role.has_value()) {
    if (*role == "coordinator" || *role == "chief") {
      flags.role = TrainingRole::kCoordinator;
    } else if (*role == "worker") {
      flags.role = TrainingRole::kWorker;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "--role must be coordinator (or chief) or worker, not ", *role,
          *role == "ps" ? " (a parameter server is `tessera ps`)" : ""));
    }
  } else if (given.has_value()) {
    if (given->type == TaskType::kPs || given->type == TaskType::kPsStandby) {
      return absl::InvalidArgumentError(
          absl::StrCat(config.task_source, ": task ", given->ToString(),
                       " is a parameter server: start `tessera ps` for it, not a training "
                       "program (or override the task with --role)"));
    }
    flags.role = given->type == TaskType::kWorker ? TrainingRole::kWorker
                                                  : TrainingRole::kCoordinator;
  }
  if (flags.role != TrainingRole::kWorker) return absl::OkStatus();
  std::string source = "--task";
  if (task.has_value()) {
    flags.task = *task;
  } else if (given.has_value() && given->type == TaskType::kWorker) {
    flags.task = given->index;
    source = config.task_source;
  }
  if (flags.task < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--task must be >= 0, not ", flags.task));
  }
  return CheckTaskInCluster({TaskType::kWorker, flags.task}, *config.cluster, source);
}

// --dashboard_port, --dashboard_host, --dashboard_keep_serving into flags.dashboard.
absl::Status ReadDashboardFlags(TrainingFlags& flags) {
  const int32_t port = absl::GetFlag(FLAGS_dashboard_port);
  flags.dashboard_keep_serving = absl::GetFlag(FLAGS_dashboard_keep_serving);
  if (port < -1 || port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dashboard_port must be -1 (none), 0 (a free port) or a port up to 65535, not ", port));
  }
  if (port == -1) {
    if (flags.dashboard_keep_serving) {
      return absl::InvalidArgumentError(
          "--dashboard_keep_serving keeps the dashboard up: it needs --dashboard_port");
    }
    return absl::OkStatus();
  }
  flags.dashboard = DashboardOptions{absl::GetFlag(FLAGS_dashboard_host), port};
  if (port != 0) {
    // Before the program builds its data: a port another process has is reported at once.
    TESSERA_RETURN_IF_ERROR(CheckCanListen("the dashboard", flags.dashboard->host,
                                           static_cast<uint16_t>(port),
                                           "choose another with --dashboard_port"));
  }
  return absl::OkStatus();
}

// Note [A deprecated flag's alias]
// --shard_copies was --replicas, a word the mirrored strategy's replicas (a copy of the model on
// each worker) have for themselves. The old name still works, with the same values, so that
// scripts and flag files written for it keep running; given both with different values, which one
// is meant cannot be told, and the run is refused.
// --shard_copies, or its alias --replicas; 1 when neither is given. InvalidArgument naming the
// flag given for a value other than 1 or 2, and naming both when they disagree.
absl::StatusOr<int32_t> ShardCopiesFlag() {
  const std::optional<int32_t> copies = absl::GetFlag(FLAGS_shard_copies);
  const std::optional<int32_t> alias = absl::GetFlag(FLAGS_replicas);
  if (copies.has_value() && alias.has_value() && *copies != *alias) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_copies=", *copies, " and --replicas=", *alias,
                     " disagree: --replicas is the deprecated name of --shard_copies; pass one"));
  }
  const int32_t value = copies.value_or(alias.value_or(1));
  if (value != 1 && value != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(copies.has_value() ? "--shard_copies" : "--replicas",
                     " must be 1 or 2 (a backup of every shard on another PS), not ", value));
  }
  return value;
}

}  // namespace

std::vector<FlagGroup> TrainingFlagGroups() {
  return {
      {"Training (the simulation by default)",
       {"mode", "strategy", "on_replica_loss", "ps", "shard_copies", "replicas", "workers",
        "closures_per_worker", "eval_every", "seed", "summary", "log_level", "v"}},
      {"Monitoring",
       {"dashboard_port", "dashboard_host", "dashboard_keep_serving", "metrics_file"}},
      {"Checkpoints and export",
       {"checkpoint_dir", "checkpoint_every", "checkpoint_every_seconds",
        "checkpoint_in_background", "resume", "overwrite_checkpoints", "export_dir"}},
      {"Networked cluster (--cluster_spec or the TF_CONFIG environment variable)",
       {"cluster_spec", "role", "task", "min_workers", "worker_wait_s", "connect_timeout_s",
        "threads", "bind", "tls_cert", "tls_key", "tls_ca", "max_message_bytes"}},
      {"Fault injection", {"inject_worker_failures", "restart_delay_ms"}},
  };
}

bool IsLoopbackHost(absl::string_view host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::Status ApplyLogLevelFlags() {
  const std::string level = absl::GetFlag(FLAGS_log_level);
  const bool verbose = absl::GetFlag(FLAGS_v);
  if (verbose && !level.empty() && level != "debug") {
    return absl::InvalidArgumentError(
        absl::StrCat("-v is --log_level=debug: drop one of -v and --log_level=", level));
  }
  if (verbose) {
    SetLogLevel(LogLevel::kDebug);
  } else if (!level.empty()) {
    absl::StatusOr<LogLevel> parsed = ParseLogLevel(level);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--log_level: ", parsed.status().message()));
    }
    SetLogLevel(*parsed);
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingFlags> ReadTrainingFlags() {
  TESSERA_RETURN_IF_ERROR(ApplyLogLevelFlags());
  TrainingFlags flags;
  TESSERA_ASSIGN_OR_RETURN(const std::optional<TrainingMode> mode, ModeFlag());
  flags.mode = mode.value_or(TrainingMode::kSimulation);
  ParameterServerTrainingOptions& options = flags.parameter_servers;
  if (const std::string strategy = absl::GetFlag(FLAGS_strategy); strategy == "mirrored") {
    flags.strategy = TrainingStrategy::kMirrored;
  } else if (strategy != "ps") {
    return absl::InvalidArgumentError(
        absl::StrCat("--strategy must be ps or mirrored, not '", strategy, "'"));
  }
  if (const std::string loss = absl::GetFlag(FLAGS_on_replica_loss); loss == "continue") {
    flags.on_replica_loss = ReplicaLossPolicy::kContinue;
  } else if (loss != "restore") {
    return absl::InvalidArgumentError(
        absl::StrCat("--on_replica_loss must be restore or continue, not '", loss, "'"));
  }
  if (flags.mode == TrainingMode::kLocal && flags.strategy == TrainingStrategy::kMirrored) {
    return absl::InvalidArgumentError(
        "--strategy=mirrored trains on the workers (--mode=sim or net), not --mode=local");
  }
  options.ps = absl::GetFlag(FLAGS_ps);
  options.workers = absl::GetFlag(FLAGS_workers);
  options.closures_per_worker = absl::GetFlag(FLAGS_closures_per_worker);
  TESSERA_ASSIGN_OR_RETURN(options.shard_copies, ShardCopiesFlag());
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  options.checkpoint_every_seconds = absl::GetFlag(FLAGS_checkpoint_every_seconds);
  options.checkpoint_in_background = absl::GetFlag(FLAGS_checkpoint_in_background);
  options.resume = absl::GetFlag(FLAGS_resume);
  options.overwrite_checkpoints = absl::GetFlag(FLAGS_overwrite_checkpoints);
  options.export_dir = absl::GetFlag(FLAGS_export_dir);
  options.inject_worker_failures = absl::GetFlag(FLAGS_inject_worker_failures);
  options.restart_delay = absl::Milliseconds(absl::GetFlag(FLAGS_restart_delay_ms));
  options.seed = flags.seed = absl::GetFlag(FLAGS_seed);
  flags.summary = absl::GetFlag(FLAGS_summary);
  flags.metrics_file = absl::GetFlag(FLAGS_metrics_file);
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
  if (!(options.checkpoint_every_seconds >= 0) || std::isinf(options.checkpoint_every_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--checkpoint_every_seconds must be a number of seconds >= 0, not ",
                     options.checkpoint_every_seconds));
  }
  if (options.shard_copies == 2 && options.ps < 2 && flags.mode == TrainingMode::kSimulation) {
    return absl::InvalidArgumentError(
        "--shard_copies=2 needs --ps >= 2: a shard's backup lives on another parameter server");
  }
  if (options.shard_copies == 2 && flags.strategy == TrainingStrategy::kMirrored) {
    return absl::InvalidArgumentError(
        "--shard_copies is for parameter servers; the mirrored strategy keeps a copy on each "
        "worker");
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
  TESSERA_RETURN_IF_ERROR(ReadDashboardFlags(flags));
  const std::string spec_path = absl::GetFlag(FLAGS_cluster_spec);
  const bool role_given =
      absl::GetFlag(FLAGS_role).has_value() || absl::GetFlag(FLAGS_task).has_value();
  // --mode=sim or local runs here whatever the environment says: flags override TF_CONFIG.
  if (mode.has_value() && *mode != TrainingMode::kNetworked) {
    const char* name = *mode == TrainingMode::kLocal ? "local" : "sim";
    if (!spec_path.empty() || role_given) {
      return absl::InvalidArgumentError(absl::StrCat(
          spec_path.empty() ? "--role and --task are" : "--cluster_spec is",
          " for a networked cluster: drop --mode=", name, " (or pass --mode=net)"));
    }
    if (TfConfigFromEnvironment().has_value()) {
      Log().info("TF_CONFIG is ignored: --mode={} runs in this process", name);
    }
    return flags;
  }
  TESSERA_ASSIGN_OR_RETURN(const ClusterConfig config,
                           ResolveClusterConfig({spec_path, TfConfigFromEnvironment()}));
  if (!config.cluster.has_value()) {
    if (mode.has_value() || role_given) {
      return absl::InvalidArgumentError(absl::StrCat(
          mode.has_value() ? "--mode=net needs" : "--role and --task need",
          " a cluster: --cluster_spec=FILE or the TF_CONFIG environment variable"));
    }
    return flags;
  }
  flags.mode = TrainingMode::kNetworked;
  options.cluster = *config.cluster;
  if (options.cluster->ps.empty() && flags.strategy == TrainingStrategy::kParameterServer) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.cluster->source,
        ": no \"ps\" address: the parameter-server strategy needs one (--strategy=mirrored "
        "needs none)"));
  }
  TESSERA_RETURN_IF_ERROR(ReadRole(config, flags));
  TESSERA_RETURN_IF_ERROR(ReadNetworkedFlags(options));
  if (flags.dashboard.has_value() && flags.role == TrainingRole::kWorker) {
    return absl::InvalidArgumentError(
        "--dashboard_port is the coordinator's: a worker process serves no dashboard");
  }
  // Note [A plain-HTTP dashboard in a TLS cluster]
  // The dashboard is read-only but plain HTTP: it shows the model's shapes, its figures and the
  // nodes' addresses. A cluster that runs TLS does not want that on the network in clear, so its
  // dashboard listens on loopback only (an SSH tunnel reaches it); a cluster without TLS already
  // trusts its network, and --dashboard_host may open it there.
  if (flags.dashboard.has_value() && options.network.tls() &&
      !IsLoopbackHost(flags.dashboard->host)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--dashboard_host=", flags.dashboard->host,
        ": the dashboard is plain HTTP, and this cluster runs TLS: it listens on loopback only "
        "(reach it through an SSH tunnel)"));
  }
  if (flags.role == TrainingRole::kCoordinator) {
    // Before the program builds its data: a port another process has is reported at once.
    TESSERA_RETURN_IF_ERROR(CheckCanListen("the coordinator", options.network.bind,
                                           options.cluster->coordinator.port,
                                           CoordinatorPortAdvice(*options.cluster)));
  }
  return flags;
}

}  // namespace tessera
