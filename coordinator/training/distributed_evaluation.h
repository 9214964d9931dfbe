// Distributed evaluation, as TensorFlow's ClusterCoordinator does it with schedule(eval_fn):
// forward-only closures on the workers over the test set, each reading its own batch (by index,
// like training), and the coordinator merging what they return — per batch its mean loss, the
// logits and the labels — into one EvalResult. The coordinator holds neither the variables nor
// the data; merged in batch order by the one accumulator LocalTrainer::Evaluate also uses
// (core/training/evaluation.h), the result is bit-identical to evaluating the same values in one
// process.
//
//   kEvalStep({"batch": int64}) -> {"loss": double, "examples": int64, "labels": Tensor,
//                                   "logits": Tensor (when the model names its logits output)}
//
// Example (what TrainOnParameterServers does at the end and every --eval_every steps):
//   TESSERA_RETURN_IF_ERROR(RegisterEvalStep(*registry, vars, test));        // on every worker
//   ...
//   TESSERA_ASSIGN_OR_RETURN(PendingEvaluation eval, PendingEvaluation::Schedule(*coordinator,
//   *model,
//                                                                        test.size(), step));
//   ... keep training; eval.ready() says when every batch is evaluated ...
//   TESSERA_ASSIGN_OR_RETURN(EvalResult result, eval.Result());
//
// Thread-safety: RegisterEvalStep mutates only its registry; a PendingEvaluation belongs to the
// thread that scheduled it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/ps/train_step.h"
#include "actors/scheduling/replica.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/training/training_loop.h"
#include "core/model/model.h"
#include "core/training/evaluation.h"
#include "tessera/data.h"

namespace tessera {

inline constexpr char kEvalStep[] = "eval_step";
// Its argument: the test batch's index.
inline constexpr char kEvalStepBatch[] = "batch";
// Its results.
inline constexpr char kEvalStepLoss[] = "loss";  // the batch's mean loss (double)
inline constexpr char kEvalStepExamples[] = "examples";
inline constexpr char kEvalStepLabels[] = "labels";  // [examples, 1]
inline constexpr char kEvalStepLogits[] = "logits";  // [examples, width]
// The per-worker resource: the test set in evaluation batches, in order.
inline constexpr char kEvalBatches[] = "eval_batches";

// Registers kEvalBatches (the test set in batches of kEvalBatchSize — core/training/evaluation.h,
// the LocalTrainer's default too, so both see the same batches — unshuffled) and kEvalStep, which
// runs ForwardStepAsync on its batch against `vars`. AlreadyExists when the registry has either
// name already.
absl::Status RegisterEvalStep(FunctionRegistry& registry,
                              std::shared_ptr<const ModelVariables> vars, const Dataset& test);

// One evaluation of the test set in flight: a closure per batch.
// A validation the training loop waits for (RunningEvaluation) while the workers evaluate.
class PendingEvaluation final : public RunningEvaluation {
 public:
  // Schedules kEvalStep on every batch of a `test_examples`-example test set, tagged with the
  // training step it evaluates. InvalidArgument for an empty test set; Schedule's errors.
  static absl::StatusOr<PendingEvaluation> Schedule(ClusterCoordinator& coordinator,
                                                    const Model& model, int64_t test_examples,
                                                    int64_t step);

  int64_t step() const { return step_; }
  // True once no batch is queued or running (each is done, failed or cancelled).
  bool ready() const override;
  // Waits for every batch and merges them in batch order; the first batch's error otherwise.
  // Call once.
  absl::StatusOr<EvalResult> Result() override;

 private:
  PendingEvaluation(const Model& model, int64_t step) : accumulator_(model), step_(step) {}

  EvalAccumulator accumulator_;
  int64_t step_;
  std::vector<RemoteValue> batches_;
};

// "loss 0.5231, AUC 0.7012, accuracy 0.6874 (100000 examples)": the figures `eval` has.
std::string DescribeEvaluation(const EvalResult& eval);

}  // namespace tessera
