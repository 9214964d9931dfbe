// ClusterCoordinatorTesting: fault injection, kept out of ClusterCoordinator's API — killing one
// worker and starting it again (tests), and handing the coordinator's dispatch a FaultInjector
// (chaos runs: the drivers' --inject_worker_failures). Header-only: nothing but the code that
// includes it carries it.
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
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/time/time.h"
#include "actors/scheduling/fault_injector.h"
#include "coordinator/scheduling/cluster_coordinator.h"

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
};

}  // namespace tessera
