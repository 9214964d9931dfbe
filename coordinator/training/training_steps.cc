#include "coordinator/training/training_steps.h"

#include <deque>
#include <utility>

#include "absl/time/clock.h"
#include "coordinator/training/train_step_closure.h"
#include "tessera/status.h"

namespace tessera {
namespace {

class Closures final : public StepExecutor {
 public:
  explicit Closures(ClusterCoordinator& coordinator) : coordinator_(coordinator) {}

  absl::StatusOr<Advanced> Advance(int64_t next, int64_t /*limit*/) override {
    // The batch is the global step's.
    TESSERA_ASSIGN_OR_RETURN(RemoteValue value, coordinator_.Schedule(kTrainStep, {}, next));
    pending_.push_back(std::move(value));
    Advanced advanced;
    advanced.started = 1;
    TESSERA_ASSIGN_OR_RETURN(advanced.completed, Collect(/*drain=*/false));
    return advanced;
  }

  absl::StatusOr<std::vector<CompletedStep>> Drain() override {
    TESSERA_RETURN_IF_ERROR(coordinator_.Join());
    return Collect(/*drain=*/true);
  }

  std::function<ClusterFigures()> figures() override {
    return [this] { return ReadClusterFigures(coordinator_); };
  }

 private:
  // Takes the resolved closures off the front of `pending_` (all of them when `drain`).
  absl::StatusOr<std::vector<CompletedStep>> Collect(bool drain) {
    std::vector<CompletedStep> completed;
    while (!pending_.empty() && (drain || pending_.front().state() == RemoteValueState::kReady ||
                                 pending_.front().state() == RemoteValueState::kFailed)) {
      TESSERA_ASSIGN_OR_RETURN(const ClosureValues v, pending_.front().Fetch());
      CompletedStep outcome;
      outcome.finished = pending_.front().resolved_at().value_or(absl::Now());
      pending_.pop_front();
      TESSERA_ASSIGN_OR_RETURN(const StepOutcome step, TrainStepOutcome(v));
      outcome.loss = step.loss;
      outcome.examples = step.examples;
      completed.push_back(outcome);
    }
    return completed;
  }

  ClusterCoordinator& coordinator_;
  std::deque<RemoteValue> pending_;  // in step order
};

}  // namespace

std::unique_ptr<StepExecutor> ClosureSteps(ClusterCoordinator& coordinator) {
  return std::make_unique<Closures>(coordinator);
}

absl::StatusOr<std::unique_ptr<RunningEvaluation>> EvaluateOnWorkers(
    ClusterCoordinator& coordinator, const Model& model, int64_t test_examples, int64_t step) {
  TESSERA_ASSIGN_OR_RETURN(PendingEvaluation pending,
                           PendingEvaluation::Schedule(coordinator, model, test_examples, step));
  return std::unique_ptr<RunningEvaluation>(
      std::make_unique<PendingEvaluation>(std::move(pending)));
}

absl::StatusOr<TrainingRun> RunTrainingSteps(ClusterCoordinator& coordinator, int64_t first_step,
                                             int64_t steps, const std::string& label,
                                             const StepCadence& cadence, TrainingMonitor* monitor) {
  const std::unique_ptr<StepExecutor> executor = ClosureSteps(coordinator);
  return RunTrainingLoop(*executor, first_step, steps, label, cadence, monitor);
}

}  // namespace tessera
