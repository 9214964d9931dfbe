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
#include "cluster/network/network.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/training/training_run.h"
#include "core/data/dataset.h"
#include "core/variables/partitioner.h"

namespace tessera {

// How to train on parameter servers: in the simulation, or (with `cluster`) as the coordinator
// of a networked cluster.
struct ParameterServerTrainingOptions {
  int32_t ps = 2;
  int32_t workers = 2;
  int32_t closures_per_worker = 1;
  // Copies of each shard: 1, or 2 for a backup of every shard on another PS (Note [Backups on
  // the next PS], strategy.h).
  int32_t shard_copies = 1;
  // Checkpoints: every `checkpoint_every` steps and every `checkpoint_every_seconds` of training,
  // whichever comes first (0 and 0: only at the end; StepCadence), into
  // checkpoint_dir/ckpt-<step> (the last 3 are kept); with `resume`, training continues from the
  // latest one there (any PS count or partitioner). A run without `resume` refuses a
  // checkpoint_dir that holds checkpoints, unless `overwrite_checkpoints` (then they are deleted
  // first). With export_dir, the trained model is exported there at the end.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  double checkpoint_every_seconds = 0;
  // A checkpoint during training is written while training goes on, which waits only for the
  // shards' copies (Note [Checkpoints without pausing], coordinator/checkpoint/save_restore.cc);
  // false: it waits for the whole write (and no PS holds a copy of its shards meanwhile).
  bool checkpoint_in_background = true;
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
  // Where the run is recorded as it goes (steps, validations, checkpoints, the cluster's figures;
  // coordinator/monitoring/training_monitor.h); null: nowhere. RunTrainingJob sets it (Note [The
  // run's monitor] in training_job.cc); whoever else holds it (a dashboard) reads it concurrently.
  std::shared_ptr<TrainingMonitor> monitor;
  // Called with the cluster once it runs (the coordinator null), again once the coordinator
  // runs too, and with nulls before either goes, whether training succeeds or not: how a
  // dashboard sees the cluster while the run has one. Null: nobody is told.
  std::function<void(Cluster* cluster, ClusterCoordinator* coordinator)> on_cluster;
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
// starts), a model or optimizer that does not validate, or `resume` without checkpoint_dir; the cluster's, the checkpoint's or the first
// closure's error.
absl::StatusOr<TrainingRun> TrainOnParameterServers(const TrainingJob& job,
                                                    const ParameterServerTrainingOptions& options,
                                                    int64_t eval_every, nlohmann::json& summary);

}  // namespace tessera
