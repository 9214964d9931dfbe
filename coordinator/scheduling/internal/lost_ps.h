// ClosureScheduler::LostPs: what waits for the coordinator's recovery thread — the PS tasks
// lost, the backups that failed and the rebuilds to do (and how many were done). The loss handlers
// set up in Create (cluster_coordinator.cc) fill it; the recovery thread (ps_recovery.cc) empties
// it; Join waits on it for the restores.
//
// Thread-safety: every field is guarded by `mu`; `changed` is signalled on every change.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "coordinator/scheduling/cluster_coordinator.h"

namespace tessera {

struct ClosureScheduler::LostPs {
  absl::Mutex mu;
  absl::CondVar changed;
  std::deque<int32_t> tasks ABSL_GUARDED_BY(mu);
  int32_t restoring ABSL_GUARDED_BY(mu) = 0;  // queued or in progress
  // Tasks lost whose shards need new backups (shard_copies 2), done when no loss waits: training
  // does not wait for them.
  std::deque<int32_t> rebuilds ABSL_GUARDED_BY(mu);
  int64_t rebuilds_done ABSL_GUARDED_BY(mu) = 0;  // finished, well or not (tests wait on it)
  // Shards whose backup failed, with that backup (Note [A lost backup is replaced]).
  std::deque<std::pair<std::string, caf::actor_addr>> lost_backups ABSL_GUARDED_BY(mu);
  bool stop ABSL_GUARDED_BY(mu) = false;
};

}  // namespace tessera
