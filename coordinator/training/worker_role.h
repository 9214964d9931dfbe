// The worker role of a training program (--role=worker): this process serves the train steps of
// a networked cluster's coordinator — the same program, run with the same model and data flags
// as the coordinator, so its replica functions match the closures it is sent.
//
// Thread-safety: ServeAsWorker blocks the calling (non-actor) thread until the work is over.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "coordinator/ps/parameter_server_training.h"
#include "coordinator/training/training_run.h"

namespace tessera {

// Runs this process as worker `task` of the networked cluster in options.cluster until the
// coordinator finishes (cluster/scheduling/worker_node.h: it joins again after a coordinator
// restart or a PS recovery). Its train steps (RegisterTrainStep) read the batches of job.batch_size
// they are given from its own stream over job.train (shuffled by options.seed) and update the
// variables of job.model the coordinator hands out; its evaluation steps (RegisterEvalStep) read
// job.test. InvalidArgument without options.cluster or for a model that does not validate;
// FailedPrecondition when the coordinator has no variable for one of the model's parameters
// (another model); errors as RunWorkerNode.
absl::Status ServeAsWorker(const TrainingJob& job, const ParameterServerTrainingOptions& options,
                           int32_t task);

}  // namespace tessera
