#include "examples/internal/driver.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <fstream>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "coordinator/checkpoint.h"
#include "coordinator/internal/await.h"
#include "cluster/worker_node.h"
#include "core/status.h"

ABSL_FLAG(std::string, mode, "sim", "sim (parameter servers in one process) or local (baseline)");
ABSL_FLAG(int32_t, ps, 2, "parameter-server tasks");
ABSL_FLAG(int32_t, workers, 2, "worker tasks");
ABSL_FLAG(int32_t, closures_per_worker, 1,
          "closures each worker runs at once (1: TF's behaviour; 2 overlaps communication with "
          "compute)");
ABSL_FLAG(std::string, checkpoint_dir, "", "save checkpoints under this directory (sim mode)");
ABSL_FLAG(int64_t, checkpoint_every, 0, "steps between checkpoints (0: only at the end)");
ABSL_FLAG(bool, resume, false,
          "continue from the latest checkpoint in --checkpoint_dir (any --ps or --partitioner)");
ABSL_FLAG(std::string, export_dir, "", "export the trained model here for serving (sim mode)");
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

namespace tessera::driver {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

absl::StatusOr<DriverFlags> ReadDriverFlags() {
  DriverFlags flags;
  flags.mode = absl::GetFlag(FLAGS_mode);
  if (flags.mode != "sim" && flags.mode != "local") {
    return absl::InvalidArgumentError(
        absl::StrCat("--mode must be sim or local, not ", flags.mode));
  }
  SimOptions& sim = flags.sim;
  sim.ps = absl::GetFlag(FLAGS_ps);
  sim.workers = absl::GetFlag(FLAGS_workers);
  sim.closures_per_worker = absl::GetFlag(FLAGS_closures_per_worker);
  sim.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  sim.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  sim.resume = absl::GetFlag(FLAGS_resume);
  sim.export_dir = absl::GetFlag(FLAGS_export_dir);
  sim.inject_worker_failures = absl::GetFlag(FLAGS_inject_worker_failures);
  sim.restart_delay = absl::Milliseconds(absl::GetFlag(FLAGS_restart_delay_ms));
  sim.seed = flags.seed = absl::GetFlag(FLAGS_seed);
  flags.summary = absl::GetFlag(FLAGS_summary);
  if (flags.mode == "local" &&
      (!sim.checkpoint_dir.empty() || sim.resume || !sim.export_dir.empty())) {
    return absl::InvalidArgumentError(
        "--checkpoint_dir, --resume and --export_dir work on parameter servers: use --mode=sim");
  }
  flags.role = absl::GetFlag(FLAGS_role);
  flags.task = absl::GetFlag(FLAGS_task);
  const std::string spec_path = absl::GetFlag(FLAGS_cluster_spec);
  if (spec_path.empty()) return flags;
  if (flags.mode == "local") {
    return absl::InvalidArgumentError("--cluster_spec runs on parameter servers: drop --mode=local");
  }
  if (flags.role != "coordinator" && flags.role != "worker") {
    return absl::InvalidArgumentError(
        absl::StrCat("--role must be coordinator or worker, not ", flags.role));
  }
  flags.mode = "net";
  ASSIGN_OR_RETURN(sim.cluster, ReadClusterSpec(spec_path));
  sim.ps = static_cast<int32_t>(sim.cluster->ps.size());
  sim.workers = static_cast<int32_t>(sim.cluster->workers.size());
  sim.min_workers = absl::GetFlag(FLAGS_min_workers);
  sim.worker_wait = absl::Seconds(absl::GetFlag(FLAGS_worker_wait_s));
  sim.network.connect_timeout = absl::Seconds(absl::GetFlag(FLAGS_connect_timeout_s));
  sim.threads = absl::GetFlag(FLAGS_threads);
  if (sim.threads < 0) return absl::InvalidArgumentError("--threads must be >= 0");
  sim.network.bind = absl::GetFlag(FLAGS_bind);
  sim.network.tls_cert = absl::GetFlag(FLAGS_tls_cert);
  sim.network.tls_key = absl::GetFlag(FLAGS_tls_key);
  sim.network.tls_ca = absl::GetFlag(FLAGS_tls_ca);
  RETURN_IF_ERROR(ValidateNetworkOptions(sim.network));
  if (sim.min_workers < 1 || sim.min_workers > sim.workers) {
    return absl::InvalidArgumentError(absl::StrCat("--min_workers must be in 1..", sim.workers,
                                                   " (the spec's workers)"));
  }
  return flags;
}

absl::Status RegisterTraining(FunctionRegistry& registry,
                              std::shared_ptr<const ModelVariables> vars, const Dataset& train,
                              int64_t batch_size, uint64_t seed) {
  RETURN_IF_ERROR(registry.AddResource<BatchStream>(
      kTrainBatches, [train, batch_size, seed](const WorkerInfo&) {
        return BatchStream::Create(train, batch_size, /*shuffle=*/true, seed);
      }));
  return registry.AddReplicaFunction(
      kTrainStep, [vars](ReplicaContext& ctx, const ClosureValues& args, Done<ClosureValues> done) {
        if (args.scalars.size() != 1) {
          return done(absl::InvalidArgumentError("train_step takes one argument: a batch index"));
        }
        absl::StatusOr<BatchStream*> batches = ctx.Resource<BatchStream>(kTrainBatches);
        if (!batches.ok()) return done(batches.status());
        absl::StatusOr<Batch> batch = (*batches)->Get(static_cast<int64_t>(args.scalars[0]));
        if (!batch.ok()) return done(batch.status());
        TrainStepAsync(ctx.self(), vars, *std::move(batch),
                       [done](absl::StatusOr<StepOutcome> outcome) {
                         if (!outcome.ok()) return done(outcome.status());
                         ClosureValues out;
                         out.scalars = {outcome->loss, static_cast<double>(outcome->examples)};
                         done(std::move(out));
                       });
      });
}

absl::StatusOr<TrainingRun> RunTrainingSteps(
    ClusterCoordinator& coordinator, int64_t first_step, int64_t steps, int64_t batch_size,
    const std::string& label, int64_t checkpoint_every,
    const std::function<absl::Status(int64_t)>& checkpoint) {
  Progress progress(label, steps, batch_size);
  TrainingRun run;
  const double start = Now();
  std::deque<RemoteValue> pending;
  const int64_t tail = std::max<int64_t>(1, steps / 20);
  double recent_loss = 0, tail_loss = 0;
  int64_t done_steps = first_step, tail_examples = 0;
  // Takes finished values off the front of `pending` (all of them when `drain`).
  auto collect = [&](bool drain) -> absl::Status {
    while (!pending.empty() &&
           (drain || pending.front().state() == RemoteValueState::kReady ||
            pending.front().state() == RemoteValueState::kFailed)) {
      ASSIGN_OR_RETURN(ClosureValues v, pending.front().Fetch());
      pending.pop_front();
      const double loss = v.scalars.at(0);
      const int64_t examples = static_cast<int64_t>(v.scalars.at(1));
      run.examples += examples;
      recent_loss = recent_loss == 0 ? loss : 0.98 * recent_loss + 0.02 * loss;
      if (++done_steps > steps - tail) {
        tail_loss += loss * examples;
        tail_examples += examples;
      }
      progress.Update(done_steps, recent_loss);
    }
    return absl::OkStatus();
  };
  for (int64_t step = first_step; step < steps; ++step) {
    ClosureValues args;
    args.scalars = {static_cast<double>(step)};  // the batch index
    ASSIGN_OR_RETURN(RemoteValue value, coordinator.Schedule(kTrainStep, std::move(args)));
    pending.push_back(std::move(value));
    RETURN_IF_ERROR(collect(false));
    if (checkpoint_every > 0 && checkpoint && (step + 1) % checkpoint_every == 0 &&
        step + 1 < steps) {
      RETURN_IF_ERROR(coordinator.Join());
      RETURN_IF_ERROR(collect(true));
      RETURN_IF_ERROR(checkpoint(step + 1));
    }
  }
  RETURN_IF_ERROR(coordinator.Join());
  RETURN_IF_ERROR(collect(true));
  run.steps = done_steps - first_step;
  run.wall_seconds = Now() - start;
  run.final_loss = tail_examples > 0 ? tail_loss / tail_examples : 0;
  progress.Finish(done_steps, recent_loss);
  return run;
}

absl::StatusOr<TrainingRun> TrainInSimulation(LocalTrainer& trainer, const Dataset& train,
                                              int64_t steps, int64_t batch_size,
                                              const SimOptions& options, const std::string& label,
                                              nlohmann::json& summary) {
  std::unique_ptr<Cluster> cluster;
  if (options.cluster.has_value()) {
    std::printf("%s: connecting to %d PS (protocol version %d, %s)\n", label.c_str(), options.ps,
                kProtocolVersion, options.network.tls() ? "mutual TLS" : "plain TCP");
    ASSIGN_OR_RETURN(cluster, Cluster::Connect(*options.cluster, options.network, options.threads));
  } else {
    ASSIGN_OR_RETURN(cluster, Cluster::StartInProcess({options.ps, options.workers, 0}));
  }
  ParameterServerStrategy strategy(*cluster, options.partitioner);
  auto model = std::make_shared<const Model>(trainer.model());
  ASSIGN_OR_RETURN(auto vars, strategy.CreateModelVariables(model, trainer.optimizer().spec()));
  std::printf("%s: %s with %d PS and %d workers, partitioner %s\n", label.c_str(),
              cluster->networked() ? "networked cluster" : "simulation", options.ps,
              options.workers, options.partitioner.description().c_str());
  for (const auto& [name, variable] : strategy.variables()) {
    std::string tasks;
    for (const VariableShard& shard : variable.Variables()) absl::StrAppend(&tasks, " ", shard.ps_task);
    std::printf("  %-16s %-14s %lld shard(s) on ps%s\n", name.c_str(),
                variable.shape().ToString().c_str(), static_cast<long long>(variable.num_shards()),
                tasks.c_str());
  }
  auto registry = std::make_shared<FunctionRegistry>();
  RETURN_IF_ERROR(RegisterTraining(*registry, vars, train, batch_size, options.seed));
  int64_t first_step = 0;
  std::optional<CheckpointManager> checkpoints;
  if (!options.checkpoint_dir.empty()) checkpoints.emplace(options.checkpoint_dir, 3);
  if (options.resume) {
    if (!checkpoints.has_value()) {
      return absl::InvalidArgumentError("--resume needs --checkpoint_dir");
    }
    if (std::optional<std::string> latest = checkpoints->Latest()) {
      ASSIGN_OR_RETURN(first_step, RestoreCheckpoint(strategy, *latest));
      std::printf("%s: resumed from %s at step %lld\n", label.c_str(), latest->c_str(),
                  static_cast<long long>(first_step));
    } else {
      std::printf("%s: no checkpoint in %s yet: starting from scratch\n", label.c_str(),
                  options.checkpoint_dir.c_str());
    }
  }
  CoordinatorOptions coordinator_options;
  coordinator_options.closures_per_worker = options.closures_per_worker;
  coordinator_options.first_step = first_step;
  if (cluster->networked()) coordinator_options.recovery_checkpoints = options.checkpoint_dir;
  ASSIGN_OR_RETURN(auto coordinator,
                   ClusterCoordinator::Create(strategy, registry, coordinator_options));
  if (cluster->networked()) {
    std::printf("%s: waiting for %d of %d workers on port %d\n", label.c_str(),
                options.min_workers, options.workers, coordinator->port());
    std::fflush(stdout);
    RETURN_IF_ERROR(coordinator->WaitForWorkers(options.min_workers, options.worker_wait));
  }
  if (options.inject_worker_failures > 0) {
    coordinator->InjectWorkerFailures(options.inject_worker_failures, steps, options.seed,
                                      options.restart_delay);
  }
  auto save = [&](int64_t step) -> absl::Status {
    absl::StatusOr<std::string> saved = checkpoints->Save(strategy, step);
    // Networked: a PS lost during the save is being restored; save again once it is back.
    for (int attempt = 1; attempt < 4 && absl::IsUnavailable(saved.status()) &&
                          !coordinator_options.recovery_checkpoints.empty();
         ++attempt) {
      std::fprintf(stderr, "%s: checkpoint at step %lld failed (%s); retrying after the "
                   "recovery\n", label.c_str(), static_cast<long long>(step),
                   std::string(saved.status().message()).c_str());
      std::this_thread::sleep_for(std::chrono::seconds(1));
      RETURN_IF_ERROR(coordinator->Join());
      saved = checkpoints->Save(strategy, step);
    }
    ASSIGN_OR_RETURN(std::string dir, std::move(saved));
    if (!Progress::OnTerminal()) std::fprintf(stderr, "%s: saved %s\n", label.c_str(), dir.c_str());
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(TrainingRun run,
                   RunTrainingSteps(*coordinator, first_step, steps, batch_size, label,
                                    checkpoints.has_value() ? options.checkpoint_every : 0, save));
  const int64_t final_step = std::max(first_step, steps);
  if (checkpoints.has_value()) {
    ASSIGN_OR_RETURN(std::string dir, checkpoints->Save(strategy, final_step));
    std::printf("%s: checkpoint %s\n", label.c_str(), dir.c_str());
  }
  if (!options.export_dir.empty()) {
    RETURN_IF_ERROR(ExportModel(strategy, *model, options.export_dir, final_step));
    std::printf("%s: exported the model to %s\n", label.c_str(), options.export_dir.c_str());
  }
  RETURN_IF_ERROR(PullVariables(strategy, trainer));
  const ClosureStats stats = coordinator->stats();
  const WorkerPoolStatus pool = coordinator->workers();
  std::printf("%s: closures scheduled %lld, completed %lld, retried %lld, cancelled %lld; worker "
              "failures %lld, restarts %lld\n",
              label.c_str(), static_cast<long long>(stats.scheduled),
              static_cast<long long>(stats.completed), static_cast<long long>(stats.retried),
              static_cast<long long>(stats.cancelled), static_cast<long long>(pool.worker_failures),
              static_cast<long long>(pool.worker_restarts));
  summary["mode"] = cluster->networked() ? "net" : "sim";
  summary["ps"] = options.ps;
  summary["workers"] = options.workers;
  summary["closures_per_worker"] = options.closures_per_worker;
  summary["partitioner"] = options.partitioner.description();
  summary["closures_scheduled"] = stats.scheduled;
  summary["closures_completed"] = stats.completed;
  summary["closures_retried"] = stats.retried;
  summary["closures_cancelled"] = stats.cancelled;
  summary["worker_failures"] = pool.worker_failures;
  summary["worker_restarts"] = pool.worker_restarts;
  summary["first_step"] = first_step;
  summary["global_step"] = final_step;
  nlohmann::json recoveries = nlohmann::json::array();
  for (const PsRecovery& r : coordinator->recoveries()) {
    recoveries.push_back({{"ps_task", r.ps_task},
                          {"node", r.node},
                          {"recovery_seconds", r.seconds},
                          {"checkpoint", r.checkpoint},
                          {"checkpoint_step", r.checkpoint_step},
                          {"lost_steps", r.lost_steps}});
  }
  summary["ps_recoveries"] = recoveries;
  return run;
}

absl::Status ServeAsWorker(const LocalTrainer& trainer, const Dataset& train, int64_t batch_size,
                           const SimOptions& options, int32_t task) {
  if (!options.cluster.has_value()) {
    return absl::InvalidArgumentError("--role=worker needs --cluster_spec");
  }
  auto model = std::make_shared<const Model>(trainer.model());
  WorkerNodeOptions node{*options.cluster, options.network, task, options.threads};
  std::printf("worker %d: connecting to %d PS and the coordinator at %s\n", task, options.ps,
              options.cluster->coordinator.ToString().c_str());
  std::fflush(stdout);
  return RunWorkerNode(node, [&](const VariableDirectory& directory)
                                 -> absl::StatusOr<std::shared_ptr<const FunctionRegistry>> {
    auto vars = std::make_shared<ModelVariables>();
    vars->model = model;
    std::map<std::string, VariableHandle> handles = HandlesByName(directory);
    for (const ParamSpec& param : model->spec().params) {
      auto it = handles.find(param.name);
      if (it == handles.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the coordinator has no variable ", param.name,
            ": is it running the same driver with the same model flags?"));
      }
      vars->by_param.emplace(param.name, it->second);
    }
    vars->ps_nodes = directory.ps_nodes;  // a step's calls travel as one request per PS node
    RETURN_IF_ERROR(vars->Validate());
    auto registry = std::make_shared<FunctionRegistry>();
    RETURN_IF_ERROR(RegisterTraining(*registry, std::move(vars), train, batch_size, options.seed));
    return std::shared_ptr<const FunctionRegistry>(std::move(registry));
  });
}

absl::StatusOr<TrainingRun> TrainLocally(LocalTrainer& trainer, const Dataset& train,
                                         int64_t steps, int64_t batch_size, uint64_t seed,
                                         const std::string& label, nlohmann::json& summary) {
  ASSIGN_OR_RETURN(BatchStream batches, BatchStream::Create(train, batch_size, true, seed));
  std::printf("%s: local trainer (one thread, no actors)\n", label.c_str());
  Progress progress(label, steps, batch_size);
  TrainingRun run;
  const double start = Now();
  double recent = 0, tail_loss = 0;
  int64_t tail_examples = 0;
  const int64_t tail = std::max<int64_t>(1, steps / 20);
  for (int64_t s = 0; s < steps; ++s) {
    ASSIGN_OR_RETURN(const Batch batch, batches.Get(s));
    ASSIGN_OR_RETURN(const float loss, trainer.TrainStep(batch));
    recent = recent == 0 ? loss : 0.98 * recent + 0.02 * loss;
    run.examples += batch.size;
    if (s >= steps - tail) {
      tail_loss += static_cast<double>(loss) * batch.size;
      tail_examples += batch.size;
    }
    progress.Update(s + 1, recent);
  }
  run.steps = steps;
  run.wall_seconds = Now() - start;
  run.final_loss = tail_examples > 0 ? tail_loss / tail_examples : 0;
  progress.Finish(steps, recent);
  summary["mode"] = "local";
  summary["ps"] = 0;
  summary["workers"] = 1;
  for (const char* key : {"closures_scheduled", "closures_completed", "closures_retried",
                          "closures_cancelled", "worker_failures", "worker_restarts"}) {
    summary[key] = 0;
  }
  return run;
}

absl::StatusOr<TrainingRun> Train(LocalTrainer& trainer, const Dataset& train, int64_t steps,
                                  int64_t batch_size, const Partitioner& partitioner,
                                  const DriverFlags& flags, const std::string& label,
                                  nlohmann::json& summary) {
  TrainingRun run;
  if (flags.mode == "net" && flags.role == "worker") {
    RETURN_IF_ERROR(ServeAsWorker(trainer, train, batch_size, flags.sim, flags.task));
    run.worker_role = true;
    return run;
  }
  if (flags.mode == "local") {
    ASSIGN_OR_RETURN(run,
                     TrainLocally(trainer, train, steps, batch_size, flags.seed, label, summary));
  } else {
    SimOptions sim = flags.sim;
    sim.partitioner = partitioner;
    ASSIGN_OR_RETURN(run, TrainInSimulation(trainer, train, steps, batch_size, sim, label,
                                            summary));
  }
  const double eps = run.examples / std::max(run.wall_seconds, 1e-9);
  std::printf("%s: %lld examples in %.2f s (%.0f examples/s); final train loss %.4f\n",
              label.c_str(), static_cast<long long>(run.examples), run.wall_seconds, eps,
              run.final_loss);
  summary["workload"] = label;
  summary["steps"] = run.steps;
  summary["examples"] = run.examples;
  summary["wall_seconds"] = run.wall_seconds;
  summary["examples_per_sec"] = eps;
  summary["final_loss"] = run.final_loss;
  return run;
}

absl::Status PullVariables(const ParameterServerStrategy& strategy, LocalTrainer& trainer) {
  for (const ParamSpec& param : trainer.model().spec().params) {
    auto it = strategy.variables().find(param.name);
    if (it == strategy.variables().end()) {
      return absl::NotFoundError(absl::StrCat("no variable for parameter ", param.name));
    }
    ASSIGN_OR_RETURN(Tensor value, it->second.Read());
    RETURN_IF_ERROR(trainer.SetVariable(param.name, value));
  }
  return absl::OkStatus();
}

bool Progress::OnTerminal() { return isatty(STDERR_FILENO) != 0; }

Progress::Progress(std::string label, int64_t total_steps, int64_t batch_size)
    : label_(std::move(label)),
      total_steps_(total_steps),
      batch_size_(batch_size),
      terminal_(OnTerminal()),
      start_(Now()) {}

void Progress::Update(int64_t steps_done, double recent_loss) {
  const double now = Now();
  const double every = terminal_ ? 0.2 : 5.0;
  if (last_print_ >= 0 && now - last_print_ < every) return;
  last_print_ = now;
  Print(steps_done, recent_loss, false);
}

void Progress::Finish(int64_t steps_done, double recent_loss) {
  Print(steps_done, recent_loss, true);
}

void Progress::Print(int64_t steps_done, double recent_loss, bool final) {
  const double elapsed = std::max(Now() - start_, 1e-9);
  const double rate = steps_done * batch_size_ / elapsed;
  const double eta = steps_done > 0 ? elapsed * (total_steps_ - steps_done) / steps_done : 0;
  const std::string line = absl::StrFormat(
      "%s: step %lld/%lld  %.0f examples/s  loss %.4f  %s", label_, steps_done, total_steps_, rate,
      recent_loss,
      final ? absl::StrFormat("done in %.1f s", elapsed) : absl::StrFormat("ETA %.0f s", eta));
  if (terminal_) {
    std::fprintf(stderr, "\r%-100s%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream out(path);
  out << summary.dump(2) << "\n";
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write the summary to ", path));
  return absl::OkStatus();
}

}  // namespace tessera::driver
