#include "core/training/evaluation.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {

EvalAccumulator::EvalAccumulator(const Model& model)
    : loss_kind_(model.graph().loss) {
  const ResolvedGraph& graph = model.graph();
  for (const auto& [name, value] : graph.output_values) {
    if (value == graph.loss_value) logits_output_ = name;
  }
}

const Tensor* EvalAccumulator::Logits(const std::map<std::string, Tensor>& outputs) const {
  if (logits_output_.empty()) return nullptr;
  auto it = outputs.find(logits_output_);
  return it == outputs.end() ? nullptr : &it->second;
}

absl::Status EvalAccumulator::Add(float mean_loss, int64_t examples, const Tensor* logits,
                                  const Tensor& labels) {
  if (examples < 1) {
    return absl::InvalidArgumentError(absl::StrCat("evaluate: a batch of ", examples,
                                                   " examples"));
  }
  if (labels.size() != examples) {
    return absl::InvalidArgumentError(absl::StrCat("evaluate: ", labels.size(),
                                                   " labels for ", examples, " examples"));
  }
  if (!logits_output_.empty()) {
    if (logits == nullptr || logits->shape().rank() != 2 || logits->rows() != examples) {
      return absl::InvalidArgumentError(absl::StrCat(
          "evaluate: output '", logits_output_, "' must be [", examples, ", width], not ",
          logits == nullptr ? std::string("missing") : logits->shape().ToString()));
    }
    if (loss_kind_ == LossKind::kMeanSquaredError) {
      if (logits->row_size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "evaluate: a regression's output '", logits_output_, "' must be [", examples,
            ", 1], not ", logits->shape().ToString()));
      }
      double squared = 0, absolute = 0;
      for (int64_t b = 0; b < examples; ++b) {
        const double error = static_cast<double>(logits->data()[b]) - labels.data()[b];
        if (!std::isfinite(error)) {
          return absl::InvalidArgumentError(
              absl::StrCat("evaluate: example ", b, " has a non-finite prediction or label"));
        }
        squared += error * error;
        absolute += std::abs(error);
      }
      squared_error_sum_ += squared;
      absolute_error_sum_ += absolute;
    } else if (loss_kind_ == LossKind::kSigmoidCrossEntropy) {
      // Both accumulators check the same things (sizes, 0/1 labels, NaN scores), so when the
      // first accepts the batch the second does too, and a rejected batch adds nothing.
      TESSERA_RETURN_IF_ERROR(auc_.Add(logits->values(), labels.values()));
      TESSERA_RETURN_IF_ERROR(accuracy_.AddBinaryLogits(logits->values(), labels.values()));
    } else {
      TESSERA_RETURN_IF_ERROR(accuracy_.AddClassScores(logits->view(), labels.values()));
    }
  }
  loss_sum_ += static_cast<double>(mean_loss) * static_cast<double>(examples);
  examples_ += examples;
  return absl::OkStatus();
}

absl::StatusOr<EvalResult> EvalAccumulator::Result() const {
  if (examples_ == 0) return absl::InvalidArgumentError("evaluate: the dataset is empty");
  EvalResult eval;
  eval.examples = examples_;
  eval.loss = loss_sum_ / static_cast<double>(examples_);
  if (!logits_output_.empty()) {
    const double n = static_cast<double>(examples_);
    if (loss_kind_ == LossKind::kMeanSquaredError) {
      eval.rmse = std::sqrt(squared_error_sum_ / n);
      eval.mae = absolute_error_sum_ / n;
      return eval;
    }
    if (loss_kind_ == LossKind::kSigmoidCrossEntropy) {
      if (absl::StatusOr<double> auc = auc_.Result(); auc.ok()) eval.auc = *auc;
    }
    TESSERA_ASSIGN_OR_RETURN(eval.accuracy, accuracy_.Result());
  }
  return eval;
}

}  // namespace tessera
