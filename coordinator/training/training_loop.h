// The training loop, once for every way of training: a StepExecutor takes the steps (closures on
// parameter servers, requests to the mirrored replicas, one thread locally), and RunTrainingLoop
// does everything around them the same way in every mode — the progress line, the monitor's
// record, the checkpoint cadence, the validations, the examples/s of each pass, the final loss
// over the last 5% of the schedule, and recovery when the executor can recover.
//
// Example (a fake executor of a test: every step done at once):
//   class Instant : public StepExecutor {
//     absl::StatusOr<Advanced> Advance(int64_t next, int64_t) override {
//       return Advanced{{CompletedStep{32, 0.5, absl::Now()}}, 1};
//     }
//     absl::StatusOr<std::vector<CompletedStep>> Drain() override { return {}; }
//   };
//   Instant steps;
//   TESSERA_ASSIGN_OR_RETURN(TrainingRun run, RunTrainingLoop(steps, 0, 100, "demo"));
//
// Thread-safety: call from the driver's thread; a cadence's checkpoint runs on a thread of its own.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/training/training_run.h"
#include "tessera/env.h"

namespace tessera {

// One completed training step, as its executor reports it.
struct CompletedStep {
  int64_t examples = 0;
  double loss = 0;      // the step's mean loss
  absl::Time finished;  // when it completed: a pass's last step ends the pass's examples/s
};

// A validation started at a step; on parameter servers the workers evaluate while training goes
// on, elsewhere it is ready when started.
class RunningEvaluation {
 public:
  virtual ~RunningEvaluation() = default;
  // Whether Result() would not wait.
  virtual bool ready() const = 0;
  // Waits for the figures (called once).
  virtual absl::StatusOr<EvalResult> Result() = 0;
};

// An evaluation that was over when it started (the mirrored and local ones).
std::unique_ptr<RunningEvaluation> FinishedEvaluation(absl::StatusOr<EvalResult> result);

// A way of taking training steps, which RunTrainingLoop drives.
class StepExecutor {
 public:
  virtual ~StepExecutor() = default;

  struct Advanced {
    // The steps completed since the last call, in step order (perhaps none: the steps in flight
    // complete later).
    std::vector<CompletedStep> completed;
    int64_t started = 0;  // steps started by this call, >= 1
  };
  // Starts the steps from global step `next` on, as many at once as the executor takes, none at
  // or past `limit` (> next).
  virtual absl::StatusOr<Advanced> Advance(int64_t next, int64_t limit) = 0;
  // Waits for every step started; returns those completed since the last call, in order.
  virtual absl::StatusOr<std::vector<CompletedStep>> Drain() = 0;

  // After `failure` of Advance, Drain, or the cadence's checkpoint or evaluation, with training
  // at global step `step`: the step training goes on from once the executor recovered (a lost
  // replica replaced and every replica restored from the latest checkpoint: an earlier step; the
  // survivors agreeing on the steps they applied: a later one, those steps taken without an
  // outcome), and a line saying what happened; or `failure` itself, or the recovery's error,
  // when it cannot. The default cannot.
  struct Recovery {
    int64_t step = 0;
    std::string note;
  };
  virtual absl::StatusOr<Recovery> Recover(const absl::Status& failure, int64_t step);

  // What reads the cluster's figures for the monitor's points (ReadClusterFigures); null: there
  // is no cluster to read.
  virtual std::function<ClusterFigures()> figures() { return nullptr; }
};

// Called with the global step reached, after every started step completed; what a checkpoint
// cadence runs. It must call `on_cut` (once, when not null) as soon as training may go on —
// every shard has copied its state (Note [Checkpoints without pausing],
// coordinator/checkpoint/save_restore.cc) — or end without calling it. Returns the checkpoint's
// directory once written.
using CheckpointFunction =
    std::function<absl::StatusOr<std::string>(int64_t global_step, std::function<void()> on_cut)>;
// Starts a validation of the model as it is at a global step.
using EvaluateFunction =
    std::function<absl::StatusOr<std::unique_ptr<RunningEvaluation>>(int64_t global_step)>;

// What runs between steps.
struct StepCadence {
  // Every `checkpoint_every` steps (0: never; never at the last step, which the caller saves):
  // drain the executor and start `checkpoint`. In the background (`checkpoint_in_background`),
  // training goes on once it has taken its cut; at most one checkpoint is written at a time (the
  // next one, or the end of training, waits for the previous to be written first); one that
  // fails with Unavailable (a PS lost while it was written) is skipped with a warning, and any
  // other error ends the run. In the foreground, training waits for the whole checkpoint, and a
  // failure goes to the executor's Recover. A checkpoint is announced (a line above the progress
  // line: its step, directory and the seconds it took) and recorded in the monitor once it is
  // written, not before: a background one as soon as its writer ends.
  int64_t checkpoint_every = 0;
  // Also (0: never by time) once this many seconds have passed since training started or the
  // last checkpoint began, whichever is later (TF's save_checkpoints_secs): the cost of a
  // checkpoint then stays a bounded share of the run however fast its steps are.
  double checkpoint_every_seconds = 0;
  // The clock those seconds, and a checkpoint's duration, are measured on: an Env's Now() (a
  // test's MemEnv, whose clock the test moves); null: the machine's monotonic clock.
  Env* clock = nullptr;
  CheckpointFunction checkpoint;
  bool checkpoint_in_background = true;
  // Every `eval_every` steps (0: never; never at the last step, which the caller evaluates):
  // start `evaluate`; its result is printed once ready and recorded in TrainingRun::evaluations.
  int64_t eval_every = 0;
  EvaluateFunction evaluate;
  // The steps of one pass over the training set (0: unknown): each whole pass's examples/s is
  // recorded in TrainingRun::examples_per_sec_by_pass.
  int64_t pass_steps = 0;
};

// When a training loop checkpoints, by StepCadence's two measures: at every multiple of
// `every_steps` and once `every_seconds` have passed since training or the last checkpoint began
// (0: never by that measure), never at the last step of `steps` (the caller saves that one).
// Time is `clock`'s Now() when one is given (a test's MemEnv, whose clock it moves); by default
// the machine's monotonic clock, which a change of the wall clock cannot move.
class CheckpointClock {
 public:
  CheckpointClock(int64_t every_steps, double every_seconds, int64_t steps, Env* clock = nullptr);
  // Whether a checkpoint is due once `reached` steps are done.
  bool Due(int64_t reached) const;
  // A checkpoint begins now: the time measure starts over.
  void Began();
  // Now, in seconds of the clock's own origin: what a checkpoint's duration is measured on.
  double Seconds() const;

 private:

  const int64_t every_steps_;
  const double every_seconds_;
  const int64_t steps_;
  Env* const clock_;  // null: the monotonic clock
  double last_;
};

// Takes global steps `first_step`..`steps` - 1 with `executor`, running `cadence` between them,
// then drains it. Prints the progress line labelled `label` ("\r"-rewritten on a terminal, a
// plain line every few seconds otherwise), each validation and each recovery. Returns the run's
// figures: steps and examples count only this run's steps; final_loss is the example-weighted
// mean loss of the steps past `steps` - max(1, `steps` / 20), the last 5% of the schedule. Errors:
// the first the executor, `checkpoint` or an evaluation raised that the executor did not recover
// from. With a `monitor`: BeginTraining, every completed step (with the executor's figures at
// each interval's close), validation, checkpoint (with the seconds it took) and the executor's
// last figures recorded, and EndTraining once drained; the caller Finishes it.
absl::StatusOr<TrainingRun> RunTrainingLoop(StepExecutor& executor, int64_t first_step,
                                            int64_t steps, const std::string& label,
                                            const StepCadence& cadence = {},
                                            TrainingMonitor* monitor = nullptr);

}  // namespace tessera
