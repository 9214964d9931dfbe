// The train_step closure: the replica function a training loop schedules once per step, and the
// per-worker batch stream it reads from.
//
//   kTrainStep(), scheduled with its global step -> a StepOutcome (TrainStepOutcome)
//   coordinator.Schedule(kTrainStep, {}, /*step=*/s)
//
// The batch index is the global step (Closure::step, typed, not an argument): batches are
// assigned by the scheduler (dynamic sharding, tessera/data.h), so a closure re-run after its
// worker died trains the same batch — no batch is lost or repeated whichever workers die — and a
// resumed run continues the data where its checkpoint left it.
//
// Thread-safety: RegisterTrainStep mutates only the registry it is given (before the
// coordinator or worker reads it); the registered function runs on worker actors.
#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/ps/train_step.h"
#include "actors/scheduling/replica.h"
#include "tessera/data.h"

namespace tessera {

inline constexpr char kTrainStep[] = "train_step";
// Its result, the step's mean loss and the examples in its batch, travels as the closure values
// {"loss": double, "examples": int64}; these two are the only readers and writers of those names.
ClosureValues TrainStepValues(const StepOutcome& outcome);
// InvalidArgument naming the value when one is missing or of another type.
absl::StatusOr<StepOutcome> TrainStepOutcome(const ClosureValues& values);
// The per-worker resource: each worker's BatchStream over the training set.
inline constexpr char kTrainBatches[] = "train_batches";

// Registers kTrainBatches — each worker's BatchStream over `train` (shuffled by `seed`, endless,
// `batch_size` examples per batch) — and kTrainStep, which reads the batch of its closure's step
// from it, runs TrainStepAsync against `vars` and returns the step's loss and example count; a
// closure scheduled without a step fails with InvalidArgument. AlreadyExists when the registry has
// either name already.
absl::Status RegisterTrainStep(FunctionRegistry& registry,
                               std::shared_ptr<const ModelVariables> vars, const Dataset& train,
                               int64_t batch_size, uint64_t seed);

}  // namespace tessera
