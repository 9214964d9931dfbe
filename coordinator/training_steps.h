// The scheduling loop of a training run: one kTrainStep closure per step (train_step_closure.h),
// kept in flight on a ClusterCoordinator, with a checkpoint every few steps and the progress
// line.
//
// Thread-safety: call from the driver's thread (it blocks on the coordinator).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/cluster_coordinator.h"
#include "coordinator/training_run.h"

namespace tessera {

// Called with the global step reached; what a checkpoint cadence runs.
using CheckpointFunction = std::function<absl::Status(int64_t global_step)>;

// Schedules kTrainStep(first_step), ..., kTrainStep(steps - 1) on `coordinator`, whose registry
// must hold RegisterTrainStep's functions. Every `checkpoint_every` steps (0: never; never at
// `steps` itself, which the caller saves) it joins and calls `checkpoint(global_step)`. Prints
// the progress line labelled `label` ("\r"-rewritten on a terminal, a plain line every few
// seconds otherwise), then joins. Returns the run's figures (steps counts only this run's), or
// the first error a closure or `checkpoint` raised.
absl::StatusOr<TrainingRun> RunTrainingSteps(ClusterCoordinator& coordinator, int64_t first_step,
                                             int64_t steps, int64_t batch_size,
                                             const std::string& label, int64_t checkpoint_every = 0,
                                             const CheckpointFunction& checkpoint = nullptr);

}  // namespace tessera
