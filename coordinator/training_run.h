// TrainingRun: what one training run did — the figures every way of training reports
// (TrainOnParameterServers, TrainLocally, RunTrainingSteps) and the summary records.
//
// Thread-safety: a value.
#pragma once

#include <cstdint>

namespace tessera {

struct TrainingRun {
  int64_t steps = 0;        // steps this run took (a resumed run's exclude the checkpoint's)
  int64_t examples = 0;     // examples those steps trained on
  double wall_seconds = 0;  // the training loop only: not set-up, data or evaluation
  double final_loss = 0;    // example-weighted mean loss of the last ~5% of steps
};

}  // namespace tessera
