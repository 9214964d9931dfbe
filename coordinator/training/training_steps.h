// The scheduling loop of a training run: one kTrainStep closure per step (train_step_closure.h),
// kept in flight on a ClusterCoordinator, with a checkpoint and a validation every few steps and
// the progress line.
//
// Thread-safety: call from the driver's thread (it blocks on the coordinator).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/training/distributed_evaluation.h"
#include "coordinator/training/training_run.h"

namespace tessera {

// Called with the global step reached, on a thread of its own; what a checkpoint cadence runs. It
// must call `on_cut` (once) as soon as training may go on — every shard has copied its state (Note
// [Checkpoints without pausing], coordinator/checkpoint/save_restore.cc) — or end without calling
// it. Returns the checkpoint's directory once written.
using CheckpointFunction =
    std::function<absl::StatusOr<std::string>(int64_t global_step, std::function<void()> on_cut)>;
// Starts an evaluation of the model as it is at a global step (PendingEvaluation::Schedule).
using EvaluateFunction = std::function<absl::StatusOr<PendingEvaluation>(int64_t global_step)>;

// What runs between steps.
struct StepCadence {
  // Every `checkpoint_every` steps (0: never; never at the last step, which the caller saves):
  // join the coordinator, start `checkpoint` and go on training once it has taken its cut. At
  // most one checkpoint is written at a time: the next one (or the end of training) waits for
  // the previous to be written first. A checkpoint that fails with Unavailable (a PS lost while
  // it was written) is skipped with a warning; any other error ends the run.
  int64_t checkpoint_every = 0;
  // Also (0: never by time) once this many seconds have passed since training started or the
  // last checkpoint began, whichever is later (TF's save_checkpoints_secs): the cost of a
  // checkpoint then stays a bounded share of the run however fast its steps are.
  double checkpoint_every_seconds = 0;
  CheckpointFunction checkpoint;
  // Every `eval_every` steps (0: never; never at the last step, which the caller evaluates):
  // start `evaluate`, without pausing training; its result is printed once ready and recorded in
  // TrainingRun::evaluations.
  int64_t eval_every = 0;
  EvaluateFunction evaluate;
  // The steps of one pass over the training set (0: unknown): each whole pass's examples/s is
  // recorded in TrainingRun::examples_per_sec_by_pass.
  int64_t pass_steps = 0;
};

// When a training loop checkpoints, by StepCadence's two measures: at every multiple of
// `every_steps` and once `every_seconds` have passed since training or the last checkpoint began
// (0: never by that measure), never at the last step of `steps` (the caller saves that one).
class CheckpointClock {
 public:
  CheckpointClock(int64_t every_steps, double every_seconds, int64_t steps);
  // Whether a checkpoint is due once `reached` steps are done.
  bool Due(int64_t reached) const;
  // A checkpoint begins now: the time measure starts over.
  void Began();

 private:
  const int64_t every_steps_;
  const double every_seconds_;
  const int64_t steps_;
  double last_;
};

// Schedules kTrainStep(first_step), ..., kTrainStep(steps - 1) on `coordinator`, whose registry
// must hold RegisterTrainStep's functions (and RegisterEvalStep's for evaluations), running
// `cadence` between them. Prints the progress line labelled `label` ("\r"-rewritten on a
// terminal, a plain line every few seconds otherwise) and each validation, then joins. Returns the
// run's figures (steps counts only this run's), or the first error a closure, `checkpoint` or an
// evaluation raised. With a `monitor`: BeginTraining, every completed step (the coordinator's
// figures at each interval's close: ReadClusterFigures), validation and checkpoint (with the
// seconds it took) recorded, and EndTraining once joined; the caller Finishes it.
absl::StatusOr<TrainingRun> RunTrainingSteps(ClusterCoordinator& coordinator, int64_t first_step,
                                             int64_t steps, const std::string& label,
                                             const StepCadence& cadence = {},
                                             TrainingMonitor* monitor = nullptr);

}  // namespace tessera
