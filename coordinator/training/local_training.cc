#include "coordinator/training/local_training.h"

#include <cstdio>
#include <vector>

#include "absl/time/clock.h"
#include "coordinator/training/training_loop.h"
#include "core/training/local_trainer.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// Steps on this thread: one batch of the stream, one TrainStep.
class LocalSteps final : public StepExecutor {
 public:
  LocalSteps(LocalTrainer& trainer, BatchStream& batches) : trainer_(trainer), batches_(batches) {}

  absl::StatusOr<Advanced> Advance(int64_t next, int64_t /*limit*/) override {
    TESSERA_ASSIGN_OR_RETURN(const Batch batch, batches_.Get(next));
    TESSERA_ASSIGN_OR_RETURN(const float loss, trainer_.TrainStep(batch));
    Advanced advanced;
    advanced.started = 1;
    advanced.completed.push_back({batch.size, static_cast<double>(loss), absl::Now()});
    return advanced;
  }

  absl::StatusOr<std::vector<CompletedStep>> Drain() override {
    return std::vector<CompletedStep>{};
  }

 private:
  LocalTrainer& trainer_;
  BatchStream& batches_;
};

}  // namespace

absl::StatusOr<TrainingRun> TrainLocally(const TrainingJob& job, uint64_t seed, int64_t eval_every,
                                         nlohmann::json& summary, TrainingMonitor* monitor) {
  const std::string& label = job.name;
  TESSERA_ASSIGN_OR_RETURN(LocalTrainer trainer, LocalTrainer::Create(job.model, job.optimizer));
  TESSERA_ASSIGN_OR_RETURN(BatchStream batches,
                           BatchStream::Create(job.train, job.batch_size, /*shuffle=*/true, seed));
  std::printf("%s: local trainer (one thread, no actors)\n", label.c_str());
  StepCadence cadence;
  cadence.pass_steps = BatchesPerPass(job.train.size(), job.batch_size);
  if (job.test.size() > 0) {
    cadence.eval_every = eval_every;
    cadence.evaluate = [&](int64_t) { return FinishedEvaluation(trainer.Evaluate(job.test)); };
  }
  LocalSteps steps(trainer, batches);
  TESSERA_ASSIGN_OR_RETURN(TrainingRun run,
                           RunTrainingLoop(steps, 0, job.steps, label, cadence, monitor));
  if (job.test.size() > 0) {
    TESSERA_ASSIGN_OR_RETURN(run.eval, trainer.Evaluate(job.test));
  }
  summary["mode"] = "local";
  summary["ps"] = 0;
  summary["workers"] = 1;
  for (const char* key : {"closures_scheduled", "closures_completed", "closures_retried",
                          "closures_cancelled", "worker_failures", "worker_restarts"}) {
    summary[key] = 0;
  }
  return run;
}

}  // namespace tessera
