#include "coordinator/training/training_steps.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "coordinator/monitoring/internal/progress.h"
#include "coordinator/training/train_step_closure.h"
#include "core/base/logging.h"
#include "core/base/process.h"
#include "core/base/status.h"

namespace tessera {
namespace {

// A checkpoint being written while training goes on (StepCadence::checkpoint).
class BackgroundSave {
 public:
  // Starts `checkpoint(step, ...)` on a thread of its own; returns once it has taken its cut or
  // ended.
  BackgroundSave(const CheckpointFunction& checkpoint, int64_t step)
      : step_(step), start_(internal::MonotonicSeconds()) {
    thread_ = std::thread([this, checkpoint] {
      absl::StatusOr<std::string> result = checkpoint(step_, [this] { Mark(&cut_); });
      {
        absl::MutexLock lock(&mu_);
        result_ = std::move(result);
      }
      Mark(&ended_);
    });
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](BackgroundSave* save) { return save->cut_ || save->ended_; }, this));
    pause_seconds_ = internal::MonotonicSeconds() - start_;
  }
  ~BackgroundSave() {
    if (thread_.joinable()) thread_.join();
  }

  int64_t step() const { return step_; }
  // How long training waited for the cut.
  double pause_seconds() const { return pause_seconds_; }
  // Waits until the checkpoint is written: its directory, or its error; and the seconds the
  // whole save took.
  std::pair<absl::StatusOr<std::string>, double> Finish() {
    thread_.join();
    absl::MutexLock lock(&mu_);
    return {std::move(result_), internal::MonotonicSeconds() - start_};
  }

 private:
  void Mark(bool* flag) {
    absl::MutexLock lock(&mu_);
    *flag = true;
  }

  const int64_t step_;
  const double start_;
  double pause_seconds_ = 0;
  absl::Mutex mu_;
  bool cut_ ABSL_GUARDED_BY(mu_) = false;
  bool ended_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<std::string> result_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace

CheckpointClock::CheckpointClock(int64_t every_steps, double every_seconds, int64_t steps)
    : every_steps_(every_steps),
      every_seconds_(every_seconds),
      steps_(steps),
      last_(internal::MonotonicSeconds()) {}

bool CheckpointClock::Due(int64_t reached) const {
  if (reached >= steps_) return false;
  if (every_steps_ > 0 && reached % every_steps_ == 0) return true;
  return every_seconds_ > 0 && internal::MonotonicSeconds() - last_ >= every_seconds_;
}

void CheckpointClock::Began() { last_ = internal::MonotonicSeconds(); }

absl::StatusOr<TrainingRun> RunTrainingSteps(ClusterCoordinator& coordinator, int64_t first_step,
                                             int64_t steps, const std::string& label,
                                             const StepCadence& cadence,
                                             TrainingMonitor* monitor) {
  internal::Progress progress(label, first_step, steps);
  TrainingRun run;
  run.startup_seconds = SecondsSinceProcessStart().value_or(0);
  const double start = internal::MonotonicSeconds();
  if (monitor != nullptr) monitor->BeginTraining(first_step, steps);
  const auto cluster_figures = [&coordinator] { return ReadClusterFigures(coordinator); };
  std::deque<RemoteValue> pending;
  std::deque<PendingEvaluation> evaluations;  // in step order
  const int64_t tail = std::max<int64_t>(1, steps / 20);
  double tail_loss = 0;
  int64_t done_steps = first_step, tail_examples = 0;
  // The pass under way: when it began and its examples so far (a resumed run's first pass is
  // partial, so not recorded). A pass ends when its last step's closure resolved: the loop
  // collects results only as it schedules, up to a queue's length late.
  absl::Time pass_start = absl::Now();
  int64_t pass_examples = 0;
  bool whole_pass = cadence.pass_steps > 0 && first_step % cadence.pass_steps == 0;
  // Takes finished values off the front of `pending` (all of them when `drain`).
  auto collect = [&](bool drain) -> absl::Status {
    while (!pending.empty() &&
           (drain || pending.front().state() == RemoteValueState::kReady ||
            pending.front().state() == RemoteValueState::kFailed)) {
      TESSERA_ASSIGN_OR_RETURN(const ClosureValues v, pending.front().Fetch());
      const bool pass_ends = cadence.pass_steps > 0 && (done_steps + 1) % cadence.pass_steps == 0;
      const absl::Time resolved =
          pass_ends ? pending.front().resolved_at().value_or(absl::Now()) : absl::Time();
      pending.pop_front();
      TESSERA_ASSIGN_OR_RETURN(const double loss, v.Get<double>(kTrainStepLoss));
      TESSERA_ASSIGN_OR_RETURN(const int64_t examples, v.Get<int64_t>(kTrainStepExamples));
      run.examples += examples;
      pass_examples += examples;
      if (pass_ends) {
        if (whole_pass) {
          run.examples_per_sec_by_pass.push_back(
              pass_examples / std::max(absl::ToDoubleSeconds(resolved - pass_start), 1e-9));
        }
        whole_pass = true;
        pass_start = resolved;
        pass_examples = 0;
      }
      if (++done_steps > steps - tail) {
        tail_loss += loss * examples;
        tail_examples += examples;
      }
      progress.Update(done_steps, examples, loss);
      if (monitor != nullptr) monitor->RecordStep(done_steps, examples, loss, cluster_figures);
    }
    while (!evaluations.empty() && (drain || evaluations.front().ready())) {
      const int64_t at = evaluations.front().step();
      TESSERA_ASSIGN_OR_RETURN(EvalResult result, evaluations.front().Result());
      evaluations.pop_front();
      progress.Note(absl::StrCat(label, ": step ", at, ": validation ", DescribeEvaluation(result)));
      if (monitor != nullptr) monitor->RecordEvaluation(at, result);
      run.evaluations.push_back({at, std::move(result)});
    }
    return absl::OkStatus();
  };
  auto every = [steps](int64_t period, int64_t reached) {
    return period > 0 && reached % period == 0 && reached < steps;
  };
  CheckpointClock checkpoint_clock(cadence.checkpoint_every, cadence.checkpoint_every_seconds,
                                   steps);
  std::unique_ptr<BackgroundSave> saving;  // the checkpoint being written, if any
  // Waits for it; an Unavailable failure (a PS lost meanwhile) skips it with a warning.
  auto finish_save = [&]() -> absl::Status {
    if (saving == nullptr) return absl::OkStatus();
    const double wait_start = internal::MonotonicSeconds();
    auto [dir, seconds] = saving->Finish();
    run.checkpoint_wait_seconds += internal::MonotonicSeconds() - wait_start;
    const int64_t at = saving->step();
    saving.reset();
    if (absl::IsUnavailable(dir.status())) {
      Log().warn("{}: checkpoint of step {} skipped: {}", label, at, dir.status().message());
      return absl::OkStatus();
    }
    TESSERA_RETURN_IF_ERROR(dir.status());
    if (monitor != nullptr) monitor->RecordCheckpoint(at, seconds, *dir);
    return absl::OkStatus();
  };
  for (int64_t step = first_step; step < steps; ++step) {
    ClosureValues args;
    args.Set(kTrainStepBatch, step);  // the batch index is the global step
    TESSERA_ASSIGN_OR_RETURN(RemoteValue value,
                             coordinator.Schedule(kTrainStep, std::move(args), step));
    pending.push_back(std::move(value));
    TESSERA_RETURN_IF_ERROR(collect(false));
    if (cadence.evaluate && every(cadence.eval_every, step + 1)) {
      TESSERA_ASSIGN_OR_RETURN(PendingEvaluation eval, cadence.evaluate(step + 1));
      evaluations.push_back(std::move(eval));
    }
    if (cadence.checkpoint && checkpoint_clock.Due(step + 1)) {
      checkpoint_clock.Began();
      TESSERA_RETURN_IF_ERROR(coordinator.Join());
      TESSERA_RETURN_IF_ERROR(collect(true));
      TESSERA_RETURN_IF_ERROR(finish_save());
      saving = std::make_unique<BackgroundSave>(cadence.checkpoint, step + 1);
      run.checkpoint_pause_seconds += saving->pause_seconds();
    }
  }
  TESSERA_RETURN_IF_ERROR(coordinator.Join());
  TESSERA_RETURN_IF_ERROR(collect(true));
  TESSERA_RETURN_IF_ERROR(finish_save());
  run.steps = done_steps - first_step;
  run.wall_seconds = internal::MonotonicSeconds() - start;
  run.final_loss = tail_examples > 0 ? tail_loss / tail_examples : 0;
  if (monitor != nullptr) {
    monitor->RecordCluster(ReadClusterFigures(coordinator));
    monitor->EndTraining();
  }
  progress.Finish();
  return run;
}

}  // namespace tessera
