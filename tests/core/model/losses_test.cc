#include "tessera/ops.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/base/random.h"

namespace tessera {
namespace {

RowMatrix Matrix(int64_t rows, int64_t cols, std::vector<float> values) {
  RowMatrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = values[i];
  return m;
}

// Central differences of the mean loss with respect to every logit (see Note [Finite-difference
// checks] in layers_test.cc for the choice of eps).
RowMatrix NumericGradient(LossKind kind, RowMatrix logits, const RowMatrix& labels) {
  constexpr float kEps = 1e-2f;
  RowMatrix grad(logits.rows(), logits.cols());
  for (int64_t i = 0; i < logits.size(); ++i) {
    const float saved = logits.data()[i];
    logits.data()[i] = saved + kEps;
    const double plus = *ComputeLoss(kind, logits, labels, nullptr);
    logits.data()[i] = saved - kEps;
    const double minus = *ComputeLoss(kind, logits, labels, nullptr);
    logits.data()[i] = saved;
    grad.data()[i] = static_cast<float>((plus - minus) / (2.0 * kEps));
  }
  return grad;
}

void CheckClose(const RowMatrix& analytic, const RowMatrix& numeric) {
  REQUIRE(analytic.rows() == numeric.rows());
  REQUIRE(analytic.cols() == numeric.cols());
  for (int64_t i = 0; i < analytic.size(); ++i) {
    INFO("element " << i);
    CHECK(analytic.data()[i] == doctest::Approx(numeric.data()[i]).epsilon(1e-2).scale(0.1));
  }
}

TEST_CASE("loss names parse and round-trip") {
  CHECK(*ParseLoss("sigmoid_cross_entropy") == LossKind::kSigmoidCrossEntropy);
  CHECK(*ParseLoss("softmax_cross_entropy") == LossKind::kSoftmaxCrossEntropy);
  CHECK(LossName(LossKind::kSoftmaxCrossEntropy) == "softmax_cross_entropy");
  CHECK(ParseLoss("mse").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("sigmoid cross-entropy is the mean binary log-loss and its gradient matches") {
  const RowMatrix logits = Matrix(4, 1, {-2.0f, 0.3f, 1.5f, -0.7f});
  const RowMatrix labels = Matrix(4, 1, {0.0f, 1.0f, 1.0f, 0.25f});
  RowMatrix grad(4, 1);
  MatrixRef grad_ref(grad);
  auto loss = SigmoidCrossEntropyWithLogits(logits, labels, &grad_ref);
  REQUIRE(loss.ok());
  double expected = 0;
  for (int i = 0; i < 4; ++i) {
    const double p = 1.0 / (1.0 + std::exp(-static_cast<double>(logits(i, 0))));
    const double y = labels(i, 0);
    expected += -(y * std::log(p) + (1 - y) * std::log(1 - p));
  }
  CHECK(*loss == doctest::Approx(expected / 4).epsilon(1e-6));
  CheckClose(grad, NumericGradient(LossKind::kSigmoidCrossEntropy, logits, labels));
}

TEST_CASE("softmax cross-entropy is the mean negative log-likelihood and its gradient matches") {
  PhiloxStream rng(5);
  RowMatrix logits(3, 4);
  for (int64_t i = 0; i < logits.size(); ++i) logits.data()[i] = 2 * rng.Normal();
  const RowMatrix labels = Matrix(3, 1, {2.0f, 0.0f, 3.0f});
  RowMatrix grad(3, 4);
  MatrixRef grad_ref(grad);
  auto loss = SoftmaxCrossEntropyWithLogits(logits, labels, &grad_ref);
  REQUIRE(loss.ok());
  double expected = 0;
  for (int r = 0; r < 3; ++r) {
    double total = 0;
    for (int c = 0; c < 4; ++c) total += std::exp(static_cast<double>(logits(r, c)));
    expected -=
        std::log(std::exp(static_cast<double>(logits(r, static_cast<int>(labels(r, 0))))) / total);
  }
  CHECK(*loss == doctest::Approx(expected / 3).epsilon(1e-6));
  CheckClose(grad, NumericGradient(LossKind::kSoftmaxCrossEntropy, logits, labels));
  // Each row of the gradient sums to zero: softmax minus a one-hot, both summing to 1.
  for (int r = 0; r < 3; ++r) CHECK(std::abs(grad.row(r).sum()) < 1e-6f);
}

TEST_CASE("both losses are finite and exact at logits of magnitude 1e4") {
  // Sigmoid: a confident right answer costs 0, a confident wrong one costs |logit|.
  const RowMatrix logits = Matrix(4, 1, {1e4f, 1e4f, -1e4f, -1e4f});
  const RowMatrix labels = Matrix(4, 1, {1.0f, 0.0f, 0.0f, 1.0f});
  RowMatrix grad(4, 1);
  MatrixRef grad_ref(grad);
  auto loss = SigmoidCrossEntropyWithLogits(logits, labels, &grad_ref);
  REQUIRE(loss.ok());
  CHECK(*loss == doctest::Approx((0 + 1e4 + 0 + 1e4) / 4.0));
  CHECK(grad.allFinite());
  CHECK(grad(0, 0) == 0.0f);
  CHECK(grad(1, 0) == doctest::Approx(0.25));
  CHECK(grad(3, 0) == doctest::Approx(-0.25));

  const RowMatrix class_logits = Matrix(2, 3, {1e4f, -1e4f, 0.0f, -1e4f, 1e4f, 1e4f});
  const RowMatrix classes = Matrix(2, 1, {1.0f, 2.0f});
  RowMatrix class_grad(2, 3);
  MatrixRef class_grad_ref(class_grad);
  auto softmax = SoftmaxCrossEntropyWithLogits(class_logits, classes, &class_grad_ref);
  REQUIRE(softmax.ok());
  // Row 0: logsumexp = 1e4, the label's logit -1e4: loss 2e4. Row 1: two tied maxima: log 2.
  CHECK(*softmax == doctest::Approx((2e4 + std::log(2.0)) / 2));
  CHECK(class_grad.allFinite());
  CHECK(class_grad(0, 0) == doctest::Approx(0.5));
  CHECK(class_grad(0, 1) == doctest::Approx(-0.5));
  CHECK(class_grad(1, 2) == doctest::Approx(-0.25));
}

struct BadLabelCase {
  const char* name;
  LossKind kind;
  RowMatrix logits;
  RowMatrix labels;
  const char* message_part;
};

TEST_CASE("invalid labels and shapes are InvalidArgument naming what is wrong") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<BadLabelCase> cases = {
      {"class index too large", LossKind::kSoftmaxCrossEntropy, RowMatrix::Zero(2, 3),
       Matrix(2, 1, {0.0f, 3.0f}), "label 3 of example 1"},
      {"negative class index", LossKind::kSoftmaxCrossEntropy, RowMatrix::Zero(1, 3),
       Matrix(1, 1, {-1.0f}), "label -1 of example 0"},
      {"fractional class index", LossKind::kSoftmaxCrossEntropy, RowMatrix::Zero(1, 3),
       Matrix(1, 1, {1.5f}), "not a class index in [0, 3)"},
      {"NaN class index", LossKind::kSoftmaxCrossEntropy, RowMatrix::Zero(1, 3),
       Matrix(1, 1, {nan}), "example 0"},
      {"softmax labels not [B, 1]", LossKind::kSoftmaxCrossEntropy, RowMatrix::Zero(2, 3),
       RowMatrix::Zero(2, 3), "labels shape [2, 3] does not match [2, 1]"},
      {"empty batch", LossKind::kSoftmaxCrossEntropy, RowMatrix::Zero(0, 3), RowMatrix::Zero(0, 1),
       "empty logits"},
      {"binary label above 1", LossKind::kSigmoidCrossEntropy, RowMatrix::Zero(2, 1),
       Matrix(2, 1, {1.0f, 1.5f}), "label 1.5 of example 1 is outside [0, 1]"},
      {"binary label NaN", LossKind::kSigmoidCrossEntropy, RowMatrix::Zero(1, 1),
       Matrix(1, 1, {nan}), "outside [0, 1]"},
      {"sigmoid shape mismatch", LossKind::kSigmoidCrossEntropy, RowMatrix::Zero(3, 1),
       RowMatrix::Zero(2, 1), "labels shape [2, 1] does not match logits shape [3, 1]"},
  };
  for (const BadLabelCase& c : cases) {
    INFO(c.name);
    RowMatrix grad(c.logits.rows(), c.logits.cols());
    MatrixRef grad_ref(grad);
    auto loss = ComputeLoss(c.kind, c.logits, c.labels, &grad_ref);
    REQUIRE_FALSE(loss.ok());
    CHECK(loss.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(loss.status().message()).find(c.message_part) != std::string::npos);
  }
}

}  // namespace
}  // namespace tessera
