// The JSON summary of a training run (--summary): what tests/e2e and bench/ scripts read.
//
// Fields: workload, steps, examples, wall_seconds, startup_seconds, examples_per_sec, final_loss
// and evaluations ([{step, loss, examples, auc, accuracy}], auc and accuracy when the model has
// them) (RecordRun); peak_rss_bytes (RunTrainingJob, once the run is over); mode, ps, workers and the closure and worker statistics (TrainOnParameterServers,
// TrainLocally); and a program's evaluation fields (test_loss, test_auc, ...).
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "coordinator/training_run.h"

namespace tessera {

// Records `run` in `summary` as workload `workload`: steps, examples, wall_seconds,
// startup_seconds, examples_per_sec, final_loss and evaluations (the --eval_every validations).
void RecordRun(const TrainingRun& run, const std::string& workload, nlohmann::json& summary);

// The run's training throughput: examples per second of the training loop.
double ExamplesPerSecond(const TrainingRun& run);

// Writes `summary` to `path`, pretty-printed (nothing when path is empty). Unavailable when the
// file cannot be written.
absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary);

}  // namespace tessera
