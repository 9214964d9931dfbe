#include "coordinator/mirrored/mirrored_training.h"

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cluster/base/cluster.h"
#include "cluster/network/network.h"
#include "coordinator/checkpoint/checkpoint_manager.h"
#include "coordinator/mirrored/mirrored_strategy.h"
#include "coordinator/monitoring/internal/progress.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/training/describe_job.h"
#include "coordinator/training/distributed_evaluation.h"
#include "coordinator/training/training_steps.h"
#include "core/base/env.h"
#include "core/base/logging.h"
#include "core/base/process.h"
#include "core/base/status.h"
#include "core/model/model.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"

namespace tessera {
namespace {

constexpr int32_t kCheckpointsKept = 3;
// Steps the replicas run back to back per request (between two, the driver reports progress).
constexpr int64_t kStepsPerRequest = 50;

MirroredReplicaOptions ReplicaOptions(const TrainingJob& job, uint64_t seed) {
  MirroredReplicaOptions options;
  options.model = job.model;
  options.optimizer = job.optimizer;
  options.train = job.train;
  options.test = job.test;
  options.seed = seed;
  options.job = DescribeJob(job, seed);
  return options;
}

// The run's actor system: this process's own (the simulation), or a networked node's.
absl::StatusOr<std::unique_ptr<caf::actor_system>> StartSystem(
    caf::actor_system_config& config, const ParameterServerTrainingOptions& options) {
  ConfigureActorSystem(config, options.threads);
  if (options.cluster.has_value())
    TESSERA_RETURN_IF_ERROR(ConfigureNetwork(config, options.network));
  return std::make_unique<caf::actor_system>(config);
}

// Replica `rank`: spawned in this process, or the one worker `rank` publishes.
absl::StatusOr<ReplicaHandle> StartReplica(caf::actor_system& system, const TrainingJob& job,
                                           const ParameterServerTrainingOptions& options,
                                           int32_t rank) {
  if (!options.cluster.has_value()) {
    MirroredReplicaOptions replica = ReplicaOptions(job, options.seed);
    replica.cpu = InProcessReplicaCpu(rank);  // Note [Replicas on cores of their own]
    TESSERA_ASSIGN_OR_RETURN(mirrored_replica_actor actor,
                             SpawnMirroredReplica(system, std::move(replica)));
    return ReplicaHandle{actor, ""};
  }
  const NodeAddress& address = options.cluster->workers[rank];
  TESSERA_ASSIGN_OR_RETURN(mirrored_replica_actor replica,
                           ConnectToReplica(system, address, rank, options.network));
  return ReplicaHandle{replica, address.ToString()};
}

// A checkpoint of `step` (every parameter and variable, from replica 0).
absl::StatusOr<std::string> SaveCheckpoint(CheckpointManager& checkpoints,
                                           MirroredStrategy& strategy, const TrainingJob& job,
                                           int64_t step) {
  return checkpoints.Save(step, [&](const std::string& dir) {
    return strategy.Save(dir, {checkpoints.run_id(), step}, job.model, job.optimizer);
  });
}

// The steps at which fault injection kills a replica: `count` of them spread over the run.
std::vector<int64_t> PlannedLosses(int32_t count, int64_t first, int64_t last) {
  std::vector<int64_t> steps;
  for (int32_t i = 1; i <= count; ++i) {
    steps.push_back(first + (last - first) * i / (count + 1));
  }
  return steps;
}

}  // namespace

absl::StatusOr<TrainingRun> TrainMirrored(const TrainingJob& job,
                                          const ParameterServerTrainingOptions& options,
                                          ReplicaLossPolicy on_loss, int64_t eval_every,
                                          nlohmann::json& summary) {
  const std::string& label = job.name;
  TESSERA_ASSIGN_OR_RETURN(const Model model, Model::Create(job.model));
  TESSERA_RETURN_IF_ERROR(MakeOptimizer(job.optimizer).status());
  const int32_t replicas = options.cluster.has_value()
                               ? static_cast<int32_t>(options.cluster->workers.size())
                               : options.workers;
  if (replicas < 1) return absl::InvalidArgumentError("the mirrored strategy needs a replica");
  std::optional<CheckpointManager> checkpoints;
  if (!options.checkpoint_dir.empty())
    checkpoints.emplace(options.checkpoint_dir, kCheckpointsKept);
  std::optional<std::string> resume_from;
  if (options.resume) {
    if (!checkpoints.has_value())
      return absl::InvalidArgumentError("--resume needs --checkpoint_dir");
    TESSERA_ASSIGN_OR_RETURN(resume_from, checkpoints->ResumeRun());
  } else if (checkpoints.has_value()) {
    absl::Status fresh = checkpoints->BeginFreshRun(options.overwrite_checkpoints);
    if (absl::IsFailedPrecondition(fresh)) {
      return absl::FailedPreconditionError(
          absl::StrCat(fresh.message(),
                       ": continue that run with --resume, choose another --checkpoint_dir, "
                       "or pass --overwrite_checkpoints to delete them first"));
    }
    TESSERA_RETURN_IF_ERROR(fresh);
  }

  caf::actor_system_config config;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<caf::actor_system> system, StartSystem(config, options));
  std::vector<ReplicaHandle> handles;
  for (int32_t r = 0; r < replicas; ++r) {
    if (options.cluster.has_value()) {
      std::printf("%s: connecting to replica %d at %s\n", label.c_str(), r,
                  options.cluster->workers[r].ToString().c_str());
      std::fflush(stdout);
    }
    TESSERA_ASSIGN_OR_RETURN(ReplicaHandle handle, StartReplica(*system, job, options, r));
    handles.push_back(std::move(handle));
  }
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<MirroredStrategy> strategy,
                           MirroredStrategy::Create(*system, std::move(handles), job.batch_size,
                                                    DescribeJob(job, options.seed)));
  // As many examples as the same flags train on parameter servers: a global batch is `replicas`
  // batches.
  const int64_t total_steps = (job.steps + replicas - 1) / replicas;
  std::printf(
      "%s: mirrored strategy, %d replicas (%s), global batch %lld = %d x %lld, %lld steps\n",
      label.c_str(), replicas, options.cluster.has_value() ? "networked" : "simulation",
      static_cast<long long>(strategy->global_batch_size()), replicas,
      static_cast<long long>(job.batch_size), static_cast<long long>(total_steps));

  int64_t first_step = 0;
  if (resume_from.has_value()) {
    TESSERA_ASSIGN_OR_RETURN(first_step, strategy->Restore(*resume_from, job.model, job.optimizer));
    std::printf("%s: resumed from %s at step %lld\n", label.c_str(), resume_from->c_str(),
                static_cast<long long>(first_step));
  } else if (checkpoints.has_value() && on_loss == ReplicaLossPolicy::kRestore) {
    // A lost replica restores everyone from the latest checkpoint: there must always be one.
    TESSERA_RETURN_IF_ERROR(SaveCheckpoint(*checkpoints, *strategy, job, 0).status());
  }

  TrainingMonitor* monitor = options.monitor.get();
  internal::Progress progress(label, first_step, total_steps);
  TrainingRun run;
  run.startup_seconds = SecondsSinceProcessStart().value_or(0);
  const double start = internal::MonotonicSeconds();
  CheckpointClock checkpoint_clock(options.checkpoint_every, options.checkpoint_every_seconds,
                                   total_steps);
  if (monitor != nullptr) monitor->BeginTraining(first_step, total_steps);
  std::vector<int64_t> planned;
  if (!options.cluster.has_value() && options.inject_worker_failures > 0) {
    planned = PlannedLosses(options.inject_worker_failures, first_step, total_steps);
  }
  std::mt19937_64 victims(options.seed ^ 0x5eed);
  nlohmann::json losses = nlohmann::json::array();
  int64_t replicas_lost = 0;
  double tail_loss = 0;
  int64_t tail_examples = 0;
  const int64_t tail = std::max<int64_t>(1, (total_steps - first_step) / 20);
  // The optimizer steps the replicas have applied (Note [A lost replica]: what a resync agrees
  // on).
  TESSERA_ASSIGN_OR_RETURN(const PerReplica<int64_t> applied_at_start,
                           strategy->AppliedSteps(job.model));
  int64_t applied = applied_at_start.values[0];
  int64_t step = first_step;
  // Note [A lost replica]: after a failure of a request (a step, a checkpoint, a validation),
  // the lost replicas, if any, are dropped or replaced and `step` is where training goes on.
  // Any other failure is the run's.
  auto recover = [&](const absl::Status& failure) -> absl::Status {
    if (!absl::IsUnavailable(failure)) return failure;
    const std::vector<int32_t> lost = strategy->LostReplicas();
    if (lost.empty()) return failure;
    replicas_lost += static_cast<int64_t>(lost.size());
    const std::string which = absl::StrJoin(lost, ", ");
    nlohmann::json loss = {{"step", step}, {"replicas", lost}};
    if (on_loss == ReplicaLossPolicy::kContinue) {
      TESSERA_RETURN_IF_ERROR(strategy->Drop(lost));
      // The survivors agree on the steps the most advanced of them applied.
      TESSERA_ASSIGN_OR_RETURN(const int64_t agreed, strategy->Resync(job.model));
      const int64_t done = agreed - applied;
      applied = agreed;
      step += done;
      run.steps += done;
      progress.Note(absl::StrCat(label, ": replica ", which, " lost at step ", step + 1,
                                 ": going on with ", strategy->num_replicas_in_sync(),
                                 " replicas, global batch ", strategy->global_batch_size()));
      loss["action"] = "continued";
      loss["replicas_in_sync"] = strategy->num_replicas_in_sync();
      losses.push_back(std::move(loss));
      return absl::OkStatus();
    }
    if (!checkpoints.has_value()) {
      return absl::UnavailableError(absl::StrCat(
          "replica ", which, " was lost (", failure.message(),
          "): a synchronous step needs every replica; without --checkpoint_dir the run cannot "
          "resume (or pass --on_replica_loss=continue to go on without it)"));
    }
    const double recovery_start = internal::MonotonicSeconds();
    for (int32_t rank : lost) {
      // Networked: the worker's process is restarted by whoever runs it; wait for it.
      TESSERA_ASSIGN_OR_RETURN(ReplicaHandle back, StartReplica(*system, job, options, rank));
      TESSERA_RETURN_IF_ERROR(strategy->Replace(rank, std::move(back)));
    }
    const std::optional<std::string> latest = checkpoints->Latest();
    if (!latest.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("replica ", which, " was lost and there is no checkpoint to resume from in ",
                       checkpoints->root()));
    }
    TESSERA_ASSIGN_OR_RETURN(const int64_t restored,
                             strategy->Restore(*latest, job.model, job.optimizer));
    TESSERA_ASSIGN_OR_RETURN(const PerReplica<int64_t> now, strategy->AppliedSteps(job.model));
    applied = now.values[0];
    progress.Note(absl::StrCat(label, ": replica ", which, " lost after step ", step,
                               ": back, every replica restored from ", *latest, " (step ", restored,
                               ")"));
    loss["action"] = "restored";
    loss["checkpoint_step"] = restored;
    loss["lost_steps"] = step - restored;
    loss["recovery_seconds"] = internal::MonotonicSeconds() - recovery_start;
    losses.push_back(std::move(loss));
    step = restored;
    return absl::OkStatus();
  };
  // Training ends once every step is taken with every replica still there: a replica lost at
  // the very end (noticed by no request) is recovered from like any other.
  for (;;) {
    while (step < total_steps) {
      // A request runs steps back to back up to the next checkpoint, validation or planned loss.
      int64_t end = std::min(total_steps, step + kStepsPerRequest);
      for (int64_t every : {checkpoints.has_value() ? options.checkpoint_every : int64_t{0},
                            job.test.size() > 0 ? eval_every : int64_t{0}}) {
        if (every > 0) end = std::min(end, (step / every + 1) * every);
      }
      std::function<void()> kill;
      if (!planned.empty() && planned.front() < end) {
        // Fault injection: the replica is killed once the request is sent to every replica (with
        // it in hand, or, a short request, after it: then the next one finds it gone).
        planned.erase(planned.begin());
        const int32_t victim = static_cast<int32_t>(
            victims() % static_cast<uint64_t>(strategy->num_replicas_in_sync()));
        Log().info("{}: fault injection kills replica {} during step {}", label, victim, step + 1);
        kill = [actor = strategy->replicas()[victim].actor] {
          caf::anon_send_exit(actor, caf::exit_reason::kill);
        };
      }
      absl::StatusOr<std::vector<MirroredStrategy::StepResult>> trained =
          strategy->TrainSteps(step, end - step, std::move(kill));
      if (!trained.ok()) {
        TESSERA_RETURN_IF_ERROR(recover(trained.status()));
        continue;
      }
      for (const MirroredStrategy::StepResult& result : *trained) {
        ++step;
        ++applied;
        run.examples += result.examples;
        ++run.steps;
        if (step > total_steps - tail) {
          tail_loss += result.loss * static_cast<double>(result.examples);
          tail_examples += result.examples;
        }
        progress.Update(step, result.examples, result.loss);
        if (monitor != nullptr) monitor->RecordStep(step, result.examples, result.loss);
      }
      // Requests end at every checkpoint_every steps; the time measure is checked between them.
      if (checkpoints.has_value() && checkpoint_clock.Due(step)) {
        checkpoint_clock.Began();
        const double save_start = internal::MonotonicSeconds();
        absl::StatusOr<std::string> dir = SaveCheckpoint(*checkpoints, *strategy, job, step);
        if (!dir.ok()) {
          TESSERA_RETURN_IF_ERROR(recover(dir.status()));
          continue;
        }
        run.checkpoint_pause_seconds += internal::MonotonicSeconds() - save_start;
        if (monitor != nullptr) {
          monitor->RecordCheckpoint(step, internal::MonotonicSeconds() - save_start, *dir);
        }
      }
      if (eval_every > 0 && step % eval_every == 0 && step < total_steps && job.test.size() > 0) {
        absl::StatusOr<EvalResult> eval = strategy->Evaluate(model, job.test.size());
        if (!eval.ok()) {
          TESSERA_RETURN_IF_ERROR(recover(eval.status()));
          continue;
        }
        progress.Note(
            absl::StrCat(label, ": step ", step, ": validation ", DescribeEvaluation(*eval)));
        if (monitor != nullptr) monitor->RecordEvaluation(step, *eval);
        run.evaluations.push_back({step, *std::move(eval)});
      }
    }
    if (strategy->LostReplicas().empty()) break;
    TESSERA_RETURN_IF_ERROR(
        recover(absl::UnavailableError("a replica was lost at the end of training")));
  }
  run.wall_seconds = internal::MonotonicSeconds() - start;
  run.final_loss = tail_examples > 0 ? tail_loss / static_cast<double>(tail_examples) : 0;
  progress.Finish();
  if (monitor != nullptr) monitor->EndTraining();
  const int64_t final_step = std::max(first_step, total_steps);
  if (checkpoints.has_value()) {
    const double save_start = internal::MonotonicSeconds();
    TESSERA_ASSIGN_OR_RETURN(const std::string dir,
                             SaveCheckpoint(*checkpoints, *strategy, job, final_step));
    summary["checkpoint_seconds"] = internal::MonotonicSeconds() - save_start;
    std::printf("%s: checkpoint %s\n", label.c_str(), dir.c_str());
  }
  if (!options.export_dir.empty()) {
    ExportedModel exported;
    exported.spec = job.model;
    TESSERA_ASSIGN_OR_RETURN(Signature serving, ServingSignature(job.model));
    exported.signatures.push_back(std::move(serving));
    exported.step = final_step;
    for (const ParamSpec& param : job.model.params) {
      TESSERA_ASSIGN_OR_RETURN(exported.variables[param.name], strategy->Read(param.name));
    }
    TESSERA_RETURN_IF_ERROR(Env::Default()->CreateDirectories(options.export_dir));
    TESSERA_RETURN_IF_ERROR(WriteExportedModel(options.export_dir, exported));
    std::printf("%s: exported the model to %s\n", label.c_str(), options.export_dir.c_str());
  }
  if (job.test.size() > 0) {
    TESSERA_ASSIGN_OR_RETURN(run.eval, strategy->Evaluate(model, job.test.size()));
  }
  summary["mode"] = options.cluster.has_value() ? "net" : "sim";
  summary["strategy"] = "mirrored";
  summary["ps"] = 0;
  summary["workers"] = replicas;
  summary["replicas"] = replicas;
  summary["replicas_in_sync"] = strategy->num_replicas_in_sync();
  summary["global_batch_size"] = strategy->global_batch_size();
  summary["replicas_lost"] = replicas_lost;
  summary["replica_losses"] = losses;
  summary["on_replica_loss"] = on_loss == ReplicaLossPolicy::kContinue ? "continue" : "restore";
  summary["first_step"] = first_step;
  summary["global_step"] = final_step;
  for (const char* key : {"closures_scheduled", "closures_completed", "closures_retried",
                          "closures_cancelled", "worker_failures", "worker_restarts"}) {
    summary[key] = 0;
  }
  if (options.cluster.has_value()) strategy->EndRun();
  return run;
}

absl::Status ServeAsReplica(const TrainingJob& job, const ParameterServerTrainingOptions& options,
                            int32_t task) {
  if (!options.cluster.has_value()) {
    return absl::InvalidArgumentError("a replica process needs a cluster (--cluster_spec)");
  }
  const ClusterSpec& spec = *options.cluster;
  if (task < 0 || task >= static_cast<int32_t>(spec.workers.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "worker task ", task, " is not in the cluster's ", spec.workers.size(), " workers"));
  }
  caf::actor_system_config config;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<caf::actor_system> system, StartSystem(config, options));
  caf::actor_system& sys = *system;
  MirroredReplicaOptions replica_options = ReplicaOptions(job, options.seed);
  ConfigureNetworkedReplica(replica_options, sys, task, options.network);
  const std::string me = ReplicaNodeName(task);
  TESSERA_ASSIGN_OR_RETURN(mirrored_replica_actor replica,
                           SpawnMirroredReplica(sys, std::move(replica_options)));
  TESSERA_ASSIGN_OR_RETURN(const uint16_t port,
                           PublishNode(sys, me, caf::actor_cast<caf::actor>(replica),
                                       spec.workers[task].port, options.network));
  std::printf("%s: replica %d serving on port %d\n", job.name.c_str(), task, port);
  std::fflush(stdout);
  // Until the coordinator ends the run (it stops the replica) or the process is stopped.
  caf::scoped_actor self{sys};
  self->monitor(replica);
  bool ended = false;
  self->receive_while([&] { return !ended; })([&](caf::down_msg&) { ended = true; });
  std::printf("%s: replica %d: the run is over\n", job.name.c_str(), task);
  return absl::OkStatus();
}

std::string ReplicaNodeName(int32_t task) { return absl::StrCat("replica ", task); }

absl::StatusOr<mirrored_replica_actor> ConnectToReplica(caf::actor_system& system,
                                                        const NodeAddress& address, int32_t task,
                                                        const NetworkOptions& network) {
  absl::StatusOr<caf::actor> service = ConnectToNode(system, address, "the coordinator", network,
                                                     kProtocolVersion, ReplicaNodeName(task));
  if (absl::IsUnavailable(service.status())) {
    // The likeliest mistake: a worker of the parameter-server strategy listens nowhere (it
    // connects to the coordinator), so the coordinator finds nobody at the worker's address.
    return absl::UnavailableError(absl::StrCat(
        service.status().message(), " (is `--role=worker --task=", task,
        " --strategy=mirrored` running there? A worker of the parameter-server strategy does not "
        "listen: it connects to the coordinator)"));
  }
  if (!service.ok()) return service.status();
  return caf::actor_cast<mirrored_replica_actor>(*service);
}

void ConfigureNetworkedReplica(MirroredReplicaOptions& options, caf::actor_system& system,
                               int32_t task, const NetworkOptions& network) {
  options.linker = [&system, me = ReplicaNodeName(task),
                    network](const std::string& address) -> absl::StatusOr<caf::actor> {
    TESSERA_ASSIGN_OR_RETURN(NodeAddress parsed, ParseNodeAddress(address));
    return ConnectToNode(system, parsed, me, network);
  };
  // Under TLS the ring stays on the authenticated, encrypted actor connection.
  options.ring_link_bind = network.tls() ? "" : network.bind;
}

}  // namespace tessera
