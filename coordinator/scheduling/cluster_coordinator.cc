#include "coordinator/scheduling/cluster_coordinator.h"

#include <algorithm>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/error.h"
#include "coordinator/checkpoint/save_restore.h"
#include "core/base/logging.h"
#include "core/base/status.h"

namespace tessera {
namespace {

int64_t Millis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

}  // namespace

struct ClusterCoordinator::LostPs {
  absl::Mutex mu;
  absl::CondVar changed;
  std::deque<int32_t> tasks ABSL_GUARDED_BY(mu);
  int32_t restoring ABSL_GUARDED_BY(mu) = 0;  // queued or in progress
  // Tasks lost whose shards need new backups (replicas), done when no loss waits: training
  // does not wait for them.
  std::deque<int32_t> rebuilds ABSL_GUARDED_BY(mu);
  // Shards whose backup failed, with that backup (Note [A lost backup is replaced]).
  std::deque<std::pair<std::string, caf::actor_addr>> lost_backups ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;
};

ClusterCoordinator::ClusterCoordinator(ParameterServerStrategy& strategy,
                                       std::shared_ptr<ClosureQueue> queue,
                                       std::shared_ptr<const FunctionRegistry> registry,
                                       CoordinatorOptions options)
    : strategy_(strategy),
      system_(strategy.cluster().system()),
      queue_(std::move(queue)),
      registry_(std::move(registry)),
      options_(std::move(options)),
      lost_(std::make_shared<LostPs>()) {}

absl::StatusOr<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::Create(
    ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
    CoordinatorOptions options) {
  if (!registry) return absl::InvalidArgumentError("ClusterCoordinator: no function registry");
  if (options.queue_capacity < 1 || options.closures_per_worker < 1) {
    return absl::InvalidArgumentError(
        "ClusterCoordinator: queue_capacity and closures_per_worker must be >= 1");
  }
  SetLogRole("coordinator");
  Cluster& cluster = strategy.cluster();
  caf::actor_system& system = cluster.system();
  auto queue = std::make_shared<ClosureQueue>(options.queue_capacity, options.queue_identity);
  std::unique_ptr<ClusterCoordinator> coordinator(
      new ClusterCoordinator(strategy, queue, registry, options));
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
    cluster.SetBackupLossListener(
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
    caf::anon_send(coordinator->actor_, watch_ps_atom::value, cluster.ps_node(task), task,
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

VariableDirectory ClusterCoordinator::Directory() {
  Cluster& cluster = strategy_.cluster();
  VariableDirectory directory{generation_,         cluster.num_workers(),
                              strategy_.Handles(), cluster.ps_addresses(),
                              cluster.ps_nodes(),  options_.job};
  for (int32_t task : vacant_) {
    directory.ps_addresses[task].clear();
    directory.ps_nodes[task] = ps_node_actor();
  }
  return directory;
}

absl::Status ClusterCoordinator::StartNetworked() {
  Cluster& cluster = strategy_.cluster();
  caf::anon_send(actor_, directory_atom::value, Directory());
  TESSERA_ASSIGN_OR_RETURN(
      port_, PublishNode(system_, "the coordinator", caf::actor_cast<caf::actor>(actor_),
                         cluster.spec()->coordinator.port, cluster.network(),
                         CoordinatorPortAdvice(*cluster.spec())));
  recovery_thread_ = std::thread([this] { RecoveryLoop(); });
  return absl::OkStatus();
}

ClusterCoordinator::~ClusterCoordinator() {
  strategy_.cluster().SetBackupLossListener(nullptr);
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
void ClusterCoordinator::WaitUntilWorkersLearnOfFailure() {
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

// A lost PS first (training waits for it), then the failed backups (their primaries hold their
// acknowledgements until struck), then the rebuilds (nobody waits for them).
void ClusterCoordinator::RecoveryLoop() {
  for (;;) {
    int32_t task = 0;
    bool rebuild = false;
    std::optional<std::pair<std::string, caf::actor_addr>> lost_backup;
    {
      absl::MutexLock lock(&lost_->mu);
      while (!lost_->stop && lost_->tasks.empty() && lost_->lost_backups.empty() &&
             lost_->rebuilds.empty()) {
        lost_->changed.Wait(&lost_->mu);
      }
      if (lost_->stop) return;
      if (lost_->tasks.empty() && !lost_->lost_backups.empty()) {
        lost_backup = std::move(lost_->lost_backups.front());
        lost_->lost_backups.pop_front();
      } else {
        rebuild = lost_->tasks.empty();
        std::deque<int32_t>& queue = rebuild ? lost_->rebuilds : lost_->tasks;
        task = queue.front();
        queue.pop_front();
      }
    }
    if (lost_backup.has_value()) {
      ReplaceLostBackup(lost_backup->first, lost_backup->second);
      continue;
    }
    if (rebuild) {
      RebuildBackups(task);
      continue;
    }
    Recover(task);
    absl::MutexLock lock(&lost_->mu);
    --lost_->restoring;
    if (strategy_.replicas() > 1) lost_->rebuilds.push_back(task);
    lost_->changed.SignalAll();
  }
}

absl::Status ClusterCoordinator::Join() {
  for (;;) {
    TESSERA_RETURN_IF_ERROR(queue_->Join());
    absl::MutexLock lock(&lost_->mu);
    if (lost_->restoring == 0) return absl::OkStatus();
    // A restore re-queues closures; wait for it, then for them.
    while (!lost_->stop && lost_->restoring != 0) lost_->changed.Wait(&lost_->mu);
    if (lost_->stop) return absl::CancelledError("the coordinator was shut down");
  }
}

// Note [A stalled coordinator re-adopts its shards]
// A PS connection is lost in two ways: the PS process died, or this coordinator stopped answering
// (SIGSTOP, a VM pause, a long stall) for longer than the connection timeout, and the PS closed
// the connection. In the second case the PS process is alive and keeps this coordinator's
// shards for its lease (Note [Shards die with their coordinator], actors/ps/ps_node_actor.h). So a
// recovery first connects to the task's address afresh, briefly (kReadoptConnectTimeout: a live
// process accepts at once; a dead one must not delay the failover to a standby by much), and asks
// for the shards it holds for this coordinator's session. When every shard placed on the task is
// there, the variables point at them and training resumes: no checkpoint is read and no update
// is lost. Otherwise (a restarted process holds nothing, a shard died) the shards it gave back
// are dropped and the recovery restores from the checkpoint as before.
void ClusterCoordinator::Recover(int32_t task) {
  const absl::Time start = absl::Now();
  if (Readopt(task, start)) return;
  if (strategy_.replicas() > 1 && Failover(task, start)) return;
  const int64_t completed = queue_->stats().completed;
  Cluster& cluster = strategy_.cluster();
  const std::string address = cluster.ps_addresses().at(task);
  const std::string placement = strategy_.DescribePlacement(task);
  // The run cannot go on: the driver's next Schedule/Join says why, and the coordinator actor
  // stops the workers with it (they exit rather than join again).
  auto fail = [&](const absl::Status& why) {
    Log().error("cannot restore ps {}: {}", task, why.message());
    const absl::Status fatal = absl::UnavailableError(absl::StrCat(
        "parameter server ps ", task, " (", address, ") is unavailable and could not be ",
        "restored (", why.message(), "); its variables: ", placement));
    queue_->SetFatal(fatal);
    caf::anon_send(actor_, abort_atom::value, std::string(fatal.message()));
  };
  if (options_.recovery_checkpoints.empty()) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("it is gone, ",
                     strategy_.replicas() > 1 ? "its shards have no backup left, "
                                              : "its shards have no backup, ",
                     "and there is no --checkpoint_dir to restore them from")));
  }
  std::optional<std::string> latest =
      CheckpointManager(options_.recovery_checkpoints, 1).Latest();
  if (!latest.has_value()) {
    return fail(absl::NotFoundError(
        absl::StrCat("no checkpoint in ", options_.recovery_checkpoints,
                     " to restore its shards from yet: the run cannot continue")));
  }
  Log().warn("ps {} ({}) lost; restoring {} from {} onto {}", task, address, placement, *latest,
             cluster.spec()->ps_standby.empty()
                 ? "a PS started again at its address"
                 : "a standby (or a PS started again at its address, once none is left)");
  absl::StatusOr<ps_node_actor> node = cluster.ReplacePs(task);
  if (!node.ok()) return fail(node.status());
  vacant_.erase(std::remove(vacant_.begin(), vacant_.end(), task), vacant_.end());
  if (absl::StatusOr<std::vector<std::string>> moved = strategy_.RecreateShardsOn(task);
      !moved.ok()) {
    return fail(moved.status());
  }
  absl::StatusOr<int64_t> step =
      RestoreShardsOf(strategy_, *latest, task, options_.recovery_run);
  if (!step.ok()) return fail(step.status());
  PsRecovery report;
  report.ps_task = task;
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  report.checkpoint = *latest;
  report.checkpoint_step = *step;
  report.lost_steps = std::max<int64_t>(0, options_.first_step + completed - *step);
  Log().info(
      "ps {} restored on {} from {} (step {}) in {:.2f} s; the updates of {} steps to its "
      "shards were lost",
      task, cluster.ps_addresses().at(task), *latest, *step, report.seconds, report.lost_steps);
  Resume(task, *node, std::move(report));
}

bool ClusterCoordinator::Readopt(int32_t task, absl::Time start) {
  constexpr absl::Duration kReadoptConnectTimeout = absl::Milliseconds(500);
  Cluster& cluster = strategy_.cluster();
  absl::StatusOr<ps_node_actor> node = cluster.ReconnectPs(task, kReadoptConnectTimeout);
  if (!node.ok()) return false;  // gone: the checkpoint path says so
  std::map<std::string, shard_actor> held;
  std::vector<std::string> unreplicated;  // primaries whose backup failed while cut off
  absl::Status asked;
  caf::scoped_actor self(system_);
  const std::string run =
      options_.recovery_run.empty() ? std::string() : options_.recovery_run.ToString();
  self->request(*node, std::chrono::seconds(10), reclaim_atom::value, cluster.session(), run)
      .receive(
          [&](std::vector<HeldShard>& shards) {
            for (HeldShard& shard : shards) {
              if (!shard.replicated) unreplicated.push_back(shard.name);
              held.emplace(shard.name, std::move(shard.shard));
            }
          },
          [&](caf::error& err) { asked = ErrorToStatus(err); });
  if (asked.ok()) asked = strategy_.AdoptShardsOn(task, held);
  if (!asked.ok()) {
    if (!held.empty()) {
      Log().warn("ps {} gave back only part of its shards ({}): dropping them to restore all", task,
                 asked.message());
    }
    for (const auto& [name, shard] : held) {
      self->request(*node, std::chrono::seconds(10), drop_shard_atom::value, name,
                    cluster.session())
          .receive([] {}, [](caf::error&) {});
    }
    return false;
  }
  // A backup that failed while this coordinator was cut off was reported to nobody, and its
  // primary still holds its acknowledgements: struck now (Note [A lost backup is replaced]).
  {
    absl::MutexLock lock(&lost_->mu);
    for (const std::string& name : unreplicated) {
      if (std::optional<caf::actor_addr> backup = strategy_.BackupOf(name, task);
          backup.has_value()) {
        lost_->lost_backups.emplace_back(name, *backup);
      }
    }
  }
  PsRecovery report;
  report.ps_task = task;
  report.readopted = true;
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  Log().info(
      "ps {} ({}) was cut off, not lost: re-adopted its {} shard(s) as they are in {:.2f} "
      "s, nothing restored",
      task, cluster.ps_addresses().at(task), held.size(), report.seconds);
  Resume(task, *node, std::move(report));
  return true;
}

// Note [A lost PS's backups take over]
// With replicas (Note [Backups on the next PS], coordinator/ps/strategy.h) every shard of a lost PS
// has a backup on another, live one that holds every update the shard acknowledged: a change is
// acknowledged only once its backup has applied it (Note [Replicated shards], actors/
// shard_actor.h). So the recovery, once re-adoption failed (the process is gone), points the
// variables at the backups and publishes the directory at once: nothing is read from a
// checkpoint, no acknowledged update is lost, and a closure that ran when the PS died runs again
// with its updates' ids, which the backups' ledgers know (Note [Exactly-once updates]). The lost
// task is vacant — the directory names no address for it, so workers do not wait for it —
// until RebuildBackups finds it a node (a standby, or its process started again) when no other
// loss waits; then every shard without a backup gets one, on that node or another live one,
// filled with its primary's state. Until then those shards are unreplicated: a second loss
// before the rebuild that takes a shard's last copy sends that PS's shards, all of them, down the
// checkpoint path (PromoteBackupsOf promotes a PS's backups all or none). A PS that held only
// backups costs nothing but their rebuild.
bool ClusterCoordinator::Failover(int32_t task, absl::Time start) {
  Cluster& cluster = strategy_.cluster();
  const std::string placement = strategy_.DescribePlacement(task);
  absl::StatusOr<std::vector<std::string>> promoted = strategy_.PromoteBackupsOf(task);
  if (!promoted.ok()) {
    Log().warn("ps {} lost: {}", task, promoted.status().message());
    return false;
  }
  vacant_.push_back(task);
  PsRecovery report;
  report.ps_task = task;
  report.promoted = true;
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  Log().info(
      "ps {} ({}) lost: the backups of {} took over in {:.3f} s, nothing restored and no "
      "acknowledged update lost",
      task, cluster.ps_addresses().at(task), placement, report.seconds);
  Resume(task, ps_node_actor(), std::move(report));
  return true;
}

// Note [A lost backup is replaced]
// A primary whose backup failed while no PS was lost — the backup's connection or actor went
// down, or it answered with an error — reports it (Note [A lost backup is struck before the
// primary acknowledges alone], actors/ps/shard_actor.h) and holds its acknowledgements (a report
// sent while this coordinator was cut off is lost: a re-adoption finds such primaries by the
// node's record of which shards forward to a backup, and queues them here too). Here the
// backup is struck from the placement before the primary hears it may go on, so a later loss of
// the primary's PS finds no backup to promote rather than a stale one (that shard's PS then goes
// down the checkpoint path), and a rebuild gives it a new backup, as after a PS loss. A report
// of a backup already struck or replaced (its PS was lost and its primaries told) changes
// nothing. A failed backup whose node is dying and not yet known lost is struck the same way;
// its rebuild, finding that node gone, waits for the PS's recovery, which queues another.
void ClusterCoordinator::ReplaceLostBackup(const std::string& shard,
                                           const caf::actor_addr& backup) {
  absl::StatusOr<int32_t> task = strategy_.StrikeBackup(shard, backup);
  if (!task.ok()) {
    Log().debug("{}: nothing to strike ({})", shard, task.status().message());
    return;
  }
  Log().warn("the backup of {} on ps {} failed: struck, a new one follows", shard, *task);
  absl::MutexLock lock(&lost_->mu);
  lost_->rebuilds.push_back(*task);
  lost_->changed.SignalAll();
}

void ClusterCoordinator::RebuildBackups(int32_t task) {
  Cluster& cluster = strategy_.cluster();
  const absl::Time start = absl::Now();
  // First onto the live tasks; the lost task's node only when some shard finds none besides its
  // own (two PS), since waiting for a node can take the whole connect timeout.
  absl::StatusOr<int32_t> rebuilt = strategy_.RebuildBackups(vacant_);
  const bool vacant = std::find(vacant_.begin(), vacant_.end(), task) != vacant_.end();
  if (!rebuilt.ok() && vacant) {
    Log().info("ps {}: waiting for a node to hold the backups ({})", task,
               rebuilt.status().message());
    absl::StatusOr<ps_node_actor> node = cluster.ReplacePs(task);
    if (node.ok()) {
      vacant_.erase(std::remove(vacant_.begin(), vacant_.end(), task), vacant_.end());
      caf::anon_send(actor_, watch_ps_atom::value, *node, task, strategy_.DescribePlacement(task));
      // The same generation: no shard moved, workers need not join again.
      caf::anon_send(actor_, directory_atom::value, Directory());
      Log().info("ps {} is served by {} again", task, cluster.ps_addresses().at(task));
      rebuilt = strategy_.RebuildBackups(vacant_);
    } else {
      rebuilt = Annotate(node.status(), absl::StrCat("no node for the lost ps ", task));
    }
  }
  if (!rebuilt.ok()) {
    Log().warn("{} shard(s) stay without a backup: {}", strategy_.ShardsWithoutBackup(),
               rebuilt.status().message());
    return;
  }
  if (*rebuilt > 0) {
    Log().info("rebuilt {} backup(s) in {:.2f} s; every shard is replicated again", *rebuilt,
               absl::ToDoubleSeconds(absl::Now() - start));
  }
}

void ClusterCoordinator::Resume(int32_t task, const ps_node_actor& node, PsRecovery report) {
  if (node) {
    caf::anon_send(actor_, watch_ps_atom::value, node, task, strategy_.DescribePlacement(task));
  }
  ++generation_;
  caf::anon_send(actor_, directory_atom::value, Directory());
  if (report.promoted) {
    std::vector<std::string> holders;
    for (int32_t t = 0; t < strategy_.cluster().num_ps(); ++t) {
      if (strategy_.DescribePlacement(t) != "(none)") holders.push_back(absl::StrCat("ps ", t));
    }
    report.node = absl::StrJoin(holders, ", ");
  } else {
    report.node = strategy_.cluster().ps_addresses().at(task);
  }
  absl::MutexLock lock(&mu_);
  recoveries_.push_back(std::move(report));
}

std::vector<PsRecovery> ClusterCoordinator::recoveries() const {
  absl::MutexLock lock(&mu_);
  return recoveries_;
}

absl::Status ClusterCoordinator::WaitForWorkers(int32_t min_workers, absl::Duration timeout) {
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

absl::StatusOr<RemoteValue> ClusterCoordinator::Schedule(const std::string& function,
                                                         ClosureValues args,
                                                         std::optional<int64_t> step) {
  if (absl::StatusOr<const ReplicaFunction*> fn = registry_->FindReplicaFunction(function);
      !fn.ok()) {
    return fn.status();
  }
  // Note [Closure ids that survive a restart] (core/scheduling/closure_queue.h).
  std::optional<ClosureId> id;
  if (step.has_value() && options_.queue_identity.has_value()) {
    if (*step < 0 || *step >= kFirstUnnumberedId - 1) {
      return absl::InvalidArgumentError(absl::StrCat("step ", *step, " is out of range"));
    }
    id = *step + 1;
  }
  bool was_empty = false;
  absl::StatusOr<RemoteValue> value = queue_->Enqueue(function, std::move(args), &was_empty, id);
  // Into a non-empty queue, every worker is busy and pulls the next closure when it finishes.
  if (value.ok() && was_empty) caf::anon_send(actor_, dispatch_atom::value);
  return value;
}

uint64_t ClusterCoordinator::queue_identity() const { return queue_->identity(); }

WorkerPoolStatus ClusterCoordinator::workers() const {
  caf::scoped_actor self(system_);
  WorkerPoolStatus out;
  self->request(actor_, caf::infinite, workers_atom::value)
      .receive([&](WorkerPoolStatus& status) { out = std::move(status); }, [](caf::error&) {});
  return out;
}

bool ClusterCoordinator::KillWorker(int32_t slot) {
  caf::scoped_actor self(system_);
  bool killed = false;
  self->request(actor_, caf::infinite, kill_worker_atom::value, slot)
      .receive([&](bool k) { killed = k; }, [](caf::error&) {});
  return killed;
}

void ClusterCoordinator::RestartWorker(int32_t slot, absl::Duration delay) {
  caf::anon_send(actor_, restart_atom::value, slot, Millis(delay));
}

void ClusterCoordinator::SetFaultInjector(std::shared_ptr<FaultInjector> injector) {
  caf::anon_send(actor_, chaos_atom::value, std::move(injector));
}

void ClusterCoordinator::InjectWorkerFailures(int32_t failures, int64_t closures, uint64_t seed,
                                              absl::Duration restart_delay) {
  SetFaultInjector(KillBusyWorkersAtCompletions(
      failures, closures, seed, std::chrono::milliseconds(Millis(restart_delay))));
}

}  // namespace tessera
