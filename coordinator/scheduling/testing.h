// ClusterCoordinatorTesting: fault injection for tests, kept out of ClusterCoordinator's API —
// killing one worker and starting it again. (Chaos runs inject failures through
// ClusterCoordinator::SetFaultInjector and InjectWorkerFailures.) Header-only: nothing but the
// tests that include it carries it.
//
// Example:
//   CHECK(ClusterCoordinatorTesting::KillWorker(*coordinator, 0));
//   ClusterCoordinatorTesting::RestartWorker(*coordinator, 0, absl::Milliseconds(5));
//
// Thread-safety: as ClusterCoordinator's calls: safe from any non-actor thread.
#pragma once

#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <cstdint>

#include "absl/time/time.h"
#include "coordinator/scheduling/cluster_coordinator.h"

namespace tessera {

class ClusterCoordinatorTesting {
 public:
  // Kills the worker in `slot` now (its closure is re-run elsewhere); false when none lives.
  static bool KillWorker(ClusterCoordinator& coordinator, int32_t slot) {
    caf::scoped_actor self(coordinator.system_);
    bool killed = false;
    self->request(coordinator.actor_, caf::infinite, kill_worker_atom::value, slot)
        .receive([&](bool k) { killed = k; }, [](caf::error&) {});
    return killed;
  }

  // Starts a worker in `slot` after `delay` (a preempted machine coming back).
  static void RestartWorker(ClusterCoordinator& coordinator, int32_t slot,
                            absl::Duration delay = absl::ZeroDuration()) {
    caf::anon_send(coordinator.actor_, restart_atom::value, slot,
                   absl::ToInt64Milliseconds(delay));
  }
};

}  // namespace tessera
