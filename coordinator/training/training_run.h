// What a training run did (TrainingRun: the figures every way of training reports —
// TrainOnParameterServers, TrainMirrored, TrainLocally, all through RunTrainingLoop — and the
// summary records). What a
// program asks of it is its TrainingJob (tessera/training.h).
//
// Thread-safety: values.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/evaluation.h"
#include "tessera/training.h"

namespace tessera {

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
  // Example-weighted mean loss of the steps past steps - max(1, steps / 20): the last 5% of the
  // schedule (a resumed run's as the whole schedule's).
  double final_loss = 0;
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
