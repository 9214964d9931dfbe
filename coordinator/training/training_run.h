// A training run's two ends: what a program asks (TrainingJob: its model, optimizer, data,
// schedule and report) and what the run did (TrainingRun: the figures every way of training
// reports — TrainOnParameterServers, TrainLocally, RunTrainingSteps — and the summary records).
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/data/dataset.h"
#include "core/model/model_spec.h"
#include "core/model/optimizer.h"
#include "core/training/evaluation.h"
#include "core/variables/partitioner.h"

namespace tessera {

struct TrainingJob {
  // Prefixes every line the job prints ("recsys: ...") and is the summary's "workload".
  std::string name;
  ModelSpec model;
  OptimizerSpec optimizer;
  Dataset train;
  // Evaluated once training is over (and every --eval_every steps): on parameter servers by the
  // workers, in batches the coordinator merges (coordinator/training/distributed_evaluation.h). May
  // be empty.
  Dataset test;
  int64_t steps = 0;
  int64_t batch_size = 0;
  // How the variables the model marks partitioned (embeddings) are sharded on parameter servers.
  Partitioner partitioner;
  // Reports the trained model's evaluation on `test`: prints the program's result line and adds
  // its fields (test_loss, test_auc, ...) to the summary, which is written after it returns.
  std::function<void(const EvalResult& eval, nlohmann::json& summary)> report;
};

// A validation during training: the test set evaluated at a global step.
struct StepEvaluation {
  int64_t step = 0;
  EvalResult result;
};

struct TrainingRun {
  int64_t steps = 0;        // steps this run took (a resumed run's exclude the checkpoint's)
  int64_t examples = 0;     // examples those steps trained on
  double wall_seconds = 0;  // the training loop only: not set-up, data or evaluation
  double startup_seconds = 0;  // from the process's start to its first training step
  double final_loss = 0;    // example-weighted mean loss of the last ~5% of steps
  // Each whole pass over the training set, in order: its examples per second (the first pays
  // for initializing the rows it touches first, Note [Rows initialized on first touch] in
  // core/ps/first_touch.h; a later one does not). Empty when the loop does not know its passes.
  std::vector<double> examples_per_sec_by_pass;
  // Training waited for the checkpoints taken during it this long: their cuts (the shards' copies),
  // not their writing (Note [Checkpoints without pausing], coordinator/checkpoint/save_restore.cc).
  double checkpoint_pause_seconds = 0;
  // ... and for a checkpoint's writing to end before the next one (or the end of training).
  double checkpoint_wait_seconds = 0;
  // Validations every --eval_every steps, in step order (each evaluates the variables as they
  // were while training went on: asynchronous training has no global step boundary).
  std::vector<StepEvaluation> evaluations;
  // The trained model's evaluation on the test set, when there is one.
  std::optional<EvalResult> eval;
};

}  // namespace tessera
