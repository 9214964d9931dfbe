// The train_step closure: the replica function a training loop schedules once per step, and the
// per-worker batch stream it reads from.
//
//   kTrainStep({"batch": int64}) -> {"loss": double, "examples": int64}
//
// The batch index is the global step: batches are assigned by the scheduler (dynamic sharding,
// tessera/data.h), so a closure re-run after its worker died trains the same batch — no batch
// is lost or repeated whichever workers die — and a resumed run continues the data where its
// checkpoint left it.
//
// Thread-safety: RegisterTrainStep mutates only the registry it is given (before the
// coordinator or worker reads it); the registered function runs on worker actors.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "actors/ps/train_step.h"
#include "actors/scheduling/replica.h"
#include "tessera/data.h"

namespace tessera {

inline constexpr char kTrainStep[] = "train_step";
// Its argument: the batch index (int64), which is the global step.
inline constexpr char kTrainStepBatch[] = "batch";
// Its results: the step's mean loss (double) and the examples in its batch (int64).
inline constexpr char kTrainStepLoss[] = "loss";
inline constexpr char kTrainStepExamples[] = "examples";
// The per-worker resource: each worker's BatchStream over the training set.
inline constexpr char kTrainBatches[] = "train_batches";

// Registers kTrainBatches — each worker's BatchStream over `train` (shuffled by `seed`, endless,
// `batch_size` examples per batch) — and kTrainStep, which reads its batch from it, runs
// TrainStepAsync against `vars` and returns the step's loss and example count. AlreadyExists when
// the registry has either name already.
absl::Status RegisterTrainStep(FunctionRegistry& registry,
                               std::shared_ptr<const ModelVariables> vars, const Dataset& train,
                               int64_t batch_size, uint64_t seed);

}  // namespace tessera
