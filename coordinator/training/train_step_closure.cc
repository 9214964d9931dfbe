#include "coordinator/training/train_step_closure.h"

#include <utility>

#include "tessera/status.h"

namespace tessera {

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
        TrainStepAsync(ctx.self(), vars, *std::move(batch), ctx.update_namer(),
                       [done](absl::StatusOr<StepOutcome> outcome) {
                         if (!outcome.ok()) return done(outcome.status());
                         ClosureValues out;
                         out.Set(kTrainStepLoss, static_cast<double>(outcome->loss))
                             .Set(kTrainStepExamples, outcome->examples);
                         done(std::move(out));
                       });
      });
}

}  // namespace tessera
