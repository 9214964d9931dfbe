// The baseline: a model trained by its LocalTrainer on one thread, no actors — on the same
// batch stream the parameter servers train on, so the two are compared like for like.
//
// Thread-safety: call from the driver's thread.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/training/training_run.h"

namespace tessera {

// Trains job.model with job.optimizer in a LocalTrainer for job.steps steps of job.batch_size
// examples of job.train (shuffled by `seed`), printing the progress line prefixed with job.name;
// every `eval_every` steps (0: never) and at the end evaluates job.test (when not empty) into the
// run's evaluations and eval. Records the run's fields in `summary` (mode "local", ps 0, workers
// 1, and zero closure and worker statistics). With a `monitor`, records the steps and
// validations there (BeginTraining ... EndTraining; the caller Finishes it). InvalidArgument as
// LocalTrainer::Create, BatchStream::Create or LocalTrainer::TrainStep.
absl::StatusOr<TrainingRun> TrainLocally(const TrainingJob& job, uint64_t seed, int64_t eval_every,
                                         nlohmann::json& summary,
                                         TrainingMonitor* monitor = nullptr);

}  // namespace tessera
