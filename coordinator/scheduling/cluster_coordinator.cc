#include "coordinator/scheduling/cluster_coordinator.h"

#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "coordinator/scheduling/internal/lost_ps.h"
#include "core/base/logging.h"
#include "tessera/status.h"

namespace tessera {

ClosureScheduler::ClosureScheduler(ParameterServerStrategy& strategy,
                                   std::shared_ptr<ClosureQueue> queue,
                                   std::shared_ptr<const FunctionRegistry> registry,
                                   CoordinatorOptions options, CoordinatorRun run)
    : strategy_(strategy),
      system_(strategy.cluster().actors().system()),
      queue_(std::move(queue)),
      registry_(std::move(registry)),
      options_(std::move(options)),
      run_(std::move(run)),
      lost_(std::make_shared<LostPs>()) {}

absl::StatusOr<std::unique_ptr<ClosureScheduler>> ClosureScheduler::Create(
    ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
    CoordinatorOptions options, CoordinatorRun run) {
  if (!registry) return absl::InvalidArgumentError("ClusterCoordinator: no function registry");
  if (options.queue_capacity < 1 || options.closures_per_worker < 1) {
    return absl::InvalidArgumentError(
        "ClusterCoordinator: queue_capacity and closures_per_worker must be >= 1");
  }
  SetLogRole("coordinator");
  Cluster& cluster = strategy.cluster();
  caf::actor_system& system = cluster.actors().system();
  auto queue = std::make_shared<ClosureQueue>(options.queue_capacity, run.queue_identity);
  std::unique_ptr<ClosureScheduler> coordinator(
      new ClosureScheduler(strategy, queue, registry, options, std::move(run)));
  WorkerFactory factory;
  PsLostHandler on_ps_lost;
  if (!cluster.networked()) {
    factory = [&system, registry](const WorkerInfo& info) {
      return SpawnWorker(system, info, registry);
    };
  } else {
    // Every lost PS goes through the recovery: re-adopted when it was only cut off (Note [A
    // stalled coordinator re-adopts its shards]), else promoted or restored, else fatal.
    on_ps_lost = [lost = coordinator->lost_](int32_t task) {
      absl::MutexLock lock(&lost->mu);
      lost->tasks.push_back(task);
      ++lost->restoring;
      lost->changed.SignalAll();
    };
    cluster.actors().SetBackupLossListener(
        [lost = coordinator->lost_](const std::string& shard, const caf::actor_addr& backup) {
          absl::MutexLock lock(&lost->mu);
          lost->lost_backups.emplace_back(shard, backup);
          lost->changed.SignalAll();
        });
  }
  coordinator->actor_ = SpawnCoordinator(system, queue, cluster.num_workers(),
                                         options.closures_per_worker, std::move(factory),
                                         std::move(on_ps_lost));
  for (int32_t task = 0; task < cluster.num_ps(); ++task) {
    caf::anon_send(coordinator->actor_, watch_ps_atom::value, cluster.actors().ps_node(task), task,
                   strategy.DescribePlacement(task));
  }
  if (cluster.networked()) {
    TESSERA_RETURN_IF_ERROR(coordinator->StartNetworked());
  } else {
    for (int32_t slot = 0; slot < cluster.num_workers(); ++slot) {
      caf::anon_send(coordinator->actor_, add_worker_atom::value, slot);
    }
  }
  return coordinator;
}

VariableDirectory ClosureScheduler::Directory() {
  Cluster& cluster = strategy_.cluster();
  VariableDirectory directory{generation_,
                              cluster.num_workers(),
                              strategy_.placement().Handles(),
                              cluster.ps_addresses(),
                              cluster.actors().ps_nodes(),
                              run_.job};
  for (int32_t task : vacant_) {
    directory.ps_addresses[task].clear();
    directory.ps_nodes[task] = ps_node_actor();
  }
  return directory;
}

absl::Status ClosureScheduler::StartNetworked() {
  Cluster& cluster = strategy_.cluster();
  caf::anon_send(actor_, directory_atom::value, Directory());
  TESSERA_ASSIGN_OR_RETURN(
      port_, PublishNode(system_, "the coordinator", caf::actor_cast<caf::actor>(actor_),
                         cluster.spec()->coordinator.port, cluster.network(),
                         CoordinatorPortAdvice(*cluster.spec())));
  recovery_thread_ = std::thread([this] { RecoveryLoop(); });
  return absl::OkStatus();
}

ClosureScheduler::~ClosureScheduler() {
  strategy_.cluster().actors().SetBackupLossListener(nullptr);
  if (recovery_thread_.joinable()) WaitUntilWorkersLearnOfFailure();
  {
    absl::MutexLock lock(&lost_->mu);
    lost_->stop = true;
    lost_->changed.SignalAll();
  }
  if (recovery_thread_.joinable()) recovery_thread_.join();
  queue_->Shutdown(absl::CancelledError("the coordinator was shut down"));
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

// Note [A failed run tells its workers before the coordinator exits]
// A worker process learns that the run failed from its worker's exit reason, from the answer to
// a directory or join request, or from the coordinator's own exit reason. One between two
// memberships when the run fails (stopped to join again because a PS was lost, and that PS then
// could not be restored) has only the last two, and a coordinator process that exits at once
// can take its answer, or its exit reason, down with it: the worker then takes it for a crashed
// coordinator and waits --connect_timeout_s for another. So before a failed run's coordinator
// exits it waits, for at most kFailureNoticeTimeout, until every worker task has learned of the
// failure, and then a moment (kFailureNoticeFlush) for the last answers to leave.
void ClosureScheduler::WaitUntilWorkersLearnOfFailure() {
  constexpr absl::Duration kFailureNoticeTimeout = absl::Seconds(5);
  constexpr absl::Duration kFailureNoticeFlush = absl::Milliseconds(200);
  const absl::Time deadline = absl::Now() + kFailureNoticeTimeout;
  for (;;) {
    const WorkerPoolStatus pool = workers();
    if (!pool.run_failed) return;
    const auto told = static_cast<int32_t>(pool.told_of_failure.size());
    if (told >= strategy_.cluster().num_workers() || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  absl::SleepFor(kFailureNoticeFlush);
}

absl::Status ClosureScheduler::Join() {
  for (;;) {
    TESSERA_RETURN_IF_ERROR(queue_->Join());
    absl::MutexLock lock(&lost_->mu);
    if (lost_->restoring == 0) return absl::OkStatus();
    // A restore re-queues closures; wait for it, then for them.
    while (!lost_->stop && lost_->restoring != 0) lost_->changed.Wait(&lost_->mu);
    if (lost_->stop) return absl::CancelledError("the coordinator was shut down");
  }
}

absl::Status ClosureScheduler::WaitForWorkers(int32_t min_workers, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<int32_t> reported{-1};
  for (;;) {
    const WorkerPoolStatus pool = workers();
    const std::string tasks =
        pool.live_slots.empty() ? "none" : absl::StrJoin(pool.live_slots, ", ");
    if (pool.live_slots != reported) {
      Log().info("{} of {} workers connected (tasks: {})", pool.live_slots.size(),
                 strategy_.cluster().num_workers(), tasks);
      reported = pool.live_slots;
    }
    if (static_cast<int32_t>(pool.live_slots.size()) >= min_workers) return absl::OkStatus();
    if (absl::Now() >= deadline) {
      std::string refused;
      for (const auto& [task, why] : pool.refusals) absl::StrAppend(&refused, "; ", why);
      return absl::DeadlineExceededError(absl::StrCat(
          "only ", pool.live_slots.size(), " of the ", min_workers,
          " workers needed joined within ", absl::FormatDuration(timeout),
          " (connected tasks: ", tasks, ")", refused));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

absl::StatusOr<RemoteValue> ClosureScheduler::Schedule(const std::string& function,
                                                       ClosureValues args,
                                                       std::optional<int64_t> step) {
  if (absl::StatusOr<const ReplicaFunction*> fn = registry_->FindReplicaFunction(function);
      !fn.ok()) {
    return fn.status();
  }
  // Note [Closure ids that survive a restart] (core/scheduling/closure_queue.h).
  std::optional<ClosureId> id;
  if (step.has_value() && run_.queue_identity.has_value()) {
    if (*step < 0 || *step >= kFirstUnnumberedId - 1) {
      return absl::InvalidArgumentError(absl::StrCat("step ", *step, " is out of range"));
    }
    id = *step + 1;
  }
  bool was_empty = false;
  absl::StatusOr<RemoteValue> value =
      queue_->Enqueue(function, std::move(args), &was_empty, id, step.value_or(-1));
  // Into a non-empty queue, every worker is busy and pulls the next closure when it finishes.
  if (value.ok() && was_empty) caf::anon_send(actor_, dispatch_atom::value);
  return value;
}

uint64_t ClosureScheduler::queue_identity() const { return queue_->identity(); }

WorkerPoolStatus ClosureScheduler::workers() const {
  caf::scoped_actor self(system_);
  WorkerPoolStatus out;
  self->request(actor_, caf::infinite, workers_atom::value)
      .receive([&](WorkerPoolStatus& status) { out = std::move(status); }, [](caf::error&) {});
  return out;
}

// -- ClusterCoordinator, the public handle
// ----------------------------------------------------------

ClusterCoordinator::ClusterCoordinator(std::unique_ptr<ClosureScheduler> scheduler)
    : scheduler_(std::move(scheduler)) {}
ClusterCoordinator::~ClusterCoordinator() = default;

absl::StatusOr<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::Create(
    ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
    CoordinatorOptions options) {
  return Create(strategy, std::move(registry), options, CoordinatorRun{});
}

absl::StatusOr<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::Create(
    ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
    CoordinatorOptions options, CoordinatorRun run) {
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<ClosureScheduler> scheduler,
      ClosureScheduler::Create(strategy, std::move(registry), options, std::move(run)));
  return std::unique_ptr<ClusterCoordinator>(new ClusterCoordinator(std::move(scheduler)));
}

absl::StatusOr<RemoteValue> ClusterCoordinator::Schedule(const std::string& function,
                                                         ClosureValues args,
                                                         std::optional<int64_t> step) {
  return scheduler_->Schedule(function, std::move(args), step);
}
absl::Status ClusterCoordinator::Join() { return scheduler_->Join(); }
absl::StatusOr<bool> ClusterCoordinator::Done() { return scheduler_->Done(); }
ClosureStats ClusterCoordinator::stats() const { return scheduler_->stats(); }
uint16_t ClusterCoordinator::port() const { return scheduler_->port(); }
absl::Status ClusterCoordinator::WaitForWorkers(int32_t min_workers, absl::Duration timeout) {
  return scheduler_->WaitForWorkers(min_workers, timeout);
}
uint64_t ClusterCoordinator::queue_identity() const { return scheduler_->queue_identity(); }
WorkerPoolStatus ClusterCoordinator::workers() const { return scheduler_->workers(); }
std::vector<PsRecovery> ClusterCoordinator::recoveries() const { return scheduler_->recoveries(); }

}  // namespace tessera
