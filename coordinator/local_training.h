// The baseline: a model trained by its LocalTrainer on one thread, no actors — on the same
// batch stream the parameter servers train on, so the two are compared like for like.
//
// Thread-safety: call from the driver's thread.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "coordinator/training_run.h"
#include "core/dataset.h"
#include "core/local_trainer.h"

namespace tessera {

// Trains `trainer` for `steps` steps of `batch_size` examples of `train` (shuffled by `seed`),
// printing the progress line prefixed with `label`. Records the run's fields in `summary` (mode
// "local", ps 0, workers 1, and zero closure and worker statistics). InvalidArgument as
// BatchStream::Create or LocalTrainer::TrainStep.
absl::StatusOr<TrainingRun> TrainLocally(LocalTrainer& trainer, const Dataset& train,
                                         int64_t steps, int64_t batch_size, uint64_t seed,
                                         const std::string& label, nlohmann::json& summary);

}  // namespace tessera
