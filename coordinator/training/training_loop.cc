#include "coordinator/training/training_loop.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "coordinator/monitoring/internal/progress.h"
#include "coordinator/training/distributed_evaluation.h"
#include "core/base/logging.h"
#include "core/base/process.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// A checkpoint being written while training goes on (StepCadence::checkpoint_in_background).
// Its duration is measured on `clock`, from the start to the end of its writing; training's pause
// for its cut on the machine's monotonic clock.
class BackgroundSave {
 public:
  // Starts `checkpoint(step, ...)` on a thread of its own; returns once it has taken its cut or
  // ended. `written(dir, seconds)` runs on that thread once the checkpoint is written (not when it
  // failed).
  BackgroundSave(const CheckpointFunction& checkpoint, int64_t step, const CheckpointClock& clock,
                 std::function<void(const std::string& dir, double seconds)> written)
      : step_(step), clock_(clock), start_(clock.Seconds()) {
    const double pause_start = internal::MonotonicSeconds();
    thread_ = std::thread([this, checkpoint, written = std::move(written)] {
      absl::StatusOr<std::string> result = checkpoint(step_, [this] { Mark(&cut_); });
      const double seconds = clock_.Seconds() - start_;
      if (result.ok() && written) written(*result, seconds);
      absl::MutexLock lock(&mu_);
      result_ = std::move(result);
      seconds_ = seconds;
      ended_ = true;
    });
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](BackgroundSave* save) { return save->cut_ || save->ended_; }, this));
    pause_seconds_ = internal::MonotonicSeconds() - pause_start;
  }
  ~BackgroundSave() {
    if (thread_.joinable()) thread_.join();
  }

  int64_t step() const { return step_; }
  // How long training waited for the cut.
  double pause_seconds() const { return pause_seconds_; }
  // Whether the writing has ended (Finish will not wait).
  bool ended() {
    absl::MutexLock lock(&mu_);
    return ended_;
  }
  // Waits until the checkpoint is written: its directory, or its error; and the seconds the
  // writing took.
  std::pair<absl::StatusOr<std::string>, double> Finish() {
    thread_.join();
    absl::MutexLock lock(&mu_);
    return {std::move(result_), seconds_};
  }

 private:
  void Mark(bool* flag) {
    absl::MutexLock lock(&mu_);
    *flag = true;
  }

  const int64_t step_;
  const CheckpointClock& clock_;
  const double start_;
  double pause_seconds_ = 0;
  absl::Mutex mu_;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<std::string> result_ ABSL_GUARDED_BY(mu_);
  double seconds_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

class Finished final : public RunningEvaluation {
 public:
  explicit Finished(absl::StatusOr<EvalResult> result) : result_(std::move(result)) {}
  bool ready() const override { return true; }
  absl::StatusOr<EvalResult> Result() override { return std::move(result_); }

 private:
  absl::StatusOr<EvalResult> result_;
};

// What a run records of its steps as they complete: the counts, the final loss window, each
// pass's examples/s, the progress line and the monitor.
class StepRecord {
 public:
  StepRecord(const std::string& label, int64_t first_step, int64_t steps, int64_t pass_steps,
             TrainingMonitor* monitor, std::function<ClusterFigures()> figures, TrainingRun& run)
      : progress_(label, first_step, steps),
        done_(first_step),
        tail_start_(steps - std::max<int64_t>(1, steps / 20)),
        pass_steps_(pass_steps),
        whole_pass_(pass_steps > 0 && first_step % pass_steps == 0),
        pass_start_(absl::Now()),
        monitor_(monitor),
        figures_(std::move(figures)),
        run_(run) {}

  internal::Progress& progress() { return progress_; }
  // The example-weighted mean loss of the steps in the final window.
  double final_loss() const {
    return tail_examples_ > 0 ? tail_loss_ / static_cast<double>(tail_examples_) : 0;
  }

  // Steps taken together (one Advance or Drain), in step order: the monitor records them as one.
  void Completed(const std::vector<CompletedStep>& outcomes) {
    int64_t examples = 0;
    double loss_sum = 0;
    for (const CompletedStep& outcome : outcomes) {
      Completed(outcome);
      examples += outcome.examples;
      loss_sum += outcome.loss * static_cast<double>(outcome.examples);
    }
    if (monitor_ == nullptr || outcomes.empty()) return;
    const int64_t steps = static_cast<int64_t>(outcomes.size());
    const double loss = examples > 0 ? loss_sum / static_cast<double>(examples) : 0;
    if (figures_) {
      monitor_->RecordSteps(done_, steps, examples, loss, figures_);
    } else {
      monitor_->RecordSteps(done_, steps, examples, loss);
    }
  }

  // Training goes on from global step `step` (a recovery): the pass under way is not whole.
  void JumpTo(int64_t step) {
    if (step > done_) run_.steps += step - done_;
    done_ = step;
    whole_pass_ = false;
    pass_examples_ = 0;
  }

 private:
  void Completed(const CompletedStep& outcome) {
    run_.examples += outcome.examples;
    ++run_.steps;
    pass_examples_ += outcome.examples;
    if (pass_steps_ > 0 && (done_ + 1) % pass_steps_ == 0) {
      if (whole_pass_) {
        run_.examples_per_sec_by_pass.push_back(
            pass_examples_ / std::max(absl::ToDoubleSeconds(outcome.finished - pass_start_), 1e-9));
      }
      whole_pass_ = true;
      pass_start_ = outcome.finished;
      pass_examples_ = 0;
    }
    if (++done_ > tail_start_) {
      tail_loss_ += outcome.loss * static_cast<double>(outcome.examples);
      tail_examples_ += outcome.examples;
    }
    progress_.Update(done_, outcome.examples, outcome.loss);
  }

 private:
  internal::Progress progress_;
  int64_t done_;  // the global step reached
  const int64_t tail_start_;
  double tail_loss_ = 0;
  int64_t tail_examples_ = 0;
  const int64_t pass_steps_;
  // The pass under way: whether it is whole (a resumed run's first pass is not), when it began
  // and its examples so far.
  bool whole_pass_;
  absl::Time pass_start_;
  int64_t pass_examples_ = 0;
  TrainingMonitor* monitor_;
  std::function<ClusterFigures()> figures_;
  TrainingRun& run_;
};

}  // namespace

std::unique_ptr<RunningEvaluation> FinishedEvaluation(absl::StatusOr<EvalResult> result) {
  return std::make_unique<Finished>(std::move(result));
}

absl::StatusOr<StepExecutor::Recovery> StepExecutor::Recover(const absl::Status& failure,
                                                             int64_t /*step*/) {
  return failure;
}

CheckpointClock::CheckpointClock(int64_t every_steps, double every_seconds, int64_t steps,
                                 Env* clock)
    : every_steps_(every_steps),
      every_seconds_(every_seconds),
      steps_(steps),
      clock_(clock),
      last_(Seconds()) {}

double CheckpointClock::Seconds() const {
  if (clock_ == nullptr) return internal::MonotonicSeconds();
  return absl::ToDoubleSeconds(clock_->Now() - absl::UnixEpoch());
}

bool CheckpointClock::Due(int64_t reached) const {
  if (reached >= steps_) return false;
  if (every_steps_ > 0 && reached % every_steps_ == 0) return true;
  return every_seconds_ > 0 && Seconds() - last_ >= every_seconds_;
}

void CheckpointClock::Began() { last_ = Seconds(); }

absl::StatusOr<TrainingRun> RunTrainingLoop(StepExecutor& executor, int64_t first_step,
                                            int64_t steps, const std::string& label,
                                            const StepCadence& cadence, TrainingMonitor* monitor) {
  TrainingRun run;
  run.startup_seconds = SecondsSinceProcessStart().value_or(0);
  const double start = internal::MonotonicSeconds();
  const std::function<ClusterFigures()> figures = executor.figures();
  StepRecord record(label, first_step, steps, cadence.pass_steps, monitor, figures, run);
  if (monitor != nullptr) monitor->BeginTraining(first_step, steps);
  int64_t next = first_step;  // the next step to start

  // The validations started, in step order, until their figures are in.
  std::deque<std::pair<int64_t, std::unique_ptr<RunningEvaluation>>> evaluations;
  auto collect_evaluations = [&](bool drain) -> absl::Status {
    while (!evaluations.empty() && (drain || evaluations.front().second->ready())) {
      const int64_t at = evaluations.front().first;
      absl::StatusOr<EvalResult> result = evaluations.front().second->Result();
      evaluations.pop_front();
      TESSERA_RETURN_IF_ERROR(result.status());
      record.progress().Note(
          absl::StrCat(label, ": step ", at, ": validation ", DescribeEvaluation(*result)));
      if (monitor != nullptr) monitor->RecordEvaluation(at, *result);
      run.evaluations.push_back({at, *std::move(result)});
    }
    return absl::OkStatus();
  };
  auto drain = [&]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(const std::vector<CompletedStep> outcomes, executor.Drain());
    record.Completed(outcomes);
    return collect_evaluations(/*drain=*/true);
  };

  CheckpointClock checkpoint_clock(cadence.checkpoint_every, cadence.checkpoint_every_seconds,
                                   steps, cadence.clock);
  std::unique_ptr<BackgroundSave> saving;  // the checkpoint being written, if any
  auto announce = [&](int64_t at, const std::string& dir, double seconds, double paused) {
    record.progress().Note(absl::StrFormat("%s: checkpoint of step %d written to %s in %.2f s%s",
                                           label, at, dir, seconds,
                                           paused < 0 ? std::string() :
                                           absl::StrFormat(" (training paused %.2f s)", paused)));
  };
  // Waits for it, and announces it; an Unavailable failure (a PS lost meanwhile) skips it with a
  // warning. The monitor recorded it as soon as it was written.
  auto finish_save = [&]() -> absl::Status {
    if (saving == nullptr) return absl::OkStatus();
    const double wait_start = internal::MonotonicSeconds();
    auto [dir, seconds] = saving->Finish();
    run.checkpoint_wait_seconds += internal::MonotonicSeconds() - wait_start;
    const int64_t at = saving->step();
    const double paused = saving->pause_seconds();
    saving.reset();
    if (absl::IsUnavailable(dir.status())) {
      Log().warn("{}: checkpoint of step {} skipped: {}", label, at, dir.status().message());
      return absl::OkStatus();
    }
    TESSERA_RETURN_IF_ERROR(dir.status());
    announce(at, *dir, seconds, paused);
    return absl::OkStatus();
  };
  // A checkpoint of step `next`, every started step completed.
  auto checkpoint = [&]() -> absl::Status {
    checkpoint_clock.Began();
    if (cadence.checkpoint_in_background) {
      TESSERA_RETURN_IF_ERROR(finish_save());
      const int64_t at = next;
      saving = std::make_unique<BackgroundSave>(
          cadence.checkpoint, at, checkpoint_clock,
          [monitor, at](const std::string& dir, double seconds) {
            if (monitor != nullptr) monitor->RecordCheckpoint(at, seconds, dir);
          });
      run.checkpoint_pause_seconds += saving->pause_seconds();
      return absl::OkStatus();
    }
    const double save_start = checkpoint_clock.Seconds();
    TESSERA_ASSIGN_OR_RETURN(const std::string dir, cadence.checkpoint(next, nullptr));
    const double seconds = checkpoint_clock.Seconds() - save_start;
    run.checkpoint_pause_seconds += seconds;
    if (monitor != nullptr) monitor->RecordCheckpoint(next, seconds, dir);
    announce(next, dir, seconds, /*paused=*/-1);
    return absl::OkStatus();
  };
  auto every = [steps](int64_t period, int64_t reached) {
    return period > 0 && reached % period == 0 && reached < steps;
  };
  // The steps between `next` and the next step a cadence acts at.
  auto limit = [&] {
    int64_t end = steps;
    for (int64_t period : {cadence.checkpoint ? cadence.checkpoint_every : int64_t{0},
                           cadence.evaluate ? cadence.eval_every : int64_t{0}}) {
      if (period > 0) end = std::min(end, (next / period + 1) * period);
    }
    return end;
  };
  // Takes steps up to the next cadence point and runs what is due there.
  auto advance = [&]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(StepExecutor::Advanced advanced, executor.Advance(next, limit()));
    next += advanced.started;
    record.Completed(advanced.completed);
    if (saving != nullptr && saving->ended()) TESSERA_RETURN_IF_ERROR(finish_save());
    TESSERA_RETURN_IF_ERROR(collect_evaluations(/*drain=*/false));
    if (cadence.evaluate && every(cadence.eval_every, next)) {
      TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RunningEvaluation> evaluation,
                               cadence.evaluate(next));
      evaluations.emplace_back(next, std::move(evaluation));
      TESSERA_RETURN_IF_ERROR(collect_evaluations(/*drain=*/false));  // one over already
    }
    if (cadence.checkpoint && checkpoint_clock.Due(next)) {
      TESSERA_RETURN_IF_ERROR(drain());
      TESSERA_RETURN_IF_ERROR(checkpoint());
    }
    return absl::OkStatus();
  };
  // After a failure: the executor recovers (training goes on from the step it says), or the run
  // fails.
  auto recover = [&](const absl::Status& failure) -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(const StepExecutor::Recovery recovery,
                             executor.Recover(failure, next));
    record.JumpTo(recovery.step);
    next = recovery.step;
    if (!recovery.note.empty()) record.progress().Note(recovery.note);
    return absl::OkStatus();
  };

  // Training ends once every step is taken and the executor drained without a failure: a failure
  // noticed only by the last drain (a replica lost at the very end) is recovered from like any
  // other.
  for (;;) {
    while (next < steps) {
      if (absl::Status advanced = advance(); !advanced.ok()) {
        TESSERA_RETURN_IF_ERROR(recover(advanced));
      }
    }
    if (absl::Status drained = drain(); !drained.ok()) {
      TESSERA_RETURN_IF_ERROR(recover(drained));
      continue;
    }
    break;
  }
  TESSERA_RETURN_IF_ERROR(finish_save());
  run.wall_seconds = internal::MonotonicSeconds() - start;
  run.final_loss = record.final_loss();
  if (monitor != nullptr) {
    if (figures) monitor->RecordCluster(figures());
    monitor->EndTraining();
  }
  record.progress().Finish();
  return run;
}

}  // namespace tessera
