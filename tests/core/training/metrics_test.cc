#include "core/training/metrics.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/base/random.h"

namespace tessera {
namespace {

// The Mann-Whitney statistic by brute force over all pairs: an independent reference.
double PairwiseAuc(const std::vector<float>& scores, const std::vector<float>& labels) {
  double wins = 0, pairs = 0;
  for (size_t i = 0; i < scores.size(); ++i) {
    if (labels[i] != 1.0f) continue;
    for (size_t j = 0; j < scores.size(); ++j) {
      if (labels[j] != 0.0f) continue;
      pairs += 1;
      wins += scores[i] > scores[j] ? 1.0 : scores[i] == scores[j] ? 0.5 : 0.0;
    }
  }
  return wins / pairs;
}

TEST_CASE("AUC matches hand-computed values, ties counting one half") {
  struct Case {
    const char* name;
    std::vector<float> scores;
    std::vector<float> labels;
    double auc;
  };
  const std::vector<Case> cases = {
      // Positives 0.35, 0.8; negatives 0.1, 0.4: 3 of 4 pairs ordered.
      {"no ties", {0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}, 0.75},
      // Adds a positive at 0.4 tied with a negative: (1 + 0 + 2 + 1 + 0.5) / 6.
      {"one tie", {0.1f, 0.4f, 0.35f, 0.8f, 0.4f}, {0, 0, 1, 1, 1}, 4.5 / 6},
      {"all tied", {2, 2, 2, 2}, {0, 1, 0, 1}, 0.5},
      {"perfect", {-3, -1, 0.5f, 7}, {0, 0, 1, 1}, 1.0},
      {"reversed", {-3, -1, 0.5f, 7}, {1, 1, 0, 0}, 0.0},
      // Positives {1, 2, 2}, negatives {2, 2, 3}: pairs 0 + 0 + 0 + (4 ties) / 2 = 2 of 9.
      {"a block of ties", {1, 2, 2, 2, 2, 3}, {1, 1, 0, 1, 0, 0}, 2.0 / 9},
      {"negative zero equals zero", {-0.0f, 0.0f}, {1, 0}, 0.5},
      {"infinities", {-INFINITY, INFINITY, 0}, {0, 1, 1}, 1.0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    absl::StatusOr<double> auc = Auc(c.scores, c.labels);
    REQUIRE(auc.ok());
    CHECK(*auc == doctest::Approx(c.auc).epsilon(1e-12));
  }
}

TEST_CASE("AUC equals the pairwise count on random scores with many ties") {
  PhiloxStream rng(7);
  for (int levels : {2, 5, 1000}) {
    CAPTURE(levels);
    std::vector<float> scores, labels;
    for (int i = 0; i < 600; ++i) {
      const float score = static_cast<float>(rng.Below(levels));
      scores.push_back(score);
      // Labels correlated with the score, so the AUC is away from 0.5.
      labels.push_back(rng.Uniform() < 0.2 + 0.6 * score / levels ? 1.0f : 0.0f);
    }
    absl::StatusOr<double> auc = Auc(scores, labels);
    REQUIRE(auc.ok());
    CHECK(*auc == doctest::Approx(PairwiseAuc(scores, labels)).epsilon(1e-12));
    CHECK(*auc > 0.6);
  }
}

TEST_CASE("AUC of scores independent of the labels is about one half") {
  PhiloxStream rng(11);
  std::vector<float> scores, labels;
  for (int i = 0; i < 20000; ++i) {
    scores.push_back(static_cast<float>(rng.Normal()));
    labels.push_back(rng.Bernoulli(0.5) ? 1.0f : 0.0f);
  }
  absl::StatusOr<double> auc = Auc(scores, labels);
  REQUIRE(auc.ok());
  CHECK(std::abs(*auc - 0.5) < 0.02);  // the standard deviation is about 0.004
}

TEST_CASE("AUC is unchanged by a monotone transform of the scores") {
  PhiloxStream rng(3);
  std::vector<float> logits, probabilities, labels;
  for (int i = 0; i < 1000; ++i) {
    const float logit = static_cast<float>(2 * rng.Normal());
    logits.push_back(logit);
    probabilities.push_back(1.0f / (1.0f + std::exp(-logit)));
    labels.push_back(rng.Uniform() < probabilities.back() ? 1.0f : 0.0f);
  }
  CHECK(*Auc(logits, labels) == doctest::Approx(*Auc(probabilities, labels)).epsilon(1e-12));
}

TEST_CASE("merged AUC accumulators equal one pass over all examples") {
  PhiloxStream rng(5);
  std::vector<float> scores, labels;
  for (int i = 0; i < 3000; ++i) {
    scores.push_back(static_cast<float>(rng.Below(50)));
    labels.push_back(rng.Uniform() < scores.back() / 60 ? 1.0f : 0.0f);
  }
  AucAccumulator single, parts[3];
  REQUIRE(single.Add(scores, labels).ok());
  const absl::Span<const float> s(scores), l(labels);
  REQUIRE(parts[0].Add(s.subspan(0, 500), l.subspan(0, 500)).ok());
  REQUIRE(parts[1].Add(s.subspan(500, 1800), l.subspan(500, 1800)).ok());
  REQUIRE(parts[2].Add(s.subspan(2300), l.subspan(2300)).ok());
  AucAccumulator merged;
  for (const AucAccumulator& part : parts) merged.Merge(part);
  CHECK(merged.positives() == single.positives());
  CHECK(merged.negatives() == single.negatives());
  CHECK(*merged.Result() == *single.Result());
  merged.Reset();
  CHECK(merged.positives() + merged.negatives() == 0);
}

TEST_CASE("AUC without both classes is undefined") {
  CHECK(Auc({}, {}).status().code() == absl::StatusCode::kFailedPrecondition);
  const absl::Status only_positives = Auc({0.1f, 0.9f}, {1, 1}).status();
  CHECK(only_positives.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(std::string(only_positives.message()).find("2 positive and 0 negative") !=
        std::string::npos);
  CHECK(Auc({0.1f}, {0}).status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("bad metric inputs are rejected and add nothing") {
  AucAccumulator auc;
  REQUIRE(auc.Add({0.3f, 0.7f}, {0, 1}).ok());
  CHECK(auc.Add({0.1f, 0.2f}, {1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(auc.Add({0.1f, 0.2f}, {1, 0.5f}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(auc.Add({0.1f, NAN}, {1, 0}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(auc.positives() == 1);
  CHECK(auc.negatives() == 1);

  LogLossAccumulator loss;
  CHECK(loss.AddLogits({1}, {1, 0}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(loss.AddLogits({1}, {1.5f}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(loss.AddLogits({NAN}, {1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(loss.AddProbabilities({1.2f}, {1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(loss.AddProbabilities({NAN}, {1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(loss.count() == 0);
  CHECK(loss.Result().status().code() == absl::StatusCode::kFailedPrecondition);

  AccuracyAccumulator accuracy;
  CHECK(accuracy.AddBinaryLogits({1, 2}, {1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(accuracy.AddBinaryProbabilities({0.5f}, {2}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(accuracy.AddBinaryLogits({NAN}, {1}).code() == absl::StatusCode::kInvalidArgument);
  CHECK(accuracy.count() == 0);
  CHECK(accuracy.Result().status().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("log-loss from logits and from probabilities agree with the definition") {
  const std::vector<float> logits = {0.0f, 2.0f, -1.0f, 0.5f};
  const std::vector<float> labels = {1, 0, 0, 1};
  std::vector<float> probabilities;
  double expected = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    const double p = 1 / (1 + std::exp(-static_cast<double>(logits[i])));
    probabilities.push_back(static_cast<float>(p));
    expected -= labels[i] == 1 ? std::log(p) : std::log(1 - p);
  }
  expected /= logits.size();
  CHECK(*LogLossFromLogits(logits, labels) == doctest::Approx(expected).epsilon(1e-12));
  CHECK(*LogLossFromProbabilities(probabilities, labels) ==
        doctest::Approx(expected).epsilon(1e-6));
  // One example at logit 0 costs log 2 whatever its label; soft labels are allowed.
  CHECK(*LogLossFromLogits({0}, {0.25f}) == doctest::Approx(std::log(2.0)));
}

TEST_CASE("log-loss stays finite at extreme logits and probabilities") {
  CHECK(*LogLossFromLogits({100}, {0}) == doctest::Approx(100));
  CHECK(*LogLossFromLogits({-100}, {0}) < 1e-40);
  CHECK(*LogLossFromLogits({-1e30f}, {1}) == doctest::Approx(1e30));
  // A probability of exactly 0 for a positive is clamped to 1e-7.
  CHECK(*LogLossFromProbabilities({0}, {1}) == doctest::Approx(-std::log(kLogLossEpsilon)));
  CHECK(*LogLossFromProbabilities({1}, {0}) ==
        doctest::Approx(-std::log(kLogLossEpsilon)).epsilon(1e-6));
  CHECK(*LogLossFromProbabilities({1}, {1}) < 1e-6);
}

TEST_CASE("merged log-loss accumulators equal one pass") {
  LogLossAccumulator a, b, single;
  REQUIRE(a.AddLogits({0.3f, -2}, {1, 0}).ok());
  REQUIRE(b.AddProbabilities({0.9f}, {0}).ok());
  REQUIRE(single.AddLogits({0.3f, -2}, {1, 0}).ok());
  REQUIRE(single.AddProbabilities({0.9f}, {0}).ok());
  a.Merge(b);
  CHECK(a.count() == 3);
  CHECK(*a.Result() == doctest::Approx(*single.Result()).epsilon(1e-12));
  a.Reset();
  CHECK(a.count() == 0);
}

TEST_CASE("binary accuracy thresholds probabilities at 0.5 and logits at 0") {
  // 0.5 is not above the threshold, so it predicts 0.
  const std::vector<float> probabilities = {0.2f, 0.5f, 0.7f, 0.9f};
  const std::vector<float> logits = {-1.4f, 0.0f, 0.85f, 2.2f};
  const std::vector<float> labels = {0, 0, 1, 0};
  CHECK(*BinaryAccuracyFromProbabilities(probabilities, labels) == 0.75);
  CHECK(*BinaryAccuracyFromLogits(logits, labels) == 0.75);
}

TEST_CASE("multi-class accuracy takes the argmax, ties to the lowest class") {
  const Tensor scores = *Tensor::FromVector(Shape{3, 3}, {1, 3, 2,  //
                                                          5, 5, 0,  //
                                                          0, 0, 1});
  CHECK(*MulticlassAccuracy(scores, {1, 0, 0}) == doctest::Approx(2.0 / 3));
  CHECK(*MulticlassAccuracy(scores, {1, 1, 2}) == doctest::Approx(2.0 / 3));

  AccuracyAccumulator a, b;
  REQUIRE(a.AddClassScores(scores, {1, 0, 0}).ok());
  REQUIRE(b.AddBinaryLogits({1, -1}, {1, 1}).ok());
  a.Merge(b);
  CHECK(a.correct() == 3);
  CHECK(a.count() == 5);
  CHECK(*a.Result() == 0.6);
}

TEST_CASE("multi-class accuracy rejects bad labels and shapes") {
  const Tensor scores(Shape{2, 3});
  struct Case {
    const char* name;
    ConstTensorView scores;
    std::vector<float> labels;
  };
  const Tensor rank1(Shape{2});
  const Tensor no_classes(Shape{2, 0});
  Tensor with_nan(Shape{2, 3});
  with_nan.values()[4] = NAN;
  const std::vector<Case> cases = {
      {"class out of range", scores, {0, 3}},  {"negative class", scores, {-1, 0}},
      {"fractional class", scores, {0.5f, 0}}, {"NaN label", scores, {NAN, 0}},
      {"too few labels", scores, {0}},         {"rank-1 scores", rank1, {0, 0}},
      {"no classes", no_classes, {0, 0}},      {"NaN score", with_nan, {0, 0}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    AccuracyAccumulator accuracy;
    CHECK(accuracy.AddClassScores(c.scores, c.labels).code() == absl::StatusCode::kInvalidArgument);
    CHECK(accuracy.count() == 0);
  }
}

}  // namespace
}  // namespace tessera
