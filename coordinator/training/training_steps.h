// Training steps on parameter servers: one kTrainStep closure per step (train_step_closure.h),
// kept in flight on a ClusterCoordinator — the StepExecutor of the training loop
// (training_loop.h) under the parameter-server strategy.
//
// Thread-safety: call from the driver's thread (it blocks on the coordinator).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/training/distributed_evaluation.h"
#include "coordinator/training/training_loop.h"
#include "coordinator/training/training_run.h"

namespace tessera {

// Schedules kTrainStep(step) on `coordinator` for each step it is asked, the batch index being
// the global step, and reports each closure's loss and examples once it resolved; its registry
// must hold RegisterTrainStep's functions. Its figures are the coordinator's
// (ReadClusterFigures).
std::unique_ptr<StepExecutor> ClosureSteps(ClusterCoordinator& coordinator);

// A validation on the workers while training goes on (PendingEvaluation::Schedule, whose
// kEvalStep RegisterEvalStep registered).
absl::StatusOr<std::unique_ptr<RunningEvaluation>> EvaluateOnWorkers(
    ClusterCoordinator& coordinator, const Model& model, int64_t test_examples, int64_t step);

// RunTrainingLoop over ClosureSteps(coordinator): kTrainStep(first_step), ...,
// kTrainStep(steps - 1), with `cadence` between them (its evaluate, when set, starting
// RegisterEvalStep's closures).
absl::StatusOr<TrainingRun> RunTrainingSteps(ClusterCoordinator& coordinator, int64_t first_step,
                                             int64_t steps, const std::string& label,
                                             const StepCadence& cadence = {},
                                             TrainingMonitor* monitor = nullptr);

}  // namespace tessera
