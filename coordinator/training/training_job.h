// A training job: what a program states — its model, optimizer, data, schedule and how it
// reports the evaluation — and the one call that runs it as the shared flags say (in the
// simulation, as the single-thread baseline, or as the coordinator or a worker of a networked
// cluster), with resume, checkpoints, export, the progress line and the JSON summary.
//
// Example (examples/recsys.cc is a complete program):
//   ABSL_FLAG(int64_t, batch_size, 512, "examples per step");
//   ...
//   TESSERA_ASSIGN_OR_RETURN(TrainingFlags flags, ReadTrainingFlags());
//   TrainingJob job;
//   job.name = "recsys";
//   TESSERA_ASSIGN_OR_RETURN(job.model, RecsysModelSpec(model_options));
//   job.optimizer = {"adagrad", {{"learning_rate", 0.1}}};
//   job.train = data.train;
//   job.test = data.test;
//   job.batch_size = absl::GetFlag(FLAGS_batch_size);
//   TESSERA_ASSIGN_OR_RETURN(job.steps, TrainingSteps(/*steps=*/0, /*epochs=*/1, job.train,
//                                             job.batch_size));
//   job.report = [](const EvalResult& eval, nlohmann::json& summary) {
//     summary["test_auc"] = eval.auc.value_or(0);
//   };
//   return RunTrainingJob(job, flags);
//
// Thread-safety: call RunTrainingJob from the main thread (it blocks until the job is over).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "coordinator/training/training_flags.h"
#include "core/data/dataset.h"
#include "core/model/model_spec.h"
#include "core/model/optimizer.h"
#include "core/training/local_trainer.h"
#include "core/variables/partitioner.h"

namespace tessera {

// A job's schedule from a program's flags: `steps` when it is > 0; when it is 0, `epochs` passes
// over `train` in batches of `batch_size`, the last batch of each pass counted even when partial.
// InvalidArgument, naming the flag (--batch_size, --steps, --epochs), for a batch size < 1, steps
// < 0, epochs < 1 (with steps 0), or a schedule of more steps than an int64 holds.
absl::StatusOr<int64_t> TrainingSteps(int64_t steps, int64_t epochs, const Dataset& train,
                                      int64_t batch_size);

// Runs `job` as `flags` say:
//   - a networked worker (--role=worker) serves train steps until its coordinator finishes
//     (ServeAsWorker) and returns;
//   - otherwise the model trains — on parameter servers (TrainOnParameterServers: in the
//     simulation or as a networked coordinator) or locally (TrainLocally) — then the throughput
//     line is printed, the trained model is evaluated on job.test and job.report called, and the
//     summary is written to flags.summary.
// The run is recorded as it goes in one TrainingMonitor (training_monitor.h): the one in
// flags.parameter_servers.monitor when set, else a new one, handed to TrainOnParameterServers in
// its options (Note [The run's monitor] in training_job.cc); with flags.metrics_file, its lines
// go there; the summary carries its record (RecordMonitor).
// InvalidArgument for a model or optimizer LocalTrainer::Create rejects, or naming
// --metrics_file when that file cannot be written (before training starts); the first error of
// training, evaluation or writing the summary.
absl::Status RunTrainingJob(const TrainingJob& job, const TrainingFlags& flags);

}  // namespace tessera
