// Training on parameter servers: a model's variables created on a cluster's PS nodes (embeddings
// partitioned), the workers running its train steps, and around the step loop everything a run
// needs — resuming from the latest checkpoint, a checkpoint every few steps (retried once a lost
// PS is restored), the final checkpoint, the export for serving, and the run's statistics in the
// summary. The cluster is the single-process simulation (in-process PS nodes and workers), or,
// with ParameterServerTrainingOptions::cluster (tessera/training.h), a networked cluster this
// process coordinates.
//
// Example:
//   ParameterServerTrainingOptions options;
//   options.ps = 2;
//   options.workers = 4;
//   options.checkpoint_dir = "/tmp/ckpt";
//   nlohmann::json summary;
//   TESSERA_ASSIGN_OR_RETURN(TrainingRun run, TrainOnParameterServers(job, options,
//   /*eval_every=*/0,
//                                                             summary));
//   // run.eval: job.test evaluated by the workers on the trained variables
//
// Thread-safety: call from the driver's thread (it blocks until training is over).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/training/training_run.h"
#include "tessera/training.h"

namespace tessera {

// Who watches a run besides its own output (RunTrainingJob sets them: Note [The run's monitor] in
// coordinator/training/training_job.cc).
struct RunObservers {
  // Where the run is recorded as it goes (steps, validations, checkpoints, the cluster's
  // figures); null: nowhere. Whoever else holds it (a dashboard) reads it concurrently.
  std::shared_ptr<TrainingMonitor> monitor;
  // Called with the cluster once it runs (the coordinator null), again once the coordinator
  // runs too, and with nulls before either goes, whether training succeeds or not: how a
  // dashboard sees the cluster while the run has one. Null: nobody is told.
  std::function<void(Cluster* cluster, ClusterCoordinator* coordinator)> on_cluster;
  // Under the mirrored strategy (TrainMirrored): called with the replicas as the driver knows
  // them, a slot per replica (its rank at the start; `completed` counts the steps it trained),
  // once they run and after every request of steps and every recovery: how a dashboard shows
  // them. Null: nobody is told.
  std::function<void(const WorkerPoolStatus& replicas)> on_replicas;
};

// Trains `job` — its model with its optimizer, for steps 0..job.steps (from the checkpoint's step
// when resuming) of job.batch_size examples — on the parameter servers `options` describe: one
// variable per parameter (partitioned ones sharded by job.partitioner, initialized on the PS
// nodes), the optimizer on the shards, each worker reading the batches it is given of job.train.
// Every `eval_every` steps (0: never) and at the end, the workers evaluate job.test (when not
// empty; coordinator/training/distributed_evaluation.h) into the run's evaluations and eval. The
// coordinator holds the model's description, never its values. Prints the placement, the
// checkpoints, the validations, the closure statistics and the progress line, every line prefixed
// with job.name. Records in `summary` the run's fields: mode, ps, workers, closures_per_worker,
// partitioner, closures_{scheduled,completed,retried,cancelled}, worker_failures, worker_restarts,
// first_step, global_step and ps_recoveries; restore_seconds when resumed, checkpoint_seconds (the
// final save) with a checkpoint_dir. InvalidArgument for a batch size < 1 (before anything
// starts), a model or optimizer that does not validate, or `resume` without checkpoint_dir; the
// cluster's, the checkpoint's or the first closure's error.
absl::StatusOr<TrainingRun> TrainOnParameterServers(const TrainingJob& job,
                                                    const ParameterServerTrainingOptions& options,
                                                    int64_t eval_every, nlohmann::json& summary,
                                                    const RunObservers& observers = {});

}  // namespace tessera
