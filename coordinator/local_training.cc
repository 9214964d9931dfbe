#include "coordinator/local_training.h"

#include <algorithm>
#include <cstdio>

#include "coordinator/internal/progress.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<TrainingRun> TrainLocally(LocalTrainer& trainer, const Dataset& train,
                                         int64_t steps, int64_t batch_size, uint64_t seed,
                                         const std::string& label, nlohmann::json& summary) {
  ASSIGN_OR_RETURN(BatchStream batches,
                   BatchStream::Create(train, batch_size, /*shuffle=*/true, seed));
  std::printf("%s: local trainer (one thread, no actors)\n", label.c_str());
  internal::Progress progress(label, steps, batch_size);
  TrainingRun run;
  const double start = internal::MonotonicSeconds();
  double recent = 0, tail_loss = 0;
  int64_t tail_examples = 0;
  const int64_t tail = std::max<int64_t>(1, steps / 20);
  for (int64_t s = 0; s < steps; ++s) {
    ASSIGN_OR_RETURN(const Batch batch, batches.Get(s));
    ASSIGN_OR_RETURN(const float loss, trainer.TrainStep(batch));
    recent = recent == 0 ? loss : 0.98 * recent + 0.02 * loss;
    run.examples += batch.size;
    if (s >= steps - tail) {
      tail_loss += static_cast<double>(loss) * batch.size;
      tail_examples += batch.size;
    }
    progress.Update(s + 1, recent);
  }
  run.steps = steps;
  run.wall_seconds = internal::MonotonicSeconds() - start;
  run.final_loss = tail_examples > 0 ? tail_loss / tail_examples : 0;
  progress.Finish(steps, recent);
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
