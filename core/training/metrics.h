// Evaluation metrics: exact AUC, binary log-loss and accuracy, as one-shot functions and as
// streaming accumulators that merge (per-worker metric variables reduce by Merge).
//
// Inputs are spans of per-example values, as a model and a Batch hold them: `scores` are the
// model's outputs ([n, 1] logits or probabilities, passed as tensor.values()), `labels` the
// batch's [n, 1] labels (0/1 for binary metrics, the class index for multi-class accuracy).
//
// A metric over no examples, or an AUC without both classes, is undefined: Result() returns
// FailedPrecondition rather than a made-up number (TF's AUC returns 0 there).
//
// Example:
//   AucAccumulator auc;
//   LogLossAccumulator log_loss;
//   for (...) {
//     TESSERA_RETURN_IF_ERROR(auc.Add(logits.values(), batch.labels.values()));
//     TESSERA_RETURN_IF_ERROR(log_loss.AddLogits(logits.values(), batch.labels.values()));
//   }
//   TESSERA_ASSIGN_OR_RETURN(double test_auc, auc.Result());
//
// Thread-safety: accumulators are not synchronized (one per worker, merged afterwards); the free
// functions are pure.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

// Probabilities are clamped to [kLogLossEpsilon, 1 - kLogLossEpsilon] before the log, so a
// confidently wrong probability costs -log(1e-7) ~ 16.1 instead of infinity (Keras' epsilon).
inline constexpr double kLogLossEpsilon = 1e-7;

// Exact area under the ROC curve: the Mann-Whitney probability that a random positive scores
// above a random negative, tied pairs counting one half (equivalently, ranks with ties given
// their average rank). Any monotone transform of the scores gives the same AUC, so pass logits:
// float sigmoids saturate and would create ties. Keeps every score until Result(); exact for up
// to ~10^8 examples (the pair count stays exactly representable in a double).
class AucAccumulator {
 public:
  // Adds n examples. InvalidArgument, adding nothing, when the sizes differ, a label is not
  // 0 or 1, or a score is NaN.
  absl::Status Add(absl::Span<const float> scores, absl::Span<const float> labels);
  // Adds other's examples to this one: merging per-worker accumulators equals one pass.
  void Merge(const AucAccumulator& other);
  void Reset();

  // The AUC in [0, 1]. FailedPrecondition when there is no positive or no negative example.
  absl::StatusOr<double> Result() const;

  int64_t positives() const { return static_cast<int64_t>(positive_scores_.size()); }
  int64_t negatives() const { return static_cast<int64_t>(negative_scores_.size()); }

 private:
  std::vector<float> positive_scores_;
  std::vector<float> negative_scores_;
};

// Mean binary cross-entropy. Labels may be soft (any value in [0, 1]).
class LogLossAccumulator {
 public:
  // From logits, computed stably as max(x, 0) - x * y + log1p(exp(-|x|)) (no clamp needed).
  // InvalidArgument, adding nothing, when the sizes differ, a label is outside [0, 1], or a
  // logit is NaN.
  absl::Status AddLogits(absl::Span<const float> logits, absl::Span<const float> labels);
  // From probabilities, clamped by kLogLossEpsilon. InvalidArgument, adding nothing, when the
  // sizes differ, or a label or probability is outside [0, 1] (or NaN).
  absl::Status AddProbabilities(absl::Span<const float> probabilities,
                                absl::Span<const float> labels);
  void Merge(const LogLossAccumulator& other);
  void Reset();

  // sum() / count(). FailedPrecondition when no example was added.
  absl::StatusOr<double> Result() const;
  double sum() const { return sum_; }
  int64_t count() const { return count_; }

 private:
  double sum_ = 0;
  int64_t count_ = 0;
};

// The fraction of examples classified correctly.
class AccuracyAccumulator {
 public:
  // Binary: predicts 1 when the probability is > 0.5 (Keras' binary_accuracy). InvalidArgument,
  // adding nothing, when the sizes differ, a label is not 0 or 1, or a score is NaN.
  absl::Status AddBinaryProbabilities(absl::Span<const float> probabilities,
                                      absl::Span<const float> labels);
  // Binary: predicts 1 when the logit is > 0 (the same decision as probability > 0.5).
  absl::Status AddBinaryLogits(absl::Span<const float> logits, absl::Span<const float> labels);
  // Multi-class: `scores` is [n, num_classes] (logits or probabilities: argmax is the same);
  // the prediction is the argmax, ties going to the lowest class. InvalidArgument, adding
  // nothing, when scores is not rank 2 with n rows and >= 1 column, a score is NaN, or a label
  // is not an integer in [0, num_classes).
  absl::Status AddClassScores(ConstTensorView scores, absl::Span<const float> labels);
  void Merge(const AccuracyAccumulator& other);
  void Reset();

  // correct() / count(). FailedPrecondition when no example was added.
  absl::StatusOr<double> Result() const;
  int64_t correct() const { return correct_; }
  int64_t count() const { return count_; }

 private:
  absl::Status AddBinaryDecisions(absl::Span<const float> scores, absl::Span<const float> labels,
                                  float threshold);

  int64_t correct_ = 0;
  int64_t count_ = 0;
};

// One-shot forms of the accumulators above, with the same contracts and errors.
absl::StatusOr<double> Auc(absl::Span<const float> scores, absl::Span<const float> labels);
absl::StatusOr<double> LogLossFromLogits(absl::Span<const float> logits,
                                         absl::Span<const float> labels);
absl::StatusOr<double> LogLossFromProbabilities(absl::Span<const float> probabilities,
                                                absl::Span<const float> labels);
absl::StatusOr<double> BinaryAccuracyFromProbabilities(absl::Span<const float> probabilities,
                                                       absl::Span<const float> labels);
absl::StatusOr<double> BinaryAccuracyFromLogits(absl::Span<const float> logits,
                                                absl::Span<const float> labels);
absl::StatusOr<double> MulticlassAccuracy(ConstTensorView scores, absl::Span<const float> labels);

}  // namespace tessera
