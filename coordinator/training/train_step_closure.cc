#include "coordinator/training/train_step_closure.h"

#include <utility>

#include "tessera/status.h"

namespace tessera {
namespace {

constexpr char kLoss[] = "loss";
constexpr char kExamples[] = "examples";

}  // namespace

ClosureValues TrainStepValues(const StepOutcome& outcome) {
  ClosureValues values;
  values.Set(kLoss, static_cast<double>(outcome.loss)).Set(kExamples, outcome.examples);
  return values;
}

absl::StatusOr<StepOutcome> TrainStepOutcome(const ClosureValues& values) {
  StepOutcome outcome;
  TESSERA_ASSIGN_OR_RETURN(const double loss, values.Get<double>(kLoss));
  outcome.loss = static_cast<float>(loss);
  TESSERA_ASSIGN_OR_RETURN(outcome.examples, values.Get<int64_t>(kExamples));
  return outcome;
}

absl::Status RegisterTrainStep(FunctionRegistry& registry,
                               std::shared_ptr<const ModelVariables> vars, const Dataset& train,
                               int64_t batch_size, uint64_t seed) {
  TESSERA_RETURN_IF_ERROR(registry.AddResource<BatchStream>(
      kTrainBatches, [train, batch_size, seed](const WorkerInfo&) {
        return BatchStream::Create(train, batch_size, /*shuffle=*/true, seed);
      }));
  return registry.AddReplicaFunction(
      kTrainStep, [vars](ReplicaContext& ctx, const ClosureValues&, Done<ClosureValues> done) {
        if (ctx.step() < 0) {
          return done(absl::InvalidArgumentError(
              "train_step needs its global step: schedule it with one (Schedule's `step`)"));
        }
        absl::StatusOr<BatchStream*> batches = ctx.Resource<BatchStream>(kTrainBatches);
        if (!batches.ok()) return done(batches.status());
        absl::StatusOr<Batch> batch = (*batches)->Get(ctx.step());
        if (!batch.ok()) return done(batch.status());
        TrainStepAsync(ctx.shards().self(), vars, *std::move(batch), ctx.update_namer(),
                       [done](absl::StatusOr<StepOutcome> outcome) {
                         if (!outcome.ok()) return done(outcome.status());
                         done(TrainStepValues(*outcome));
                       });
      });
}

}  // namespace tessera
