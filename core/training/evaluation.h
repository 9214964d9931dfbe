// Evaluation of a model on a labelled test set: the figures (EvalResult) and the one accumulator
// that builds them from forward results batch by batch, wherever the forward passes ran — in a
// LocalTrainer on one thread, or as evaluation closures on the workers of a parameter-server run,
// merged by the coordinator (coordinator/training/distributed_evaluation.h). Fed the same batches
// in the same order, both give bit-identical results: the loss sums the same doubles in the same
// order and the AUC is exact (core/training/metrics.h).
//
// Example:
//   EvalAccumulator eval(model);
//   for (each test batch, in order) {
//     TESSERA_ASSIGN_OR_RETURN(ForwardResult out, model.Forward(batch, params));
//     TESSERA_RETURN_IF_ERROR(eval.Add(*out.loss, batch.size, eval.Logits(out.outputs),
//     batch.labels));
//   }
//   TESSERA_ASSIGN_OR_RETURN(EvalResult result, eval.Result());
//
// Thread-safety: EvalAccumulator is not synchronized (one owner); EvalResult is a value.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/model.h"
#include "core/training/metrics.h"
#include "tessera/evaluation.h"
#include "tessera/tensor.h"

namespace tessera {

// Examples per evaluation batch, wherever it runs: small enough that a batch's gathered rows and
// activations stay a few MiB at wide embeddings (512 x 1000 floats = 2 MiB per table), like a
// training batch's.
inline constexpr int64_t kEvalBatchSize = 512;

class EvalAccumulator {
 public:
  explicit EvalAccumulator(const Model& model);

  // The output holding the loss's logits ("" when the spec names none: then only the loss is
  // evaluated).
  const std::string& logits_output() const { return logits_output_; }
  // That output among a forward pass's `outputs`; null when there is none.
  const Tensor* Logits(const std::map<std::string, Tensor>& outputs) const;

  // Adds one batch: its mean loss over `examples` examples, its logits ([examples, width]; may be
  // null only when logits_output() is empty) and labels ([examples, 1]). InvalidArgument, adding
  // nothing, for examples < 1, logits or labels of the wrong size, or scores or labels the
  // metrics reject (core/training/metrics.h: a NaN logit, a label outside the classes).
  absl::Status Add(float mean_loss, int64_t examples, const Tensor* logits, const Tensor& labels);

  // InvalidArgument when no example was added.
  absl::StatusOr<EvalResult> Result() const;

 private:
  LossKind loss_kind_;
  std::string logits_output_;
  int64_t examples_ = 0;
  double loss_sum_ = 0;
  double squared_error_sum_ = 0;  // regressions only
  double absolute_error_sum_ = 0;
  AucAccumulator auc_;
  AccuracyAccumulator accuracy_;
};

}  // namespace tessera
