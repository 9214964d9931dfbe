#include "coordinator/training/local_training.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "coordinator/monitoring/internal/progress.h"
#include "coordinator/training/distributed_evaluation.h"
#include "core/base/process.h"
#include "core/base/status.h"
#include "core/training/local_trainer.h"

namespace tessera {

absl::StatusOr<TrainingRun> TrainLocally(const TrainingJob& job, uint64_t seed, int64_t eval_every,
                                         nlohmann::json& summary, TrainingMonitor* monitor) {
  const std::string& label = job.name;
  const int64_t steps = job.steps;
  const int64_t batch_size = job.batch_size;
  TESSERA_ASSIGN_OR_RETURN(LocalTrainer trainer, LocalTrainer::Create(job.model, job.optimizer));
  TESSERA_ASSIGN_OR_RETURN(BatchStream batches,
                           BatchStream::Create(job.train, batch_size, /*shuffle=*/true, seed));
  std::printf("%s: local trainer (one thread, no actors)\n", label.c_str());
  internal::Progress progress(label, 0, steps);
  TrainingRun run;
  run.startup_seconds = SecondsSinceProcessStart().value_or(0);
  const double start = internal::MonotonicSeconds();
  if (monitor != nullptr) monitor->BeginTraining(0, steps);
  double tail_loss = 0;
  int64_t tail_examples = 0;
  const int64_t tail = std::max<int64_t>(1, steps / 20);
  for (int64_t s = 0; s < steps; ++s) {
    TESSERA_ASSIGN_OR_RETURN(const Batch batch, batches.Get(s));
    TESSERA_ASSIGN_OR_RETURN(const float loss, trainer.TrainStep(batch));
    run.examples += batch.size;
    if (s >= steps - tail) {
      tail_loss += static_cast<double>(loss) * batch.size;
      tail_examples += batch.size;
    }
    progress.Update(s + 1, batch.size, loss);
    if (monitor != nullptr) monitor->RecordStep(s + 1, batch.size, loss);
    if (eval_every > 0 && (s + 1) % eval_every == 0 && s + 1 < steps && job.test.size() > 0) {
      TESSERA_ASSIGN_OR_RETURN(EvalResult eval, trainer.Evaluate(job.test));
      progress.Note(absl::StrCat(label, ": step ", s + 1, ": validation ",
                                 DescribeEvaluation(eval)));
      if (monitor != nullptr) monitor->RecordEvaluation(s + 1, eval);
      run.evaluations.push_back({s + 1, std::move(eval)});
    }
  }
  run.steps = steps;
  run.wall_seconds = internal::MonotonicSeconds() - start;
  run.final_loss = tail_examples > 0 ? tail_loss / tail_examples : 0;
  progress.Finish();
  if (monitor != nullptr) monitor->EndTraining();
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
