#include "coordinator/ps/parameter_server_training.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cluster/base/cluster.h"
#include "cluster/network/port_check.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/monitoring/internal/progress.h"
#include "coordinator/ps/cluster_status.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/scheduling/testing.h"
#include "coordinator/serving/export.h"
#include "core/serving/exported_model.h"
#include "coordinator/training/describe_job.h"
#include "coordinator/training/distributed_evaluation.h"
#include "coordinator/training/train_step_closure.h"
#include "coordinator/training/training_steps.h"
#include "core/model/model.h"
#include "core/scheduling/closure_queue.h"
#include "tessera/optimizer.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// Tells RunObservers::on_cluster of a cluster (and coordinator) now, and that
// they are going when it goes out of scope: declared after what it names, it runs before they
// are destroyed, on every return.
class ClusterHookGuard {
 public:
  using Hook = std::function<void(Cluster*, ClusterCoordinator*)>;
  ClusterHookGuard(const Hook& hook, Cluster* cluster, ClusterCoordinator* coordinator)
      : hook_(hook) {
    if (hook_) hook_(cluster, coordinator);
  }
  ~ClusterHookGuard() {
    if (hook_) hook_(nullptr, nullptr);
  }
  ClusterHookGuard(const ClusterHookGuard&) = delete;
  ClusterHookGuard& operator=(const ClusterHookGuard&) = delete;

 private:
  const Hook& hook_;
};

// Checkpoints kept under ParameterServerTrainingOptions::checkpoint_dir.
constexpr int32_t kCheckpointsKept = 3;

absl::StatusOr<std::unique_ptr<Cluster>> StartCluster(
    const ParameterServerTrainingOptions& options, const std::string& label) {
  if (!options.cluster.has_value()) {
    return Cluster::StartInProcess({options.ps, options.workers, 0});
  }
  // The coordinator listens only once its variables exist; a port another process has is an
  // error now rather than after the PS nodes were reached and the variables created.
  TESSERA_RETURN_IF_ERROR(CheckCanListen("the coordinator", options.network.bind,
                                         options.cluster->coordinator.port,
                                         CoordinatorPortAdvice(*options.cluster)));
  std::printf("%s: connecting to %d PS (protocol version %d, %s)\n", label.c_str(), options.ps,
              kProtocolVersion, options.network.tls() ? "mutual TLS" : "plain TCP");
  return Cluster::Connect(*options.cluster, options.network, options.threads);
}

// One line for the cluster, one per variable: its shape and the PS task of each shard.
void PrintPlacement(const ParameterServerStrategy& strategy, const Cluster& cluster,
                    const ParameterServerTrainingOptions& options, const Partitioner& partitioner,
                    const std::string& label) {
  std::printf("%s: %s with %d PS and %d workers, partitioner %s\n", label.c_str(),
              cluster.networked() ? "networked cluster" : "simulation", options.ps,
              options.workers, partitioner.description().c_str());
  for (const auto& [name, variable] : strategy.variables()) {
    std::string tasks;
    for (const VariableShard& shard : variable.Variables()) {
      absl::StrAppend(&tasks, " ", shard.ps_task);
    }
    std::printf("  %-16s %-14s %lld shard(s) on ps%s\n", name.c_str(),
                variable.shape().ToString().c_str(), static_cast<long long>(variable.num_shards()),
                tasks.c_str());
  }
}

// The checkpoint the run resumes from: with options.resume, the latest of `checkpoints`
// (nullopt when there is none yet); without it, nullopt, and a fresh run begins in
// `checkpoints` (CheckpointManager::BeginFreshRun: refused over another run's checkpoints unless
// options.overwrite_checkpoints).
absl::StatusOr<std::optional<std::string>> StartingPoint(
    const ParameterServerTrainingOptions& options, std::optional<CheckpointManager>& checkpoints,
    const std::string& label) {
  if (!options.resume) {
    if (!checkpoints.has_value()) return std::nullopt;
    absl::Status fresh = checkpoints->BeginFreshRun(options.overwrite_checkpoints);
    if (absl::IsFailedPrecondition(fresh)) {
      return absl::FailedPreconditionError(absl::StrCat(
          fresh.message(), ": continue that run with --resume, choose another --checkpoint_dir, "
                           "or pass --overwrite_checkpoints to delete them first"));
    }
    TESSERA_RETURN_IF_ERROR(fresh);
    return std::nullopt;
  }
  if (!checkpoints.has_value()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint_dir");
  }
  TESSERA_ASSIGN_OR_RETURN(std::optional<std::string> latest, checkpoints->ResumeRun());
  if (!latest.has_value()) {
    std::printf("%s: no checkpoint in %s yet: starting from scratch\n", label.c_str(),
                options.checkpoint_dir.c_str());
  }
  return latest;
}

// The closure queue identity of run `run`: the same for every coordinator of the run, never 0
// (Note [Closure ids that survive a restart], core/scheduling/closure_queue.h).
uint64_t QueueIdentityOf(const RunId& run) {
  const uint64_t mixed = run.high ^ (run.low * 0x9E3779B97F4A7C15ull);
  return mixed == 0 ? 1 : mixed;
}

// The step a run continues from on the shards it re-adopted (Note [A restarted coordinator
// re-adopts its run's shards], coordinator/ps/strategy.h). The lost coordinator numbered each
// training closure by its step under `queue` (Note [Closure ids that survive a restart]), and
// every closure below the highest mark any shard holds for `queue` was resolved: applied on
// every shard. So the run continues from the step of that mark's closure, and the closures from
// there on that reached some shards already run again under their old ids: the shards that
// applied them drop them, the others apply them. Without a mark (no update under `queue`), the
// highest optimizer step among the shards.
absl::StatusOr<int64_t> AdoptedStep(const ParameterServerStrategy& strategy, Cluster& cluster,
                                    uint64_t queue) {
  const auto& variables = strategy.variables();
  const auto ours = [&variables](const std::string& shard) {
    for (const auto& [name, variable] : variables) {
      if (shard == name || absl::StartsWith(shard, absl::StrCat(name, "/part_")) ||
          absl::StartsWith(shard, absl::StrCat(name, "/worker_"))) {
        return true;
      }
    }
    return false;
  };
  int64_t step = 0;
  std::optional<int64_t> mark;
  for (const PsNodeStatus& node : QueryPsStatus(cluster, absl::Seconds(10), /*hottest_rows=*/0)) {
    if (!node.reachable) {
      return absl::UnavailableError(
          absl::StrCat("reading the re-adopted shards' step: ", node.error));
    }
    for (const ShardInfo& shard : node.stats.shards) {
      if (!ours(shard.name)) continue;
      step = std::max(step, shard.step);
      for (const auto& [id, resolved_below] : shard.ledger_marks) {
        if (id == queue) mark = std::max(mark.value_or(0), resolved_below);
      }
    }
  }
  if (mark.has_value() && *mark >= 1 && *mark < kFirstUnnumberedId) return *mark - 1;
  return step;
}

// Prints the closure statistics and records the run's parameter-server fields in `summary`.
void RecordStatistics(const ClusterCoordinator& coordinator, Cluster& cluster,
                      const ParameterServerTrainingOptions& options, const Partitioner& partitioner,
                      int64_t first_step, int64_t final_step, const std::string& label,
                      nlohmann::json& summary) {
  const ClosureStats stats = coordinator.stats();
  const WorkerPoolStatus pool = coordinator.workers();
  std::printf("%s: closures scheduled %lld, completed %lld, retried %lld, cancelled %lld; worker "
              "failures %lld, restarts %lld\n",
              label.c_str(), static_cast<long long>(stats.scheduled),
              static_cast<long long>(stats.completed), static_cast<long long>(stats.retried),
              static_cast<long long>(stats.cancelled), static_cast<long long>(pool.worker_failures),
              static_cast<long long>(pool.worker_restarts));
  summary["mode"] = cluster.networked() ? "net" : "sim";  // as --mode names them
  summary["ps"] = options.ps;
  summary["workers"] = options.workers;
  summary["closures_per_worker"] = options.closures_per_worker;
  summary["shard_copies"] = options.shard_copies;
  summary["partitioner"] = partitioner.description();
  summary["closures_scheduled"] = stats.scheduled;
  summary["closures_completed"] = stats.completed;
  summary["closures_retried"] = stats.retried;
  summary["closures_cancelled"] = stats.cancelled;
  summary["worker_failures"] = pool.worker_failures;
  summary["worker_restarts"] = pool.worker_restarts;
  summary["first_step"] = first_step;
  summary["global_step"] = final_step;
  nlohmann::json recoveries = nlohmann::json::array();
  for (const PsRecovery& r : coordinator.recoveries()) {
    recoveries.push_back({{"ps_task", r.ps_task},
                          {"node", r.node},
                          {"recovery_seconds", r.seconds},
                          {"readopted", r.readopted},
                          {"promoted", r.promoted},
                          {"checkpoint", r.checkpoint},
                          {"checkpoint_step", r.checkpoint_step},
                          {"lost_steps", r.lost_steps}});
  }
  summary["ps_recoveries"] = recoveries;
  // Each shard's optimizer step and the repeated updates it dropped (Note [Exactly-once
  // updates], core/ps/update_ledger.h): with every update applied once, a shard's step is the
  // global step, unless a PS recovery rolled it back to a checkpoint.
  nlohmann::json shards = nlohmann::json::array();
  int64_t duplicates = 0;
  nlohmann::json unreachable = nlohmann::json::array();
  for (const PsNodeStatus& node : QueryPsStatus(cluster, absl::Seconds(5), /*hottest_rows=*/0)) {
    if (!node.reachable) unreachable.push_back(node.error);
    for (const ShardInfo& shard : node.stats.shards) {
      shards.push_back({{"name", shard.name},
                        {"ps_task", node.task},
                        {"step", shard.step},
                        {"duplicate_updates", shard.duplicate_updates}});
      duplicates += shard.duplicate_updates;
    }
  }
  summary["shards"] = shards;
  summary["ps_unreachable"] = unreachable;  // why a PS's shards are missing from `shards`
  summary["duplicate_updates"] = duplicates;
}

}  // namespace

absl::StatusOr<TrainingRun> TrainOnParameterServers(const TrainingJob& job,
                                                    const ParameterServerTrainingOptions& options,
                                                    int64_t eval_every, nlohmann::json& summary,
                                                    const RunObservers& observers) {
  const std::string& label = job.name;
  if (job.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the batch size must be >= 1, got ", job.batch_size));
  }
  TESSERA_ASSIGN_OR_RETURN(Model built, Model::Create(job.model));
  auto model = std::make_shared<const Model>(std::move(built));
  TESSERA_RETURN_IF_ERROR(MakeOptimizer(job.optimizer).status());
  std::optional<CheckpointManager> checkpoints;
  if (!options.checkpoint_dir.empty()) {
    checkpoints.emplace(options.checkpoint_dir, kCheckpointsKept);
  }
  TESSERA_ASSIGN_OR_RETURN(const std::optional<std::string> resume_from,
                           StartingPoint(options, checkpoints, label));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Cluster> cluster, StartCluster(options, label));
  const ClusterHookGuard cluster_hook(observers.on_cluster, cluster.get(), nullptr);
  ParameterServerStrategy strategy(*cluster, job.partitioner, options.shard_copies);
  if (cluster->networked() && checkpoints.has_value()) {
    // Note [A restarted coordinator re-adopts its run's shards] (coordinator/ps/strategy.h): every
    // run names itself to the PS nodes; a resumed one may find its shards there.
    TESSERA_ASSIGN_OR_RETURN(const int64_t claimed, strategy.placement().ClaimShardsOfRun(
                                                        checkpoints->run_id().ToString()));
    if (claimed > 0) {
      std::printf("%s: the PS nodes still hold %lld shard(s) of this run\n", label.c_str(),
                  static_cast<long long>(claimed));
    }
  }
  TESSERA_ASSIGN_OR_RETURN(
      auto vars,
      strategy.CreateModelVariables(model, job.optimizer,
                                    resume_from.has_value()
                                        ? ParameterServerStrategy::InitialValues::kRestoredNext
                                        : ParameterServerStrategy::InitialValues::kInitialized));
  PrintPlacement(strategy, *cluster, options, job.partitioner, label);
  auto registry = std::make_shared<FunctionRegistry>();
  TESSERA_RETURN_IF_ERROR(
      RegisterTrainStep(*registry, vars, job.train, job.batch_size, options.seed));
  TESSERA_RETURN_IF_ERROR(RegisterEvalStep(*registry, vars, job.test));

  int64_t first_step = 0;
  summary["readopted_shards"] = strategy.placement().adopted_shards();
  if (strategy.placement().adopted_shards() > 0) {
    TESSERA_ASSIGN_OR_RETURN(
        first_step, AdoptedStep(strategy, *cluster, QueueIdentityOf(checkpoints->run_id())));
    std::printf(
        "%s: re-adopted the %lld live shard(s) of this run: resumed at step %lld, "
        "nothing read from a checkpoint\n",
        label.c_str(), static_cast<long long>(strategy.placement().adopted_shards()),
        static_cast<long long>(first_step));
  } else if (resume_from.has_value()) {
    const double restore_start = internal::MonotonicSeconds();
    TESSERA_ASSIGN_OR_RETURN(first_step, RestoreCheckpoint(strategy, *resume_from));
    summary["restore_seconds"] = internal::MonotonicSeconds() - restore_start;
    std::printf("%s: resumed from %s at step %lld\n", label.c_str(), resume_from->c_str(),
                static_cast<long long>(first_step));
  }

  CoordinatorOptions coordinator_options;
  coordinator_options.closures_per_worker = options.closures_per_worker;
  CoordinatorRun coordinator_run;
  coordinator_run.first_step = first_step;
  coordinator_run.job = DescribeJob(job, options.seed);
  if (cluster->networked() && checkpoints.has_value()) {
    coordinator_run.recovery_checkpoints = options.checkpoint_dir;
    coordinator_run.recovery_run = checkpoints->run_id();
    coordinator_run.queue_identity = QueueIdentityOf(checkpoints->run_id());
  }
  TESSERA_ASSIGN_OR_RETURN(auto coordinator,
                           ClusterCoordinator::Create(strategy, registry, coordinator_options,
                                                      std::move(coordinator_run)));
  const ClusterHookGuard coordinator_hook(observers.on_cluster, cluster.get(), coordinator.get());
  if (cluster->networked()) {
    std::printf("%s: waiting for %d of %d workers on port %d\n", label.c_str(),
                options.min_workers, options.workers, coordinator->port());
    std::fflush(stdout);
    TESSERA_RETURN_IF_ERROR(coordinator->WaitForWorkers(options.min_workers, options.worker_wait));
  }
  if (options.inject_worker_failures > 0) {
    ClusterCoordinatorTesting::InjectWorkerFailures(*coordinator, options.inject_worker_failures,
                                                    job.steps, options.seed,
                                                    options.restart_delay);
  }

  const int64_t test_examples = job.test.size();
  StepCadence cadence;
  cadence.pass_steps = BatchesPerPass(job.train.size(), job.batch_size);
  if (checkpoints.has_value()) {
    cadence.checkpoint_every = options.checkpoint_every;
    cadence.checkpoint_every_seconds = options.checkpoint_every_seconds;
    // The shards write while training goes on once `on_cut` has run (Note [Checkpoints without
    // pausing], coordinator/checkpoint/save_restore.cc); in the foreground the cut is the end.
    cadence.checkpoint = [&](int64_t step, std::function<void()> on_cut) {
      if (!options.checkpoint_in_background) on_cut = nullptr;
      return checkpoints->Save(strategy, step, std::move(on_cut));
    };
  }
  if (test_examples > 0) {
    cadence.eval_every = eval_every;
    cadence.evaluate = [&](int64_t step) {
      return EvaluateOnWorkers(*coordinator, *model, test_examples, step);
    };
  }
  TESSERA_ASSIGN_OR_RETURN(
      TrainingRun run,
      RunTrainingSteps(*coordinator, first_step, job.steps, label, cadence,
                       observers.monitor.get()));
  const int64_t final_step = std::max(first_step, job.steps);
  if (checkpoints.has_value()) {
    const double save_start = internal::MonotonicSeconds();
    TESSERA_ASSIGN_OR_RETURN(const std::string dir, checkpoints->Save(strategy, final_step));
    const double save_seconds = internal::MonotonicSeconds() - save_start;
    summary["checkpoint_seconds"] = save_seconds;
    if (observers.monitor != nullptr) {
      observers.monitor->RecordCheckpoint(final_step, save_seconds, dir);
    }
    std::printf("%s: checkpoint %s (%.2f s)\n", label.c_str(), dir.c_str(), save_seconds);
  }
  if (!options.export_dir.empty()) {
    TESSERA_RETURN_IF_ERROR(ExportModel(strategy, *model, options.export_dir, final_step,
                                        Env::Default(), TextInputs(job.model, job.train)));
    std::printf("%s: exported the model to %s\n", label.c_str(), options.export_dir.c_str());
  }
  if (test_examples > 0) {
    TESSERA_ASSIGN_OR_RETURN(
        PendingEvaluation eval,
        PendingEvaluation::Schedule(*coordinator, *model, test_examples, final_step));
    TESSERA_ASSIGN_OR_RETURN(run.eval, eval.Result());
  }
  RecordStatistics(*coordinator, *cluster, options, job.partitioner, first_step, final_step,
                   label, summary);
  return run;
}

}  // namespace tessera
