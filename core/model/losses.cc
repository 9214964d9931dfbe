#include "tessera/ops.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

using RowArray = Eigen::Array<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

std::string MatrixShape(ConstMatrixRef m) {
  return absl::StrCat("[", m.rows(), ", ", m.cols(), "]");
}

}  // namespace

absl::StatusOr<LossKind> ParseLoss(absl::string_view name) {
  if (name == "sigmoid_cross_entropy") return LossKind::kSigmoidCrossEntropy;
  if (name == "softmax_cross_entropy") return LossKind::kSoftmaxCrossEntropy;
  if (name == "mean_squared_error") return LossKind::kMeanSquaredError;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown loss '", name,
                   "' (expected sigmoid_cross_entropy, softmax_cross_entropy or "
                   "mean_squared_error)"));
}

absl::string_view LossName(LossKind kind) {
  switch (kind) {
    case LossKind::kSigmoidCrossEntropy:
      return "sigmoid_cross_entropy";
    case LossKind::kSoftmaxCrossEntropy:
      return "softmax_cross_entropy";
    case LossKind::kMeanSquaredError:
      return "mean_squared_error";
  }
  return "invalid";
}

absl::StatusOr<float> SigmoidCrossEntropyWithLogits(ConstMatrixRef logits, ConstMatrixRef labels,
                                                    MatrixRef* dlogits) {
  if (logits.rows() != labels.rows() || logits.cols() != labels.cols()) {
    return absl::InvalidArgumentError(
        absl::StrCat("sigmoid_cross_entropy: labels shape ", MatrixShape(labels),
                     " does not match logits shape ", MatrixShape(logits)));
  }
  if (logits.size() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sigmoid_cross_entropy: empty logits (shape ", MatrixShape(logits), ")"));
  }
  for (Eigen::Index r = 0; r < labels.rows(); ++r) {
    for (Eigen::Index c = 0; c < labels.cols(); ++c) {
      const float y = labels(r, c);
      if (!(y >= 0.0f && y <= 1.0f)) {
        return absl::InvalidArgumentError(absl::StrCat("sigmoid_cross_entropy: label ", y,
                                                       " of example ", r, " is outside [0, 1]"));
      }
    }
  }
  const auto z = logits.array();
  const auto y = labels.array();
  // e = exp(-|z|) is in (0, 1]: neither the log1p nor the sigmoid below can overflow.
  const RowArray e = (-z.abs()).exp();
  const double sum = (z.max(0.0f) - z * y + e.log1p()).template cast<double>().sum();
  if (dlogits != nullptr) {
    const float scale = 1.0f / static_cast<float>(logits.size());
    // sigmoid(z) = 1 / (1 + e) for z >= 0 and e / (1 + e) for z < 0.
    const RowArray sigmoid = (z >= 0.0f).select(1.0f, e) / (1.0f + e);
    dlogits->array() = (sigmoid - y) * scale;
  }
  return static_cast<float>(sum / static_cast<double>(logits.size()));
}

absl::StatusOr<float> SoftmaxCrossEntropyWithLogits(ConstMatrixRef logits, ConstMatrixRef labels,
                                                    MatrixRef* dlogits) {
  const Eigen::Index batch = logits.rows();
  const Eigen::Index classes = logits.cols();
  if (labels.rows() != batch || labels.cols() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("softmax_cross_entropy: labels shape ",
                                                   MatrixShape(labels), " does not match [", batch,
                                                   ", 1] for logits shape ", MatrixShape(logits)));
  }
  if (batch == 0 || classes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("softmax_cross_entropy: empty logits (shape ", MatrixShape(logits), ")"));
  }
  for (Eigen::Index r = 0; r < batch; ++r) {
    const float y = labels(r, 0);
    if (!(y >= 0.0f && y < static_cast<float>(classes)) || y != std::floor(y)) {
      return absl::InvalidArgumentError(
          absl::StrCat("softmax_cross_entropy: label ", y, " of example ", r,
                       " is not a class index in [0, ", classes, ")"));
    }
  }
  const float scale = 1.0f / static_cast<float>(batch);
  double sum = 0;
  Eigen::RowVectorXf shifted_exp(classes);
  for (Eigen::Index r = 0; r < batch; ++r) {
    const int label = static_cast<int>(labels(r, 0));
    const float max = logits.row(r).maxCoeff();
    shifted_exp = (logits.row(r).array() - max).exp().matrix();
    const float total = shifted_exp.sum();  // >= 1: the max term is exp(0)
    sum += static_cast<double>(max) + std::log(static_cast<double>(total)) -
           static_cast<double>(logits(r, label));
    if (dlogits != nullptr) {
      dlogits->row(r) = shifted_exp * (scale / total);
      (*dlogits)(r, label) -= scale;
    }
  }
  return static_cast<float>(sum / static_cast<double>(batch));
}

absl::StatusOr<float> ComputeLoss(LossKind kind, ConstMatrixRef logits, ConstMatrixRef labels,
                                  MatrixRef* dlogits) {
  switch (kind) {
    case LossKind::kSigmoidCrossEntropy:
      return SigmoidCrossEntropyWithLogits(logits, labels, dlogits);
    case LossKind::kSoftmaxCrossEntropy:
      return SoftmaxCrossEntropyWithLogits(logits, labels, dlogits);
    case LossKind::kMeanSquaredError:
      return MeanSquaredError(logits, labels, dlogits);
  }
  return absl::InvalidArgumentError("unknown loss kind");
}

absl::StatusOr<float> MeanSquaredError(ConstMatrixRef predictions, ConstMatrixRef labels,
                                       MatrixRef* dpredictions) {
  if (predictions.rows() != labels.rows() || predictions.cols() != labels.cols() ||
      predictions.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mean_squared_error: predictions [", predictions.rows(), ", ", predictions.cols(),
        "] and labels [", labels.rows(), ", ", labels.cols(), "] must have one non-empty shape"));
  }
  double sum = 0;
  const double n = static_cast<double>(predictions.size());
  for (int64_t r = 0; r < labels.rows(); ++r) {
    for (int64_t c = 0; c < labels.cols(); ++c) {
      const float label = labels(r, c);
      if (!std::isfinite(label)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "mean_squared_error: the label of example ", r, " is not finite (", label, ")"));
      }
      const double error = static_cast<double>(predictions(r, c)) - label;
      sum += error * error;
      if (dpredictions != nullptr) (*dpredictions)(r, c) = static_cast<float>(2 * error / n);
    }
  }
  return static_cast<float>(sum / n);
}

}  // namespace tessera
