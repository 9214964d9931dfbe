// Losses on logits: sigmoid cross-entropy (binary, or independent multi-label) and softmax
// cross-entropy with sparse integer labels; and the mean squared error of a regression. Each returns the MEAN loss over the batch and, when
// asked, dLoss/dlogits (already divided by the batch size).
//
// Both are written in the log-sum-exp form, so any finite logit (|logit| = 1e4 included) gives a
// finite loss and finite gradients: no exp of a large positive number, no log of 0.
//
// Labels come from data, so they are validated: bad labels are InvalidArgument, never UB.
//
// Thread-safety: pure functions.
#pragma once

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/model/layers.h"

namespace tessera {

enum class LossKind { kSigmoidCrossEntropy, kSoftmaxCrossEntropy, kMeanSquaredError };

// "sigmoid_cross_entropy", "softmax_cross_entropy" or "mean_squared_error"; InvalidArgument
// naming the unknown name.
absl::StatusOr<LossKind> ParseLoss(absl::string_view name);
absl::string_view LossName(LossKind kind);

// Mean over all elements of max(z, 0) - z * y + log1p(exp(-|z|)) for logits z and labels y of
// one shape [B, k] (k = 1 for a binary task; TF's sigmoid_cross_entropy_with_logits). When
// `dlogits` is non-null it is set (not added) to (sigmoid(z) - y) / (B * k).
// InvalidArgument when the shapes differ or are empty, or a label is outside [0, 1] or NaN.
absl::StatusOr<float> SigmoidCrossEntropyWithLogits(ConstMatrixRef logits, ConstMatrixRef labels,
                                                    MatrixRef* dlogits);

// Mean over the batch of logsumexp(z_b) - z_b[label_b] for logits z [B, C] and labels [B, 1]
// holding class indices as floats (a Batch's labels). When `dlogits` is non-null it is set to
// (softmax(z_b) - onehot(label_b)) / B. InvalidArgument when labels is not [B, 1], B or C is 0,
// or a label is not an integer in [0, C) (the message names the example and the value).
absl::StatusOr<float> SoftmaxCrossEntropyWithLogits(ConstMatrixRef logits, ConstMatrixRef labels,
                                                    MatrixRef* dlogits);

// Mean over all elements of (p - y)^2 for predictions p and labels y of one shape [B, k]
// (regression). When `dpredictions` is non-null it is set to 2 (p - y) / (B * k).
// InvalidArgument when the shapes differ or are empty, or a label is not finite.
absl::StatusOr<float> MeanSquaredError(ConstMatrixRef predictions, ConstMatrixRef labels,
                                       MatrixRef* dpredictions);

// Dispatches to the loss `kind` names.
absl::StatusOr<float> ComputeLoss(LossKind kind, ConstMatrixRef logits, ConstMatrixRef labels,
                                  MatrixRef* dlogits);

}  // namespace tessera
