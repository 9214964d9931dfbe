#include "coordinator/training_job.h"

#include "absl/strings/str_cat.h"

#include <cstdio>

#include "coordinator/local_training.h"
#include "coordinator/parameter_server_training.h"
#include "coordinator/training_run.h"
#include "coordinator/training_summary.h"
#include "coordinator/worker_role.h"
#include "core/model.h"
#include "core/status.h"

namespace tessera {
namespace {

// Trains `trainer` on parameter servers or locally, as flags.mode says.
absl::StatusOr<TrainingRun> Train(LocalTrainer& trainer, const TrainingJob& job,
                                  const TrainingFlags& flags, nlohmann::json& summary) {
  if (flags.mode == TrainingMode::kLocal) {
    return TrainLocally(trainer, job.train, job.steps, job.batch_size, flags.seed, job.name,
                        summary);
  }
  ParameterServerTrainingOptions options = flags.parameter_servers;
  options.partitioner = job.partitioner;
  return TrainOnParameterServers(trainer, job.train, job.steps, job.batch_size, options, job.name,
                                 summary);
}

}  // namespace

absl::StatusOr<int64_t> TrainingSteps(int64_t steps, int64_t epochs, const Dataset& train,
                                      int64_t batch_size) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--batch_size must be >= 1, not ", batch_size));
  }
  if (steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--steps must be >= 0 (0: --epochs passes), not ", steps));
  }
  if (steps > 0) return steps;
  if (epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--epochs must be >= 1, not ", epochs));
  }
  const int64_t per_epoch = BatchesPerPass(train.size(), batch_size);
  int64_t total = 0;
  if (__builtin_mul_overflow(per_epoch, epochs, &total)) {
    return absl::InvalidArgumentError(absl::StrCat("--epochs ", epochs, " of ", per_epoch,
                                                   " steps is more steps than can be counted"));
  }
  return total;
}

absl::Status RunTrainingJob(const TrainingJob& job, const TrainingFlags& flags) {
  if (flags.mode == TrainingMode::kNetworked && flags.role == TrainingRole::kWorker) {
    ASSIGN_OR_RETURN(const Model model, Model::Create(job.model));
    return ServeAsWorker(model, job.train, job.batch_size, flags.parameter_servers, flags.task);
  }
  // Trains in local mode; on parameter servers it holds the model and, at the end, the trained
  // values pulled from them to evaluate.
  ASSIGN_OR_RETURN(LocalTrainer trainer, LocalTrainer::Create(job.model, job.optimizer));
  nlohmann::json summary;
  ASSIGN_OR_RETURN(const TrainingRun run, Train(trainer, job, flags, summary));
  std::printf("%s: %lld examples in %.2f s (%.0f examples/s); final train loss %.4f\n",
              job.name.c_str(), static_cast<long long>(run.examples), run.wall_seconds,
              ExamplesPerSecond(run), run.final_loss);
  RecordRun(run, job.name, summary);
  ASSIGN_OR_RETURN(const EvalResult eval, trainer.Evaluate(job.test));
  if (job.report) job.report(eval, summary);
  return WriteSummary(flags.summary, summary);
}

}  // namespace tessera
