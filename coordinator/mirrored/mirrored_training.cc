#include "coordinator/mirrored/mirrored_training.h"

#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "cluster/base/cluster.h"
#include "cluster/network/network.h"
#include "coordinator/checkpoint/checkpoint_manager.h"
#include "coordinator/mirrored/replica_group.h"
#include "coordinator/monitoring/internal/progress.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/training/describe_job.h"
#include "coordinator/training/distributed_evaluation.h"
#include "coordinator/training/training_loop.h"
#include "core/base/logging.h"
#include "core/base/process.h"
#include "core/model/model.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"
#include "tessera/env.h"
#include "tessera/status.h"

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

// A checkpoint of `step`: every parameter and variable, written by the replicas that hold them.
absl::StatusOr<std::string> SaveCheckpoint(CheckpointManager& checkpoints, ReplicaGroup& group,
                                           const TrainingJob& job, int64_t step) {
  return checkpoints.Save(step, [&](const std::string& dir) {
    return group.Save(dir, {checkpoints.run_id(), step}, job.model, checkpoints.env());
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

// Steps under the mirrored strategy: requests that run up to kStepsPerRequest steps on every
// replica back to back, and, when a replica is lost, its replacement or the survivors going on
// (Note [A lost replica]).
class MirroredSteps final : public StepExecutor {
 public:
  // Fault injection: the steps during which a replica is killed, in order, and the seed that
  // picks the victims.
  struct Plan {
    std::vector<int64_t> losses;
    uint64_t seed = 0;
  };

  MirroredSteps(ReplicaGroup& group, caf::actor_system& system, const TrainingJob& job,
                const ParameterServerTrainingOptions& options, ReplicaLossPolicy on_loss,
                std::optional<CheckpointManager>& checkpoints, Plan plan,
                std::function<void(const WorkerPoolStatus&)> on_replicas)
      : group_(group),
        system_(system),
        job_(job),
        options_(options),
        on_loss_(on_loss),
        checkpoints_(checkpoints),
        planned_(std::move(plan.losses)),
        victims_(plan.seed ^ 0x5eed),
        on_replicas_(std::move(on_replicas)) {
    for (int32_t rank = 0; rank < group_.num_replicas_in_sync(); ++rank) {
      WorkerSlotStatus slot;
      slot.slot = rank;
      slot.live = true;
      slot.starts = 1;
      replicas_.slots.push_back(slot);
      slot_of_rank_.push_back(rank);
    }
  }

  // Reads the optimizer steps the replicas have applied (Note [A lost replica]: what a resync
  // agrees on).
  absl::Status Start() {
    TESSERA_ASSIGN_OR_RETURN(const PerReplica<int64_t> applied, group_.AppliedSteps(job_.model));
    applied_ = applied.values[0];
    ShowReplicas();
    return absl::OkStatus();
  }

  absl::StatusOr<Advanced> Advance(int64_t next, int64_t limit) override {
    const int64_t end = std::min(limit, next + kStepsPerRequest);
    std::function<void()> kill;
    if (!planned_.empty() && planned_.front() < end) {
      // Fault injection: the replica is killed once the request is sent to every replica (with
      // it in hand, or, a short request, after it: then the next one finds it gone).
      planned_.erase(planned_.begin());
      const int32_t victim =
          static_cast<int32_t>(victims_() % static_cast<uint64_t>(group_.num_replicas_in_sync()));
      Log().info("{}: fault injection kills replica {} during step {}", job_.name, victim,
                 next + 1);
      kill = [actor = group_.replicas()[victim].actor] {
        caf::anon_send_exit(actor, caf::exit_reason::kill);
      };
    }
    TESSERA_ASSIGN_OR_RETURN(const std::vector<ReplicaGroup::StepResult> trained,
                             group_.TrainSteps(next, end - next, std::move(kill)));
    Advanced advanced;
    advanced.started = static_cast<int64_t>(trained.size());
    const absl::Time now = absl::Now();
    for (const ReplicaGroup::StepResult& result : trained) {
      advanced.completed.push_back({result.examples, result.loss, now});
    }
    applied_ += advanced.started;
    for (const int32_t slot : slot_of_rank_) {
      WorkerSlotStatus& replica = replicas_.slots[slot];
      replica.completed += advanced.started;
      replica.last_function = "train_step";
      replica.last_step = next + advanced.started - 1;
    }
    ShowReplicas();
    return advanced;
  }

  // Nothing is in flight between requests; a replica lost since the last one (noticed by no
  // request: at the very end, say) is a failure to recover from like any other.
  absl::StatusOr<std::vector<CompletedStep>> Drain() override {
    if (!group_.LostReplicas().empty()) {
      return absl::UnavailableError("a replica was lost after its last step");
    }
    return std::vector<CompletedStep>{};
  }

  // Note [A lost replica]: after a failure of a request (a step, a checkpoint, a validation),
  // the lost replicas, if any, are dropped or replaced and training goes on from the step
  // returned. Any other failure is the run's.
  absl::StatusOr<Recovery> Recover(const absl::Status& failure, int64_t step) override {
    if (!absl::IsUnavailable(failure)) return failure;
    const std::vector<int32_t> lost = group_.LostReplicas();
    if (lost.empty()) return failure;
    replicas_lost_ += static_cast<int64_t>(lost.size());
    for (const int32_t rank : lost) ++replicas_.slots[slot_of_rank_[rank]].failures;
    const std::string which = absl::StrJoin(lost, ", ");
    nlohmann::json loss = {{"step", step}, {"replicas", lost}};
    const std::string& label = job_.name;
    if (on_loss_ == ReplicaLossPolicy::kContinue) {
      TESSERA_RETURN_IF_ERROR(group_.Drop(lost));
      // The others are renumbered in order.
      std::vector<int32_t> kept;
      for (int32_t rank = 0; rank < static_cast<int32_t>(slot_of_rank_.size()); ++rank) {
        if (std::find(lost.begin(), lost.end(), rank) == lost.end()) {
          kept.push_back(slot_of_rank_[rank]);
        } else {
          replicas_.slots[slot_of_rank_[rank]].live = false;
        }
      }
      slot_of_rank_ = std::move(kept);
      // The survivors agree on the steps the most advanced of them applied.
      TESSERA_ASSIGN_OR_RETURN(const int64_t agreed, group_.Resync(job_.model));
      const int64_t goes_on = step + agreed - applied_;
      applied_ = agreed;
      loss["action"] = "continued";
      loss["replicas_in_sync"] = group_.num_replicas_in_sync();
      losses_.push_back(std::move(loss));
      ShowReplicas();
      return Recovery{goes_on,
                      absl::StrCat(label, ": replica ", which, " lost at step ", goes_on + 1,
                                   ": going on with ", group_.num_replicas_in_sync(),
                                   " replicas, global batch ", group_.global_batch_size())};
    }
    if (!checkpoints_.has_value()) {
      return absl::UnavailableError(absl::StrCat(
          "replica ", which, " was lost (", failure.message(),
          "): a synchronous step needs every replica; without --checkpoint_dir the run cannot "
          "resume (or pass --on_replica_loss=continue to go on without it)"));
    }
    const double recovery_start = internal::MonotonicSeconds();
    for (int32_t rank : lost) {
      // Networked: the worker's process is restarted by whoever runs it; wait for it.
      TESSERA_ASSIGN_OR_RETURN(ReplicaHandle back, StartReplica(system_, job_, options_, rank));
      TESSERA_RETURN_IF_ERROR(group_.Replace(rank, std::move(back)));
      ++replicas_replaced_;
      ++replicas_.slots[slot_of_rank_[rank]].starts;
    }
    const std::optional<std::string> latest = checkpoints_->Latest();
    if (!latest.has_value()) {
      return absl::FailedPreconditionError(
          absl::StrCat("replica ", which, " was lost and there is no checkpoint to resume from in ",
                       checkpoints_->root()));
    }
    TESSERA_ASSIGN_OR_RETURN(const int64_t restored,
                             group_.Restore(*latest, job_.model, job_.optimizer));
    TESSERA_ASSIGN_OR_RETURN(const PerReplica<int64_t> now, group_.AppliedSteps(job_.model));
    applied_ = now.values[0];
    loss["action"] = "restored";
    loss["checkpoint_step"] = restored;
    loss["lost_steps"] = step - restored;
    loss["recovery_seconds"] = internal::MonotonicSeconds() - recovery_start;
    losses_.push_back(std::move(loss));
    ShowReplicas();
    return Recovery{restored, absl::StrCat(label, ": replica ", which, " lost after step ", step,
                                           ": back, every replica restored from ", *latest,
                                           " (step ", restored, ")")};
  }

  int64_t replicas_lost() const { return replicas_lost_; }
  int64_t replicas_replaced() const { return replicas_replaced_; }
  const nlohmann::json& losses() const { return losses_; }

 private:
  void ShowReplicas() {
    if (!on_replicas_) return;
    replicas_.live_slots = slot_of_rank_;
    std::sort(replicas_.live_slots.begin(), replicas_.live_slots.end());
    replicas_.worker_failures = replicas_lost_;
    replicas_.worker_restarts = replicas_replaced_;
    on_replicas_(replicas_);
  }

  ReplicaGroup& group_;
  caf::actor_system& system_;
  const TrainingJob& job_;
  const ParameterServerTrainingOptions& options_;
  const ReplicaLossPolicy on_loss_;
  std::optional<CheckpointManager>& checkpoints_;
  std::vector<int64_t> planned_;
  std::mt19937_64 victims_;
  int64_t applied_ = 0;  // the optimizer steps the replicas have applied
  int64_t replicas_lost_ = 0;
  int64_t replicas_replaced_ = 0;
  nlohmann::json losses_ = nlohmann::json::array();
  const std::function<void(const WorkerPoolStatus&)> on_replicas_;
  WorkerPoolStatus replicas_;          // a slot per replica of the start, as on_replicas sees it
  std::vector<int32_t> slot_of_rank_;  // the slot of each rank in the ring now
};

}  // namespace

absl::StatusOr<TrainingRun> TrainMirrored(const TrainingJob& job,
                                          const ParameterServerTrainingOptions& options,
                                          ReplicaLossPolicy on_loss, int64_t eval_every,
                                          nlohmann::json& summary,
                                          const RunObservers& observers) {
  const std::string& label = job.name;
  TrainingMonitor* monitor = observers.monitor.get();
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
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ReplicaGroup> group,
                           ReplicaGroup::Create(*system, std::move(handles), job.batch_size,
                                                DescribeJob(job, options.seed)));
  // Global steps, as on parameter servers: job.steps, or job.epochs passes in global batches.
  int64_t total_steps = job.steps;
  if (job.epochs > 0 &&
      __builtin_mul_overflow(
          job.epochs, BatchesPerPass(job.train.size(), group->global_batch_size()), &total_steps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--epochs ", job.epochs, " is more steps than can be counted"));
  }
  std::printf(
      "%s: mirrored strategy, %d replicas (%s), global batch %lld = %d x %lld, %lld steps\n",
      label.c_str(), replicas, options.cluster.has_value() ? "networked" : "simulation",
      static_cast<long long>(group->global_batch_size()), replicas,
      static_cast<long long>(job.batch_size), static_cast<long long>(total_steps));

  int64_t first_step = 0;
  if (resume_from.has_value()) {
    TESSERA_ASSIGN_OR_RETURN(first_step, group->Restore(*resume_from, job.model, job.optimizer));
    std::printf("%s: resumed from %s at step %lld\n", label.c_str(), resume_from->c_str(),
                static_cast<long long>(first_step));
  } else if (checkpoints.has_value() && on_loss == ReplicaLossPolicy::kRestore) {
    // A lost replica restores everyone from the latest checkpoint: there must always be one.
    TESSERA_RETURN_IF_ERROR(SaveCheckpoint(*checkpoints, *group, job, 0).status());
  }

  MirroredSteps::Plan plan;
  if (!options.cluster.has_value() && options.inject_worker_failures > 0) {
    plan.losses = PlannedLosses(options.inject_worker_failures, first_step, total_steps);
  }
  plan.seed = options.seed;
  MirroredSteps steps(*group, *system, job, options, on_loss, checkpoints, std::move(plan),
                      observers.on_replicas);
  TESSERA_RETURN_IF_ERROR(steps.Start());
  StepCadence cadence;
  cadence.pass_steps = BatchesPerPass(job.train.size(), group->global_batch_size());
  if (checkpoints.has_value()) {
    cadence.checkpoint_every = options.checkpoint_every;
    cadence.checkpoint_every_seconds = options.checkpoint_every_seconds;
    cadence.checkpoint_in_background = false;  // the replicas save while they wait
    cadence.checkpoint = [&](int64_t step, std::function<void()>) {
      return SaveCheckpoint(*checkpoints, *group, job, step);
    };
  }
  if (job.test.size() > 0) {
    cadence.eval_every = eval_every;
    cadence.evaluate = [&](int64_t) {
      return FinishedEvaluation(group->Evaluate(model, job.test.size()));
    };
  }
  TESSERA_ASSIGN_OR_RETURN(TrainingRun run, RunTrainingLoop(steps, first_step, total_steps, label,
                                                            cadence, monitor));
  const int64_t final_step = std::max(first_step, total_steps);
  if (checkpoints.has_value()) {
    const double save_start = internal::MonotonicSeconds();
    TESSERA_ASSIGN_OR_RETURN(const std::string dir,
                             SaveCheckpoint(*checkpoints, *group, job, final_step));
    const double save_seconds = internal::MonotonicSeconds() - save_start;
    summary["checkpoint_seconds"] = save_seconds;
    if (monitor != nullptr) monitor->RecordCheckpoint(final_step, save_seconds, dir);
    std::printf("%s: checkpoint %s (%.2f s)\n", label.c_str(), dir.c_str(), save_seconds);
  }
  if (!options.export_dir.empty()) {
    ExportedModel exported;
    exported.spec = job.model;
    exported.text_inputs = TextInputs(job.model, job.train);
    TESSERA_ASSIGN_OR_RETURN(Signature serving, ServingSignature(job.model));
    exported.signatures.push_back(std::move(serving));
    exported.step = final_step;
    for (const ParamSpec& param : job.model.params) {
      TESSERA_ASSIGN_OR_RETURN(exported.variables[param.name], group->Read(param.name));
    }
    TESSERA_RETURN_IF_ERROR(Env::Default()->CreateDirectories(options.export_dir));
    TESSERA_RETURN_IF_ERROR(WriteExportedModel(options.export_dir, exported));
    std::printf("%s: exported the model to %s\n", label.c_str(), options.export_dir.c_str());
  }
  if (job.test.size() > 0) {
    TESSERA_ASSIGN_OR_RETURN(run.eval, group->Evaluate(model, job.test.size()));
  }
  summary["mode"] = options.cluster.has_value() ? "net" : "sim";
  summary["strategy"] = "mirrored";
  summary["ps"] = 0;
  summary["workers"] = replicas;
  summary["replicas"] = replicas;
  summary["replicas_in_sync"] = group->num_replicas_in_sync();
  summary["global_batch_size"] = group->global_batch_size();
  summary["replicas_lost"] = steps.replicas_lost();
  summary["replica_losses"] = steps.losses();
  summary["on_replica_loss"] = on_loss == ReplicaLossPolicy::kContinue ? "continue" : "restore";
  summary["first_step"] = first_step;
  summary["global_step"] = final_step;
  // No closures run under the mirrored strategy; a replica's worker lost is a worker failure,
  // and a replica started again in its place a worker restart.
  for (const char* key :
       {"closures_scheduled", "closures_completed", "closures_retried", "closures_cancelled"}) {
    summary[key] = 0;
  }
  summary["worker_failures"] = steps.replicas_lost();
  summary["worker_restarts"] = steps.replicas_replaced();
  if (options.cluster.has_value()) group->EndRun();
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
