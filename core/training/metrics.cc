#include "core/training/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {
namespace {

absl::Status CheckSameSize(size_t scores, size_t labels, absl::string_view what) {
  if (scores == labels) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, ": ", scores, " scores but ", labels, " labels"));
}

// InvalidArgument naming the first label that is not exactly 0 or 1.
absl::Status CheckBinaryLabels(absl::Span<const float> labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] != 0.0f && labels[i] != 1.0f) {
      return absl::InvalidArgumentError(
          absl::StrCat("label ", labels[i], " at example ", i, " is not 0 or 1"));
    }
  }
  return absl::OkStatus();
}

// InvalidArgument naming the first value outside [0, 1] (NaN included).
absl::Status CheckUnitInterval(absl::Span<const float> values, absl::string_view what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!(values[i] >= 0.0f && values[i] <= 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", values[i], " at example ", i, " is outside [0, 1]"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckNoNan(absl::Span<const float> values, absl::string_view what) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isnan(values[i])) {
      return absl::InvalidArgumentError(absl::StrCat(what, " at example ", i, " is NaN"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<double> Ratio(double numerator, int64_t count, absl::string_view metric) {
  if (count == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(metric, " is undefined: no example was added"));
  }
  return numerator / static_cast<double>(count);
}

}  // namespace

absl::Status AucAccumulator::Add(absl::Span<const float> scores, absl::Span<const float> labels) {
  TESSERA_RETURN_IF_ERROR(CheckSameSize(scores.size(), labels.size(), "AUC"));
  TESSERA_RETURN_IF_ERROR(CheckBinaryLabels(labels));
  TESSERA_RETURN_IF_ERROR(CheckNoNan(scores, "AUC score"));
  for (size_t i = 0; i < scores.size(); ++i) {
    (labels[i] == 1.0f ? positive_scores_ : negative_scores_).push_back(scores[i]);
  }
  return absl::OkStatus();
}

void AucAccumulator::Merge(const AucAccumulator& other) {
  positive_scores_.insert(positive_scores_.end(), other.positive_scores_.begin(),
                          other.positive_scores_.end());
  negative_scores_.insert(negative_scores_.end(), other.negative_scores_.begin(),
                          other.negative_scores_.end());
}

void AucAccumulator::Reset() {
  positive_scores_.clear();
  negative_scores_.clear();
}

absl::StatusOr<double> AucAccumulator::Result() const {
  if (positive_scores_.empty() || negative_scores_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("AUC is undefined without both classes: ", positives(), " positive and ",
                     negatives(), " negative examples"));
  }
  std::vector<float> pos = positive_scores_;
  std::vector<float> neg = negative_scores_;
  std::sort(pos.begin(), pos.end());
  std::sort(neg.begin(), neg.end());
  // Walk the distinct scores in increasing order: the p positives scoring v beat every negative
  // below v and tie with the q negatives at v. All terms are integers or halves, so the sum is
  // exact while it stays below 2^53.
  double wins = 0;
  double negatives_below = 0;
  size_t i = 0, j = 0;
  while (i < pos.size()) {
    const float v = j < neg.size() ? std::min(pos[i], neg[j]) : pos[i];
    size_t p = 0, q = 0;
    while (i < pos.size() && pos[i] == v) ++i, ++p;
    while (j < neg.size() && neg[j] == v) ++j, ++q;
    wins += static_cast<double>(p) * negatives_below + 0.5 * static_cast<double>(p) * q;
    negatives_below += static_cast<double>(q);
  }
  return wins / (static_cast<double>(pos.size()) * static_cast<double>(neg.size()));
}

absl::Status LogLossAccumulator::AddLogits(absl::Span<const float> logits,
                                           absl::Span<const float> labels) {
  TESSERA_RETURN_IF_ERROR(CheckSameSize(logits.size(), labels.size(), "log-loss"));
  TESSERA_RETURN_IF_ERROR(CheckUnitInterval(labels, "label"));
  TESSERA_RETURN_IF_ERROR(CheckNoNan(logits, "logit"));
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double x = logits[i];
    const double y = labels[i];
    sum += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)));
  }
  sum_ += sum;
  count_ += static_cast<int64_t>(logits.size());
  return absl::OkStatus();
}

absl::Status LogLossAccumulator::AddProbabilities(absl::Span<const float> probabilities,
                                                  absl::Span<const float> labels) {
  TESSERA_RETURN_IF_ERROR(CheckSameSize(probabilities.size(), labels.size(), "log-loss"));
  TESSERA_RETURN_IF_ERROR(CheckUnitInterval(labels, "label"));
  TESSERA_RETURN_IF_ERROR(CheckUnitInterval(probabilities, "probability"));
  double sum = 0;
  for (size_t i = 0; i < probabilities.size(); ++i) {
    const double p = std::clamp<double>(probabilities[i], kLogLossEpsilon, 1 - kLogLossEpsilon);
    const double y = labels[i];
    sum -= y * std::log(p) + (1 - y) * std::log1p(-p);
  }
  sum_ += sum;
  count_ += static_cast<int64_t>(probabilities.size());
  return absl::OkStatus();
}

void LogLossAccumulator::Merge(const LogLossAccumulator& other) {
  sum_ += other.sum_;
  count_ += other.count_;
}

void LogLossAccumulator::Reset() { *this = LogLossAccumulator(); }

absl::StatusOr<double> LogLossAccumulator::Result() const {
  return Ratio(sum_, count_, "log-loss");
}

absl::Status AccuracyAccumulator::AddBinaryDecisions(absl::Span<const float> scores,
                                                     absl::Span<const float> labels,
                                                     float threshold) {
  TESSERA_RETURN_IF_ERROR(CheckSameSize(scores.size(), labels.size(), "binary accuracy"));
  TESSERA_RETURN_IF_ERROR(CheckBinaryLabels(labels));
  TESSERA_RETURN_IF_ERROR(CheckNoNan(scores, "accuracy score"));
  int64_t correct = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    correct += (scores[i] > threshold) == (labels[i] == 1.0f);
  }
  correct_ += correct;
  count_ += static_cast<int64_t>(scores.size());
  return absl::OkStatus();
}

absl::Status AccuracyAccumulator::AddBinaryProbabilities(absl::Span<const float> probabilities,
                                                         absl::Span<const float> labels) {
  return AddBinaryDecisions(probabilities, labels, 0.5f);
}

absl::Status AccuracyAccumulator::AddBinaryLogits(absl::Span<const float> logits,
                                                  absl::Span<const float> labels) {
  return AddBinaryDecisions(logits, labels, 0.0f);
}

absl::Status AccuracyAccumulator::AddClassScores(ConstTensorView scores,
                                                 absl::Span<const float> labels) {
  const int64_t n = static_cast<int64_t>(labels.size());
  if (scores.shape().rank() != 2 || scores.rows() != n || scores.row_size() < 1) {
    return absl::InvalidArgumentError(absl::StrCat("accuracy: class scores have shape ",
                                                   scores.shape().ToString(), ", expected [", n,
                                                   ", num_classes >= 1] for ", n, " labels"));
  }
  const int64_t num_classes = scores.row_size();
  for (int64_t k = 0; k < scores.size(); ++k) {
    if (std::isnan(scores.data()[k])) {
      return absl::InvalidArgumentError(absl::StrCat("accuracy: the score of class ",
                                                     k % num_classes, " at example ",
                                                     k / num_classes, " is NaN"));
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    const float label = labels[i];
    if (!(label >= 0 && label < static_cast<float>(num_classes)) || label != std::floor(label)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "label ", label, " at example ", i, " is not a class index in [0, ", num_classes, ")"));
    }
  }
  int64_t correct = 0;
  for (int64_t i = 0; i < n; ++i) {
    const absl::Span<const float> row = scores.row(i);
    int64_t best = 0;
    for (int64_t c = 1; c < num_classes; ++c) {
      if (row[c] > row[best]) best = c;
    }
    correct += best == static_cast<int64_t>(labels[i]);
  }
  correct_ += correct;
  count_ += n;
  return absl::OkStatus();
}

void AccuracyAccumulator::Merge(const AccuracyAccumulator& other) {
  correct_ += other.correct_;
  count_ += other.count_;
}

void AccuracyAccumulator::Reset() { *this = AccuracyAccumulator(); }

absl::StatusOr<double> AccuracyAccumulator::Result() const {
  return Ratio(static_cast<double>(correct_), count_, "accuracy");
}

absl::StatusOr<double> Auc(absl::Span<const float> scores, absl::Span<const float> labels) {
  AucAccumulator auc;
  TESSERA_RETURN_IF_ERROR(auc.Add(scores, labels));
  return auc.Result();
}

absl::StatusOr<double> LogLossFromLogits(absl::Span<const float> logits,
                                         absl::Span<const float> labels) {
  LogLossAccumulator loss;
  TESSERA_RETURN_IF_ERROR(loss.AddLogits(logits, labels));
  return loss.Result();
}

absl::StatusOr<double> LogLossFromProbabilities(absl::Span<const float> probabilities,
                                                absl::Span<const float> labels) {
  LogLossAccumulator loss;
  TESSERA_RETURN_IF_ERROR(loss.AddProbabilities(probabilities, labels));
  return loss.Result();
}

absl::StatusOr<double> BinaryAccuracyFromProbabilities(absl::Span<const float> probabilities,
                                                       absl::Span<const float> labels) {
  AccuracyAccumulator accuracy;
  TESSERA_RETURN_IF_ERROR(accuracy.AddBinaryProbabilities(probabilities, labels));
  return accuracy.Result();
}

absl::StatusOr<double> BinaryAccuracyFromLogits(absl::Span<const float> logits,
                                                absl::Span<const float> labels) {
  AccuracyAccumulator accuracy;
  TESSERA_RETURN_IF_ERROR(accuracy.AddBinaryLogits(logits, labels));
  return accuracy.Result();
}

absl::StatusOr<double> MulticlassAccuracy(ConstTensorView scores, absl::Span<const float> labels) {
  AccuracyAccumulator accuracy;
  TESSERA_RETURN_IF_ERROR(accuracy.AddClassScores(scores, labels));
  return accuracy.Result();
}

}  // namespace tessera
