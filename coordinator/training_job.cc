#include "coordinator/training_job.h"

#include "absl/strings/str_cat.h"

#include <cstdio>

#include "coordinator/local_training.h"
#include "coordinator/parameter_server_training.h"
#include "coordinator/training_run.h"
#include "coordinator/training_summary.h"
#include "coordinator/worker_role.h"
#include "core/process.h"
#include "core/status.h"

namespace tessera {
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
    return ServeAsWorker(job, flags.parameter_servers, flags.task);
  }
  nlohmann::json summary;
  ASSIGN_OR_RETURN(const TrainingRun run,
                   flags.mode == TrainingMode::kLocal
                       ? TrainLocally(job, flags.seed, flags.eval_every, summary)
                       : TrainOnParameterServers(job, flags.parameter_servers, flags.eval_every,
                                                 summary));
  std::printf("%s: %lld examples in %.2f s (%.0f examples/s); final train loss %.4f\n",
              job.name.c_str(), static_cast<long long>(run.examples), run.wall_seconds,
              ExamplesPerSecond(run), run.final_loss);
  RecordRun(run, job.name, summary);
  if (run.eval.has_value() && job.report) job.report(*run.eval, summary);
  if (const std::optional<int64_t> peak = PeakResidentBytes(); peak.has_value()) {
    summary["peak_rss_bytes"] = *peak;
    std::printf("%s: first step %.2f s after start; peak memory %.0f MiB\n", job.name.c_str(),
                run.startup_seconds, static_cast<double>(*peak) / (1 << 20));
  }
  return WriteSummary(flags.summary, summary);
}

}  // namespace tessera
