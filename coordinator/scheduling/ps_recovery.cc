// The coordinator's PS recovery (ClosureScheduler's) (what happens when a PS is lost:
// ps_recovery.h): the recovery thread and the ways it restores a lost PS — re-adopted, its backups
// promoted, or restored from a checkpoint — and the failed backups it strikes and rebuilds.
#include "coordinator/scheduling/ps_recovery.h"

#include <algorithm>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/error.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/scheduling/internal/lost_ps.h"
#include "core/base/logging.h"
#include "tessera/status.h"

namespace tessera {

// A lost PS first (training waits for it), then the failed backups (their primaries hold their
// acknowledgements until struck), then the rebuilds (nobody waits for them).
void ClosureScheduler::RecoveryLoop() {
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
      absl::MutexLock lock(&lost_->mu);
      ++lost_->rebuilds_done;
      lost_->changed.SignalAll();
      continue;
    }
    Recover(task);
    absl::MutexLock lock(&lost_->mu);
    --lost_->restoring;
    if (strategy_.shard_copies() > 1) lost_->rebuilds.push_back(task);
    lost_->changed.SignalAll();
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
void ClosureScheduler::Recover(int32_t task) {
  const absl::Time start = absl::Now();
  if (Readopt(task, start)) return;
  if (strategy_.shard_copies() > 1 && Failover(task, start)) return;
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
  if (run_.recovery_checkpoints.empty()) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("it is gone (its connection closed and its address does not answer: the "
                     "process died, killed, crashed or out of memory; its own log or the "
                     "kernel's says which), ",
                     strategy_.shard_copies() > 1 ? "its shards have no backup left, "
                                                  : "its shards have no backup, ",
                     "and there is no --checkpoint_dir to restore them from")));
  }
  std::optional<std::string> latest = CheckpointManager(run_.recovery_checkpoints, 1).Latest();
  if (!latest.has_value()) {
    return fail(absl::NotFoundError(
        absl::StrCat("no checkpoint in ", run_.recovery_checkpoints,
                     " to restore its shards from yet: the run cannot continue")));
  }
  Log().warn(
      "ps {} ({}) lost (its connection closed and its address does not answer); restoring "
      "{} from {} onto {}",
      task, address, placement, *latest,
      cluster.spec()->ps_standby.empty()
          ? "a PS started again at its address"
          : "a standby (or a PS started again at its address, once none is left)");
  absl::StatusOr<ps_node_actor> node = cluster.actors().ReplacePs(task);
  if (!node.ok()) return fail(node.status());
  vacant_.erase(std::remove(vacant_.begin(), vacant_.end(), task), vacant_.end());
  if (absl::StatusOr<std::vector<std::string>> moved = strategy_.placement().RecreateShardsOn(task);
      !moved.ok()) {
    return fail(moved.status());
  }
  absl::StatusOr<int64_t> step = RestoreShardsOf(strategy_, *latest, task, run_.recovery_run);
  if (!step.ok()) return fail(step.status());
  PsRecovery report;
  report.ps_task = task;
  report.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  report.checkpoint = *latest;
  report.checkpoint_step = *step;
  report.lost_steps = std::max<int64_t>(0, run_.first_step + completed - *step);
  Log().info(
      "ps {} restored on {} from {} (step {}) in {:.2f} s; the updates of {} steps to its "
      "shards were lost",
      task, cluster.ps_addresses().at(task), *latest, *step, report.seconds, report.lost_steps);
  Resume(task, *node, std::move(report));
}

bool ClosureScheduler::Readopt(int32_t task, absl::Time start) {
  constexpr absl::Duration kReadoptConnectTimeout = absl::Milliseconds(500);
  Cluster& cluster = strategy_.cluster();
  absl::StatusOr<ps_node_actor> node = cluster.actors().ReconnectPs(task, kReadoptConnectTimeout);
  if (!node.ok()) return false;  // gone: the checkpoint path says so
  std::map<std::string, shard_actor> held;
  std::vector<std::string> without_backup;  // primaries whose backup failed while cut off
  absl::Status asked;
  caf::scoped_actor self(system_);
  const std::string run = run_.recovery_run.empty() ? std::string() : run_.recovery_run.ToString();
  self->request(*node, std::chrono::seconds(10), reclaim_atom::value, cluster.actors().session(),
                run)
      .receive(
          [&](std::vector<HeldShard>& shards) {
            for (HeldShard& shard : shards) {
              if (!shard.backed_up) without_backup.push_back(shard.name);
              held.emplace(shard.name, std::move(shard.shard));
            }
          },
          [&](caf::error& err) { asked = ErrorToStatus(err); });
  if (asked.ok()) asked = strategy_.placement().AdoptShardsOn(task, held);
  if (!asked.ok()) {
    if (!held.empty()) {
      Log().warn("ps {} gave back only part of its shards ({}): dropping them to restore all", task,
                 asked.message());
    }
    for (const auto& [name, shard] : held) {
      self->request(*node, std::chrono::seconds(10), drop_shard_atom::value, name,
                    cluster.actors().session())
          .receive([] {}, [](caf::error&) {});
    }
    return false;
  }
  // A backup that failed while this coordinator was cut off was reported to nobody, and its
  // primary still holds its acknowledgements: struck now (Note [A lost backup is replaced]).
  {
    absl::MutexLock lock(&lost_->mu);
    for (const std::string& name : without_backup) {
      if (std::optional<caf::actor_addr> backup = strategy_.placement().BackupOf(name, task);
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
// With shard backups (Note [Backups on the next PS], coordinator/ps/strategy.h) every shard of a
// lost PS has a backup on another, live one that holds every update the shard acknowledged: a
// change is acknowledged only once its backup has applied it (Note [Shard backups], actors/ps/
// shard_actor.h). So the recovery, once re-adoption failed (the process is gone), points the
// variables at the backups and publishes the directory at once: nothing is read from a
// checkpoint, no acknowledged update is lost, and a closure that ran when the PS died runs again
// with its updates' ids, which the backups' ledgers know (Note [Exactly-once updates]). The lost
// task is vacant — the directory names no address for it, so workers do not wait for it —
// until RebuildBackups finds it a node (a standby, or its process started again) when no other
// loss waits; then every shard without a backup gets one, on that node or another live one,
// filled with its primary's state. Until then those shards are without a backup: a second loss
// before the rebuild that takes a shard's last copy sends that PS's shards, all of them, down the
// checkpoint path (PromoteBackupsOf promotes a PS's backups all or none). A PS that held only
// backups costs nothing but their rebuild.
bool ClosureScheduler::Failover(int32_t task, absl::Time start) {
  Cluster& cluster = strategy_.cluster();
  const std::string placement = strategy_.DescribePlacement(task);
  absl::StatusOr<std::vector<std::string>> promoted = strategy_.placement().PromoteBackupsOf(task);
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
void ClosureScheduler::ReplaceLostBackup(const std::string& shard, const caf::actor_addr& backup) {
  absl::StatusOr<int32_t> task = strategy_.placement().StrikeBackup(shard, backup);
  if (!task.ok()) {
    Log().debug("{}: nothing to strike ({})", shard, task.status().message());
    return;
  }
  Log().warn("the backup of {} on ps {} failed: struck, a new one follows", shard, *task);
  absl::MutexLock lock(&lost_->mu);
  lost_->rebuilds.push_back(*task);
  lost_->changed.SignalAll();
}

void ClosureScheduler::RebuildBackups(int32_t task) {
  Cluster& cluster = strategy_.cluster();
  const absl::Time start = absl::Now();
  // First onto the live tasks; the lost task's node only when some shard finds none besides its
  // own (two PS), since waiting for a node can take the whole connect timeout.
  absl::StatusOr<int32_t> rebuilt = strategy_.placement().RebuildBackups(vacant_);
  const bool vacant = std::find(vacant_.begin(), vacant_.end(), task) != vacant_.end();
  if (!rebuilt.ok() && vacant) {
    Log().info("ps {}: waiting for a node to hold the backups ({})", task,
               rebuilt.status().message());
    absl::StatusOr<ps_node_actor> node = cluster.actors().ReplacePs(task);
    if (node.ok()) {
      vacant_.erase(std::remove(vacant_.begin(), vacant_.end(), task), vacant_.end());
      caf::anon_send(actor_, watch_ps_atom::value, *node, task, strategy_.DescribePlacement(task));
      // The same generation: no shard moved, workers need not join again.
      caf::anon_send(actor_, directory_atom::value, Directory());
      Log().info("ps {} is served by {} again", task, cluster.ps_addresses().at(task));
      rebuilt = strategy_.placement().RebuildBackups(vacant_);
    } else {
      rebuilt = Annotate(node.status(), absl::StrCat("no node for the lost ps ", task));
    }
  }
  if (!rebuilt.ok()) {
    Log().warn("{} shard(s) stay without a backup: {}", strategy_.placement().ShardsWithoutBackup(),
               rebuilt.status().message());
    return;
  }
  if (*rebuilt > 0) {
    Log().info("rebuilt {} backup(s) in {:.2f} s; every shard has a backup again", *rebuilt,
               absl::ToDoubleSeconds(absl::Now() - start));
  }
}

void ClosureScheduler::Resume(int32_t task, const ps_node_actor& node, PsRecovery report) {
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

std::vector<PsRecovery> ClosureScheduler::recoveries() const {
  absl::MutexLock lock(&mu_);
  return recoveries_;
}

}  // namespace tessera
