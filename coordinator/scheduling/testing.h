// ClusterCoordinatorTesting: fault injection, kept out of ClusterCoordinator's API — killing one
// worker and starting it again (tests), handing the coordinator's dispatch a FaultInjector
// (chaos runs: the drivers' --inject_worker_failures; a test's injector may count its hooks to
// wait for a change), and waiting for a PS recovery or a rebuild of backups. Header-only: nothing
// but the code that includes it carries it.
//
// Example:
//   CHECK(ClusterCoordinatorTesting::KillWorker(*coordinator, 0));
//   ClusterCoordinatorTesting::RestartWorker(*coordinator, 0, absl::Milliseconds(5));
//   ClusterCoordinatorTesting::SetFaultInjector(
//       *coordinator, KillRandomWorkerEvery(std::chrono::milliseconds(10), /*seed=*/5,
//                                           std::chrono::seconds(1)));
//
// Thread-safety: as ClusterCoordinator's calls: safe from any non-actor thread.
#pragma once

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actors/scheduling/fault_injector.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/scheduling/internal/lost_ps.h"

namespace tessera {

class ClusterCoordinatorTesting {
 public:
  // Kills the worker in `slot` now (its closure is re-run elsewhere); false when none lives.
  static bool KillWorker(ClusterCoordinator& coordinator, int32_t slot) {
    caf::scoped_actor self(coordinator.scheduler().system_);
    bool killed = false;
    self->request(coordinator.scheduler().actor_, caf::infinite, kill_worker_atom::value, slot)
        .receive([&](bool k) { killed = k; }, [](caf::error&) {});
    return killed;
  }

  // Starts a worker in `slot` after `delay` (a preempted machine coming back).
  static void RestartWorker(ClusterCoordinator& coordinator, int32_t slot,
                            absl::Duration delay = absl::ZeroDuration()) {
    caf::anon_send(coordinator.scheduler().actor_, restart_atom::value, slot,
                   absl::ToInt64Milliseconds(delay));
  }

  // Hands the coordinator's dispatch `injector` (actors/scheduling/fault_injector.h), in place of
  // any earlier one; null removes it. Without one (the default) no fault is injected.
  static void SetFaultInjector(ClusterCoordinator& coordinator,
                               std::shared_ptr<FaultInjector> injector) {
    caf::anon_send(coordinator.scheduler().actor_, chaos_atom::value, std::move(injector));
  }

  // SetFaultInjector(KillBusyWorkersAtCompletions(...)): kills `failures` workers, each in the
  // middle of a closure, at random points of the next `closures` completions; each comes back
  // after `restart_delay` (the drivers' --inject_worker_failures).
  static void InjectWorkerFailures(ClusterCoordinator& coordinator, int32_t failures,
                                   int64_t closures, uint64_t seed, absl::Duration restart_delay) {
    SetFaultInjector(coordinator, KillBusyWorkersAtCompletions(
                                      failures, closures, seed,
                                      std::chrono::milliseconds(
                                          absl::ToInt64Milliseconds(restart_delay))));
  }

  // Whether `coordinator` has made `n` PS recoveries (recoveries()), waiting up to `limit` for
  // them: the recovery thread wakes the waiter.
  static bool AwaitRecoveries(ClusterCoordinator& coordinator, size_t n, absl::Duration limit) {
    ClosureScheduler& scheduler = coordinator.scheduler();
    absl::MutexLock lock(&scheduler.mu_);
    auto made = [&scheduler, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(scheduler.mu_) {
      return scheduler.recoveries_.size() >= n;
    };
    return scheduler.mu_.AwaitWithTimeout(absl::Condition(&made), limit);
  }

  // Whether `coordinator`'s recovery thread has done `n` rebuilds of backups (of a lost PS's
  // shards, or of one failed backup's), waiting up to `limit` for them.
  static bool AwaitRebuilds(ClusterCoordinator& coordinator, int64_t n, absl::Duration limit) {
    ClosureScheduler::LostPs& lost = *coordinator.scheduler().lost_;
    absl::MutexLock lock(&lost.mu);
    auto done = [&lost, n]()
                    ABSL_EXCLUSIVE_LOCKS_REQUIRED(lost.mu) { return lost.rebuilds_done >= n; };
    return lost.mu.AwaitWithTimeout(absl::Condition(&done), limit);
  }
};

}  // namespace tessera
