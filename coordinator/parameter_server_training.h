// Training on parameter servers: a model's variables created on a cluster's PS nodes (embeddings
// partitioned), the workers running its train steps, and around the step loop everything a run
// needs — resuming from the latest checkpoint, a checkpoint every few steps (retried once a lost
// PS is restored), the final checkpoint, the export for serving, and the run's statistics in the
// summary. The cluster is the single-process simulation (in-process PS nodes and workers), or,
// with ParameterServerTrainingOptions::cluster, a networked cluster this process coordinates.
//
// Example:
//   ParameterServerTrainingOptions options;
//   options.ps = 2;
//   options.workers = 4;
//   options.partitioner = *ParsePartitioner("fixed:4");
//   options.checkpoint_dir = "/tmp/ckpt";
//   nlohmann::json summary;
//   ASSIGN_OR_RETURN(TrainingRun run, TrainOnParameterServers(trainer, train, 1000, 512, options,
//                                                             "recsys", summary));
//   ASSIGN_OR_RETURN(EvalResult eval, trainer.Evaluate(test));  // the trained values
//
// Thread-safety: call from the driver's thread (it blocks until training is over).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cluster/network.h"
#include "coordinator/strategy.h"
#include "coordinator/training_run.h"
#include "core/dataset.h"
#include "core/local_trainer.h"
#include "core/partitioner.h"

namespace tessera {

// How to train on parameter servers: in the simulation, or (with `cluster`) as the coordinator
// of a networked cluster.
struct ParameterServerTrainingOptions {
  int32_t ps = 2;
  int32_t workers = 2;
  Partitioner partitioner;  // how variables marked partitioned (embeddings) are sharded
  int32_t closures_per_worker = 1;
  // Checkpoints: every `checkpoint_every` steps (0: only at the end) into
  // checkpoint_dir/ckpt-<step> (the last 3 are kept); with `resume`, training continues from the
  // latest one there (any PS count or partitioner). A run without `resume` refuses a
  // checkpoint_dir that holds checkpoints, unless `overwrite_checkpoints` (then they are deleted
  // first). With export_dir, the trained model is exported there at the end.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  bool overwrite_checkpoints = false;
  std::string export_dir;
  int32_t inject_worker_failures = 0;  // workers killed mid-closure, each restarted after:
  absl::Duration restart_delay = absl::Milliseconds(100);
  uint64_t seed = 1;  // shuffling and fault injection
  // Networked mode: the cluster spec (PS processes to connect to, workers that will join), the
  // network options, and how many workers to wait for (and how long) before training starts.
  // With checkpoint_dir, a lost PS is restored from the latest checkpoint.
  std::optional<ClusterSpec> cluster;
  NetworkOptions network;
  int32_t min_workers = 1;
  absl::Duration worker_wait = absl::Minutes(5);
  int32_t threads = 0;  // this process's scheduler threads (0: one per core)
};

// Trains `trainer`'s model with its optimizer for steps 0..`steps` (from the checkpoint's step
// when resuming) of `batch_size` examples on the parameter servers `options` describe: one
// variable per parameter, the optimizer on the shards, each worker reading its own shuffled
// stream of `train`. Prints the placement, the checkpoints, the closure statistics and the
// progress line, every line prefixed with `label`. Afterwards `trainer` holds the trained values
// (to evaluate on the driver), and `summary` the run's fields: mode, ps, workers,
// closures_per_worker, partitioner, closures_{scheduled,completed,retried,cancelled},
// worker_failures, worker_restarts, first_step, global_step and ps_recoveries.
// InvalidArgument for `resume` without checkpoint_dir; the cluster's, the checkpoint's or the
// first closure's error.
absl::StatusOr<TrainingRun> TrainOnParameterServers(LocalTrainer& trainer, const Dataset& train,
                                                    int64_t steps, int64_t batch_size,
                                                    const ParameterServerTrainingOptions& options,
                                                    const std::string& label,
                                                    nlohmann::json& summary);

// Copies the current value of every model variable of `strategy` into `trainer` (whose model is
// the same) so it can evaluate on the driver. NotFound for a parameter without a variable.
absl::Status PullVariables(const ParameterServerStrategy& strategy, LocalTrainer& trainer);

}  // namespace tessera
