#include "coordinator/training_steps.h"

#include <algorithm>
#include <deque>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/internal/progress.h"
#include "coordinator/train_step_closure.h"
#include "core/process.h"
#include "core/status.h"

namespace tessera {

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
  // Takes finished values off the front of `pending` (all of them when `drain`).
  auto collect = [&](bool drain) -> absl::Status {
    while (!pending.empty() &&
           (drain || pending.front().state() == RemoteValueState::kReady ||
            pending.front().state() == RemoteValueState::kFailed)) {
      ASSIGN_OR_RETURN(const ClosureValues v, pending.front().Fetch());
      pending.pop_front();
      ASSIGN_OR_RETURN(const double loss, v.Get<double>(kTrainStepLoss));
      ASSIGN_OR_RETURN(const int64_t examples, v.Get<int64_t>(kTrainStepExamples));
      run.examples += examples;
      if (++done_steps > steps - tail) {
        tail_loss += loss * examples;
        tail_examples += examples;
      }
      progress.Update(done_steps, examples, loss);
      if (monitor != nullptr) monitor->RecordStep(done_steps, examples, loss, cluster_figures);
    }
    while (!evaluations.empty() && (drain || evaluations.front().ready())) {
      const int64_t at = evaluations.front().step();
      ASSIGN_OR_RETURN(EvalResult result, evaluations.front().Result());
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
  for (int64_t step = first_step; step < steps; ++step) {
    ClosureValues args;
    args.Set(kTrainStepBatch, step);  // the batch index is the global step
    ASSIGN_OR_RETURN(RemoteValue value, coordinator.Schedule(kTrainStep, std::move(args)));
    pending.push_back(std::move(value));
    RETURN_IF_ERROR(collect(false));
    if (cadence.evaluate && every(cadence.eval_every, step + 1)) {
      ASSIGN_OR_RETURN(PendingEvaluation eval, cadence.evaluate(step + 1));
      evaluations.push_back(std::move(eval));
    }
    if (cadence.checkpoint && every(cadence.checkpoint_every, step + 1)) {
      RETURN_IF_ERROR(coordinator.Join());
      RETURN_IF_ERROR(collect(true));
      const double save_start = internal::MonotonicSeconds();
      ASSIGN_OR_RETURN(const std::string dir, cadence.checkpoint(step + 1));
      if (monitor != nullptr) {
        monitor->RecordCheckpoint(step + 1, internal::MonotonicSeconds() - save_start, dir);
      }
    }
  }
  RETURN_IF_ERROR(coordinator.Join());
  RETURN_IF_ERROR(collect(true));
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
