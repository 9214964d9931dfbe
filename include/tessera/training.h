// Training, the front door: what a program states (TrainingJob: its model, optimizer, data,
// schedule and how it reports the evaluation), how it runs (TrainingFlags: the shared flags a
// program reads with ReadTrainingFlags, or sets itself), and the one call that runs it
// (RunTrainingJob): in the simulation, as the single-thread baseline, or as the coordinator or a
// worker of a networked cluster, with resume, checkpoints, export, the progress line and the
// JSON summary.
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
//                                                     job.batch_size));
//   job.report = [](const EvalResult& eval, nlohmann::json& summary) {
//     summary["test_auc"] = eval.auc.value_or(0);
//   };
//   return RunTrainingJob(job, flags);
//
// The shared flags:
// The command-line flags every training program shares, and what they say:
//   --mode=sim|local|net, --strategy=ps|mirrored, --on_replica_loss=restore|continue, --ps,
//   --shard_copies (--replicas: its deprecated old name), --workers, --closures_per_worker,
//   --checkpoint_dir, --checkpoint_every, --eval_every, --resume, --overwrite_checkpoints,
//   --export_dir, --inject_worker_failures, --restart_delay_ms, --seed, --summary, --metrics_file,
//   --log_level, -v, --dashboard_port, --dashboard_host, --dashboard_keep_serving, and networked
//   mode's --cluster_spec, --role, --task, --min_workers,
//   --worker_wait_s, --connect_timeout_s, --threads, --bind, --tls_cert, --tls_key, --tls_ca,
//   --max_message_bytes.
// A program adds its own model, data and schedule flags (--steps, --batch_size, --partitioner,
// ... whose defaults differ from program to program).
//
// A networked cluster comes from --cluster_spec or, without it, the TF_CONFIG environment
// variable; this process's role and worker task from --role and --task, else the task of the
// spec file or TF_CONFIG, else the coordinator (tessera/cluster.h: TF's "chief" is the
// coordinator). --mode=sim or --mode=local runs in this process whatever TF_CONFIG says.
//
// The flags are defined in one file of the library, which a program links only by calling
// ReadTrainingFlags or TrainingFlagGroups, so that programs that do not train (the `tessera`
// binary) are free to define flags of the same names.
//
// Thread-safety: call ReadTrainingFlags after absl::ParseCommandLine, and RunTrainingJob, from the
// main thread (RunTrainingJob blocks until the job is over).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tessera/cluster.h"
#include "tessera/command_line.h"
#include "tessera/data.h"
#include "tessera/evaluation.h"
#include "tessera/model.h"
#include "tessera/optimizer.h"
#include "tessera/partitioner.h"

namespace tessera {

// -- The job --------------------------------------------------------------------------------------

struct TrainingJob {
  // Prefixes every line the job prints ("recsys: ...") and is the summary's "workload".
  std::string name;
  ModelSpec model;
  OptimizerSpec optimizer;
  Dataset train;
  // Evaluated once training is over (and every --eval_every steps): on parameter servers by the
  // workers, in batches the coordinator merges. May be empty.
  Dataset test;
  // The schedule, in global steps under every strategy. With `epochs` > 0 the steps are that many
  // passes over `train` in batches of `batch_size` (ScheduleTraining): a strategy whose step
  // takes more examples (mirrored: a batch on each replica) counts `epochs` passes of its own
  // steps instead.
  int64_t steps = 0;
  int64_t epochs = 0;
  int64_t batch_size = 0;
  // How the variables the model marks partitioned (embeddings) are sharded on parameter servers.
  Partitioner partitioner;
  // Reports the trained model's evaluation on `test`: prints the program's result line and adds
  // its fields (test_loss, test_auc, ...) to the summary, which is written after it returns.
  std::function<void(const EvalResult& eval, nlohmann::json& summary)> report;
};

// A job's schedule from a program's flags: `steps` when it is > 0; when it is 0, `epochs` passes
// over `train` in batches of `batch_size`, the last batch of each pass counted even when partial.
// InvalidArgument, naming the flag (--batch_size, --steps, --epochs), for a batch size < 1, steps
// < 0, epochs < 1 (with steps 0), or a schedule of more steps than an int64 holds; and for
// training data without examples (an empty file: nothing to train on).
absl::StatusOr<int64_t> TrainingSteps(int64_t steps, int64_t epochs, const Dataset& train,
                                      int64_t batch_size);

// Sets `job`'s schedule from a program's flags: job.steps = TrainingSteps(steps, epochs,
// job.train, job.batch_size), and job.epochs = `epochs` when `steps` is 0 (else 0). Its errors.
absl::Status ScheduleTraining(TrainingJob& job, int64_t steps, int64_t epochs);

// "4690 steps of 128" or, from epochs, "10 epochs of 60000 examples in batches of 128": what a
// program prints of `job`'s schedule.
std::string DescribeSchedule(const TrainingJob& job);

// -- How it runs ----------------------------------------------------------------------------------

// What the mirrored strategy does when a replica is lost.
enum class ReplicaLossPolicy {
  // TF's behaviour: wait for the worker to be back (in the simulation it is restarted at once),
  // then restore every replica from the latest checkpoint and train on from there. Without
  // --checkpoint_dir the run fails, naming the replica.
  kRestore,
  // Go on with the replicas left: the global batch shrinks by one replica's batch.
  kContinue,
};

// How to train on parameter servers: in the simulation, or (with `cluster`) as the coordinator
// of a networked cluster.
struct ParameterServerTrainingOptions {
  int32_t ps = 2;
  int32_t workers = 2;
  int32_t closures_per_worker = 1;
  // Copies of each shard (--shard_copies): 1, or 2 for a backup of every shard on the next PS,
  // which takes over when its primary's PS is lost.
  int32_t shard_copies = 1;
  // Checkpoints: every `checkpoint_every` steps and every `checkpoint_every_seconds` of training,
  // whichever comes first (0 and 0: only at the end), into
  // checkpoint_dir/ckpt-<step> (the last 3 are kept); with `resume`, training continues from the
  // latest one there (any PS count or partitioner). A run without `resume` refuses a
  // checkpoint_dir that holds checkpoints, unless `overwrite_checkpoints` (then they are deleted
  // first). With export_dir, the trained model is exported there at the end.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  double checkpoint_every_seconds = 0;
  // A checkpoint during training is written while training goes on, which waits only for the
  // shards' copy-on-write cuts (docs/design.md, "Checkpoints without pausing"); false: it waits for
  // the whole write (and no PS holds a copy of its shards meanwhile).
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
};

struct DashboardOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free port
};

enum class TrainingMode {
  kSimulation,  // --mode=sim: parameter servers and workers in this process (the default)
  kLocal,       // --mode=local: the single-thread baseline
  kNetworked,   // --mode=net (the default with --cluster_spec or TF_CONFIG): a networked cluster
};

enum class TrainingStrategy {
  kParameterServer,  // --strategy=ps: asynchronous, variables on parameter servers (the default)
  kMirrored,         // --strategy=mirrored: synchronous, a copy per worker, all-reduced
};

enum class TrainingRole {
  kCoordinator,  // --role=coordinator (or a "chief" task): schedules, checkpoints (the default)
  kWorker,       // --role=worker (or a "worker" task): serves train steps (networked mode only)
};

struct TrainingFlags {
  TrainingMode mode = TrainingMode::kSimulation;
  TrainingRole role = TrainingRole::kCoordinator;
  TrainingStrategy strategy = TrainingStrategy::kParameterServer;
  // --on_replica_loss (the mirrored strategy): restore (the default) or continue.
  ReplicaLossPolicy on_replica_loss = ReplicaLossPolicy::kRestore;
  int32_t task = 0;  // the worker's task (a worker's --task, or its task's index)
  // Everything but the partitioner, which the program sets.
  ParameterServerTrainingOptions parameter_servers;
  uint64_t seed = 1;    // --seed: the model's and the data shuffling's
  std::string summary;  // --summary: where to write the JSON summary ("": nowhere)
  // --metrics_file: where to write the run's JSON lines as it goes ("": nowhere)
  std::string metrics_file;
  int64_t eval_every = 0;  // --eval_every: steps between validations (0: only at the end)
  // --dashboard_port (and --dashboard_host): the run's dashboard, a web page of its progress and
  // its cluster; none without the flag.
  std::optional<DashboardOptions> dashboard;
  bool dashboard_keep_serving = false;  // --dashboard_keep_serving: serve on after the run
};

// Reads the shared flags (and TF_CONFIG), first applying the log level (--log_level, -v).
// InvalidArgument for a mode other than sim, local or
// net; --shard_copies other than 1 or 2, or given with a different --replicas (its deprecated
// alias); checkpoint or export flags with --mode=local (they work on parameter servers);
// --cluster_spec, --role or --task with --mode=sim or local; --mode=net, --role or --task without
// a cluster; --overwrite_checkpoints with --resume or without --checkpoint_dir; a role other than
// coordinator (chief) or worker, or a task of TF_CONFIG or the spec that is a parameter server;
// a worker task not in the cluster; --threads < 0; --min_workers outside 1..the cluster's
// workers; incomplete or unreadable TLS flags. Unavailable for a
// networked coordinator whose port another process listens on. NotFound or
// InvalidArgument, naming the file or TF_CONFIG, for a cluster that cannot be read or parsed
// (ResolveClusterConfig).
absl::StatusOr<TrainingFlags> ReadTrainingFlags();

// The shared flags in groups, for a program's --help (tessera/command_line.h).
std::vector<FlagGroup> TrainingFlagGroups();

// -- Running it -----------------------------------------------------------------------------------

// Runs `job` as `flags` say:
//   - a networked worker (--role=worker) serves train steps until its coordinator finishes, and
//     returns;
//   - otherwise the model trains — on parameter servers (in the simulation, or as the coordinator
//     of a networked cluster), under the mirrored strategy, or locally — then the throughput line
//     is printed, the trained model is evaluated on job.test and job.report called, and the
//     summary is written to flags.summary.
// The run is recorded as it goes (steps, validations, checkpoints, the cluster's figures): in
// flags.metrics_file's lines, on the dashboard (flags.dashboard), and in the summary.
// InvalidArgument for training data without examples, a model or optimizer that does not
// validate, or naming --metrics_file when
// that file cannot be written (before training starts); the first error of training, evaluation
// or writing the summary.
absl::Status RunTrainingJob(const TrainingJob& job, const TrainingFlags& flags);

}  // namespace tessera
