#include "coordinator/training/distributed_evaluation.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tessera/status.h"

namespace tessera {

absl::Status RegisterEvalStep(FunctionRegistry& registry,
                              std::shared_ptr<const ModelVariables> vars, const Dataset& test) {
  TESSERA_RETURN_IF_ERROR(
      registry.AddResource<BatchStream>(kEvalBatches, [test](const WorkerInfo&) {
        return BatchStream::Create(test, kEvalBatchSize, /*shuffle=*/false, /*seed=*/0);
      }));
  // The model's logits output, resolved once.
  const std::string logits_output = EvalAccumulator(*vars->model).logits_output();
  return registry.AddReplicaFunction(
      kEvalStep, [vars, logits_output](ReplicaContext& ctx, const ClosureValues& args,
                                       Done<ClosureValues> done) {
        absl::StatusOr<int64_t> index = args.Get<int64_t>(kEvalStepBatch);
        if (!index.ok()) return done(index.status());
        absl::StatusOr<BatchStream*> batches = ctx.Resource<BatchStream>(kEvalBatches);
        if (!batches.ok()) return done(batches.status());
        if (*index < 0 || *index >= (*batches)->batches_per_epoch()) {
          return done(absl::InvalidArgumentError(
              absl::StrCat("eval batch ", *index, " is outside the test set's ",
                           (*batches)->batches_per_epoch(), " batches")));
        }
        absl::StatusOr<Batch> batch = (*batches)->Get(*index);
        if (!batch.ok()) return done(batch.status());
        ForwardStepAsync(
            ctx.shards().self(), vars, *std::move(batch),
            [done, logits_output](absl::StatusOr<ForwardOutcome> outcome) {
              if (!outcome.ok()) return done(outcome.status());
              if (!outcome->result.loss.has_value()) {
                return done(absl::InvalidArgumentError("evaluate: the test set has no labels"));
              }
              ClosureValues out;
              out.Set(kEvalStepLoss, static_cast<double>(*outcome->result.loss))
                  .Set(kEvalStepExamples, outcome->examples)
                  .Set(kEvalStepLabels, std::move(outcome->labels));
              if (!logits_output.empty()) {
                out.Set(kEvalStepLogits, std::move(outcome->result.outputs.at(logits_output)));
              }
              done(std::move(out));
            });
      });
}

absl::StatusOr<PendingEvaluation> PendingEvaluation::Schedule(ClusterCoordinator& coordinator,
                                                              const Model& model,
                                                              int64_t test_examples,
                                                              int64_t step) {
  if (test_examples < 1) return absl::InvalidArgumentError("evaluate: the test set is empty");
  PendingEvaluation eval(model, step);
  const int64_t batches = BatchesPerPass(test_examples, kEvalBatchSize);
  eval.batches_.reserve(static_cast<size_t>(batches));
  for (int64_t b = 0; b < batches; ++b) {
    ClosureValues args;
    args.Set(kEvalStepBatch, b);
    TESSERA_ASSIGN_OR_RETURN(RemoteValue value, coordinator.Schedule(kEvalStep, std::move(args)));
    eval.batches_.push_back(std::move(value));
  }
  return eval;
}

bool PendingEvaluation::ready() const {
  for (const RemoteValue& value : batches_) {
    const RemoteValueState state = value.state();
    if (state == RemoteValueState::kNotReady || state == RemoteValueState::kAborted) return false;
  }
  return true;
}

absl::StatusOr<EvalResult> PendingEvaluation::Result() {
  for (const RemoteValue& value : batches_) {
    TESSERA_ASSIGN_OR_RETURN(const ClosureValues out, value.Fetch());
    TESSERA_ASSIGN_OR_RETURN(const double loss, out.Get<double>(kEvalStepLoss));
    TESSERA_ASSIGN_OR_RETURN(const int64_t examples, out.Get<int64_t>(kEvalStepExamples));
    TESSERA_ASSIGN_OR_RETURN(const Tensor labels, out.Get<Tensor>(kEvalStepLabels));
    std::optional<Tensor> logits;
    if (!accumulator_.logits_output().empty()) {
      TESSERA_ASSIGN_OR_RETURN(logits, out.Get<Tensor>(kEvalStepLogits));
    }
    TESSERA_RETURN_IF_ERROR(
        accumulator_.Add(static_cast<float>(loss), examples, logits ? &*logits : nullptr, labels));
  }
  batches_.clear();
  return accumulator_.Result();
}

std::string DescribeEvaluation(const EvalResult& eval) {
  std::string out = absl::StrFormat("loss %.4f", eval.loss);
  if (eval.auc.has_value()) absl::StrAppendFormat(&out, ", AUC %.4f", *eval.auc);
  if (eval.accuracy.has_value()) absl::StrAppendFormat(&out, ", accuracy %.4f", *eval.accuracy);
  if (eval.rmse.has_value()) absl::StrAppendFormat(&out, ", RMSE %.4f", *eval.rmse);
  if (eval.mae.has_value()) absl::StrAppendFormat(&out, ", MAE %.4f", *eval.mae);
  absl::StrAppendFormat(&out, " (%d examples)", eval.examples);
  return out;
}

}  // namespace tessera
