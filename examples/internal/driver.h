// What the training drivers (examples/*.cc) share: the replica functions of a training step, the
// scheduling loop with its progress line, evaluation of the parameter-server variables, and the
// JSON summary. A driver states its model, its data and its flags; everything else is here.
//
// Thread-safety: call from the driver's thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/replica.h"
#include "actors/train_step.h"
#include "coordinator/cluster_coordinator.h"
#include "cluster/network.h"
#include "coordinator/strategy.h"
#include "core/dataset.h"
#include "core/local_trainer.h"
#include "core/partitioner.h"

namespace tessera::driver {

inline constexpr char kTrainStep[] = "train_step";
inline constexpr char kTrainBatches[] = "train_batches";

// Registers the per-worker resource kTrainBatches — each worker's BatchStream over `train`
// (shuffled by `seed`, endless) — and the replica function kTrainStep(batch index), which reads
// that batch, runs TrainStepAsync against `vars` and returns {loss, examples}. Batches are
// assigned by the scheduler (dynamic sharding, core/dataset.h): a re-run after a worker failure
// trains the same batch, so no batch is lost or repeated whichever workers die.
absl::Status RegisterTraining(FunctionRegistry& registry,
                              std::shared_ptr<const ModelVariables> vars, const Dataset& train,
                              int64_t batch_size, uint64_t seed);

struct TrainingRun {
  int64_t steps = 0;
  int64_t examples = 0;
  double wall_seconds = 0;
  double final_loss = 0;  // example-weighted mean loss of the last ~5% of steps
  // A worker process (--role=worker) served closures until the coordinator finished: it trained
  // nothing itself, so there is nothing to evaluate here.
  bool worker_role = false;
};

// Schedules kTrainStep(first_step), ..., kTrainStep(steps - 1) (the batch index is the global
// step, so a resumed run continues the data where the checkpoint left it); every
// `checkpoint_every` steps (0: never) it joins and calls `checkpoint(global_step)`. Prints printing a live progress line on a terminal (plain
// lines every few seconds otherwise), then joins. Returns the first error a closure raised.
absl::StatusOr<TrainingRun> RunTrainingSteps(
    ClusterCoordinator& coordinator, int64_t first_step, int64_t steps, int64_t batch_size,
    const std::string& label, int64_t checkpoint_every = 0,
    const std::function<absl::Status(int64_t)>& checkpoint = nullptr);

// How a driver trains on parameter servers: in the simulation, or (with `cluster`) as the
// coordinator of a networked cluster.
struct SimOptions {
  int32_t ps = 2;
  int32_t workers = 2;
  Partitioner partitioner;
  int32_t closures_per_worker = 1;
  // Checkpoints: every `checkpoint_every` steps into checkpoint_dir/ckpt-<step> (the last 3 are
  // kept); with `resume`, training continues from the latest one there (any PS count or
  // partitioner). With export_dir, the trained model is exported there at the end.
  std::string checkpoint_dir;
  int64_t checkpoint_every = 0;
  bool resume = false;
  std::string export_dir;
  int32_t inject_worker_failures = 0;  // workers killed mid-closure, each restarted after:
  absl::Duration restart_delay = absl::Milliseconds(100);
  uint64_t seed = 1;
  // Networked mode: the cluster spec (PS processes to connect to, workers that will join), the
  // network options, and how many workers to wait for (and how long) before training starts.
  // With checkpoint_dir, a lost PS is restored from the latest checkpoint.
  std::optional<ClusterSpec> cluster;
  NetworkOptions network;
  int32_t min_workers = 1;
  absl::Duration worker_wait = absl::Minutes(5);
  int32_t threads = 0;  // this process's scheduler threads (0: one per core)
};

// Trains `trainer`'s model for `steps` steps of `batch_size` on an in-process cluster (or the
// networked one of options.cluster): one
// variable per parameter (embeddings partitioned), the trainer's optimizer on the shards,
// per-worker shuffled parts of `train`. Prints the placement and the closure statistics, then
// copies the trained variables into `trainer` (to evaluate) and fills the summary's run fields.
absl::StatusOr<TrainingRun> TrainInSimulation(LocalTrainer& trainer, const Dataset& train,
                                              int64_t steps, int64_t batch_size,
                                              const SimOptions& options, const std::string& label,
                                              nlohmann::json& summary);

// The baseline: `steps` steps of the trainer itself, one thread, on the same batch stream the
// simulation trains on.
absl::StatusOr<TrainingRun> TrainLocally(LocalTrainer& trainer, const Dataset& train,
                                         int64_t steps, int64_t batch_size, uint64_t seed,
                                         const std::string& label, nlohmann::json& summary);

// Runs this process as worker `task` of the networked cluster in `options`: the replica
// functions of RegisterTraining against the variables the coordinator hands out, until the
// coordinator finishes (see coordinator/worker_node.h).
absl::Status ServeAsWorker(const LocalTrainer& trainer, const Dataset& train, int64_t batch_size,
                           const SimOptions& options, int32_t task);

// The flags every driver shares, defined once in driver.cc: --mode, --ps, --workers,
// --closures_per_worker, --checkpoint_dir, --checkpoint_every, --resume, --export_dir,
// --inject_worker_failures, --restart_delay_ms, --seed, --summary, and networked mode's
// --cluster_spec, --role, --task, --min_workers, --worker_wait_s, --connect_timeout_s, --threads, --bind,
// --tls_cert, --tls_key, --tls_ca. A driver adds its own model, data and schedule flags
// (--steps, --batch_size, --partitioner, ... whose defaults differ).
struct DriverFlags {
  std::string mode;  // "sim", "local", or "net" (with --cluster_spec)
  std::string role;  // "coordinator" or "worker" (networked mode)
  int32_t task = 0;  // the worker's task (--role=worker)
  SimOptions sim;    // everything but the partitioner, which the driver sets
  uint64_t seed = 1;
  std::string summary;
};

// Reads the shared flags. InvalidArgument for a mode other than sim or local, checkpoint /
// export flags with --mode=local (they work on parameter servers), a bad cluster spec or role,
// or incomplete TLS flags.
absl::StatusOr<DriverFlags> ReadDriverFlags();

// Trains `trainer`'s model for `steps` steps as `flags.mode` says (TrainLocally, or
// TrainInSimulation with `partitioner`), prints the throughput line, and records the run in
// `summary` (steps, examples, wall_seconds, examples_per_sec, final_loss and the mode's fields).
// The trained values are in `trainer` afterwards, ready to evaluate.
absl::StatusOr<TrainingRun> Train(LocalTrainer& trainer, const Dataset& train, int64_t steps,
                                  int64_t batch_size, const Partitioner& partitioner,
                                  const DriverFlags& flags, const std::string& label,
                                  nlohmann::json& summary);

// Copies the current value of every model variable into `trainer` (whose model is the same) so
// it can evaluate on the driver.
absl::Status PullVariables(const ParameterServerStrategy& strategy, LocalTrainer& trainer);

// The progress line: "\r"-rewritten when stderr is a terminal, a log line every 5 s otherwise.
class Progress {
 public:
  Progress(std::string label, int64_t total_steps, int64_t batch_size);
  void Update(int64_t steps_done, double recent_loss);
  void Finish(int64_t steps_done, double recent_loss);
  // Whether progress goes to a terminal (stderr).
  static bool OnTerminal();

 private:
  void Print(int64_t steps_done, double recent_loss, bool final);
  std::string label_;
  int64_t total_steps_;
  int64_t batch_size_;
  bool terminal_;
  double start_;
  double last_print_ = -1;
};

// Writes `summary` to `path`, pretty-printed (nothing when path is empty).
absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary);

}  // namespace tessera::driver
