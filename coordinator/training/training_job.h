// RunTrainingJob (tessera/training.h) with a monitor the caller holds: the run is recorded in
// `monitor` as it goes (coordinator/monitoring/training_monitor.h), so the caller can read it
// while the job runs and after (a test, a program with a dashboard of its own). The public
// RunTrainingJob makes one itself (Note [The run's monitor] in training_job.cc).
//
// Thread-safety: call from the main thread (it blocks until the job is over).
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "coordinator/monitoring/training_monitor.h"
#include "tessera/training.h"

namespace tessera {

// RunTrainingJob(job, flags), recording the run in `monitor` (not null).
absl::Status RunTrainingJob(const TrainingJob& job, const TrainingFlags& flags,
                            std::shared_ptr<TrainingMonitor> monitor);

}  // namespace tessera
