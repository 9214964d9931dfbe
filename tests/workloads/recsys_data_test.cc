#include "tessera/workloads/recsys_data.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "core/training/metrics.h"

namespace tessera {
namespace {

// Small enough to keep the tests fast, big enough for the statistics below.
RecsysConfig SmallConfig() {
  RecsysConfig c;
  c.num_users = 8000;
  c.num_items = 800;
  c.num_train = 100000;
  c.num_test = 40000;
  return c;
}

Batch All(const Dataset& d) {
  absl::StatusOr<Batch> all = d.Slice(0, d.size());
  REQUIRE(all.ok());
  return *std::move(all);
}

RecsysData Generate(const RecsysConfig& config) {
  absl::StatusOr<RecsysData> data = GenerateRecsysData(config);
  REQUIRE_MESSAGE(data.ok(), data.status().ToString());
  return *std::move(data);
}

TEST_CASE("recsys data is a pure function of the seeds") {
  RecsysConfig config = SmallConfig();
  config.num_train = 5000;
  config.num_test = 2000;
  const RecsysData a = Generate(config);
  const RecsysData b = Generate(config);
  const Batch a_train = All(a.train), b_train = All(b.train);
  CHECK(a_train.ids == b_train.ids);
  CHECK(a_train.labels.values() == b_train.labels.values());
  CHECK(a.test_logits == b.test_logits);
  CHECK(a.bayes_auc == b.bayes_auc);

  // Another train seed redraws the training examples only; the model and test split stay.
  config.train_seed += 100;
  const RecsysData other_train = Generate(config);
  CHECK(All(other_train.train).ids != a_train.ids);
  CHECK(other_train.test_logits == a.test_logits);

  // Another model seed plants other logits for the same draws of ids.
  config = SmallConfig();
  config.num_train = 5000;
  config.num_test = 2000;
  config.model_seed += 100;
  const RecsysData other_model = Generate(config);
  CHECK(All(other_model.test).ids == All(a.test).ids);
  CHECK(other_model.test_logits != a.test_logits);
}

TEST_CASE("a split read batch by batch holds exactly the examples drawn in sequence") {
  RecsysConfig config = SmallConfig();
  config.num_train = 3001;
  config.num_test = 777;
  const RecsysData data = Generate(config);
  const PlantedRecsysModel model = *PlantedRecsysModel::Create(config);
  const RecsysExamples train = DrawRecsysExamples(model, config.num_train, config.train_seed, 1);
  const RecsysExamples test = DrawRecsysExamples(model, config.num_test, config.test_seed, 2);
  const Batch all_train = All(data.train), all_test = All(data.test);
  CHECK(all_train.ids.at(kRecsysUserFeature) == train.users);
  CHECK(all_train.ids.at(kRecsysItemFeature) == train.items);
  CHECK(std::vector<float>(all_train.labels.values().begin(), all_train.labels.values().end()) ==
        train.labels);
  CHECK(all_test.ids.at(kRecsysUserFeature) == test.users);
  CHECK(test.logits == data.test_logits);
  // Scattered positions, in any order and repeated, read the same examples one by one.
  const std::vector<int64_t> positions = {3000, 0, 17, 17, 1234, 5};
  const Batch some = *data.train.Gather(positions);
  for (size_t k = 0; k < positions.size(); ++k) {
    CAPTURE(positions[k]);
    CHECK(some.ids.at(kRecsysUserFeature)[k] == train.users[positions[k]]);
    CHECK(some.ids.at(kRecsysItemFeature)[k] == train.items[positions[k]]);
    CHECK(some.labels.values()[k] == train.labels[positions[k]]);
  }
}

TEST_CASE("train and test are different draws even with equal seeds") {
  RecsysConfig config = SmallConfig();
  config.num_train = 2000;
  config.num_test = 2000;
  config.test_seed = config.train_seed;
  const RecsysData data = Generate(config);
  CHECK(All(data.train).ids != All(data.test).ids);
}

TEST_CASE("the planted model has N(0, 1) factors and N(0, 0.5^2) biases") {
  const absl::StatusOr<PlantedRecsysModel> model = PlantedRecsysModel::Create(SmallConfig());
  REQUIRE(model.ok());
  CHECK(model->user_factors().shape() == (Shape{8000, 8}));
  CHECK(model->item_factors().shape() == (Shape{800, 8}));
  CHECK(model->user_bias().shape() == (Shape{8000}));
  CHECK(model->item_bias().shape() == (Shape{800}));
  auto moments = [](const Tensor& t) {
    double sum = 0, sum2 = 0;
    for (float v : t.values()) sum += v, sum2 += double{v} * v;
    const double mean = sum / t.size();
    return std::pair<double, double>(mean, std::sqrt(sum2 / t.size() - mean * mean));
  };
  const auto [factor_mean, factor_std] = moments(model->user_factors());
  CHECK(std::abs(factor_mean) < 0.02);
  CHECK(factor_std == doctest::Approx(1.0).epsilon(0.02));
  const auto [bias_mean, bias_std] = moments(model->user_bias());
  CHECK(std::abs(bias_mean) < 0.02);
  CHECK(bias_std == doctest::Approx(0.5).epsilon(0.03));

  // logit = Pu . Qi / sqrt(k) + bu + bi, recomputed from the tensors.
  for (auto [u, i] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {7999, 799}, {123, 45}}) {
    double dot = 0;
    for (int j = 0; j < 8; ++j) {
      dot += double{model->user_factors().row(u)[j]} * model->item_factors().row(i)[j];
    }
    const double expected =
        dot / std::sqrt(8.0) + model->user_bias().values()[u] + model->item_bias().values()[i];
    CHECK(model->Logit(u, i) == doctest::Approx(expected).epsilon(1e-5));
  }
}

TEST_CASE("ids are skewed toward low (hot) ids as floor(n * x^3)") {
  const RecsysConfig config = SmallConfig();
  const RecsysData data = Generate(config);
  const Batch train = All(data.train);
  for (const auto& [feature, n] : std::vector<std::pair<std::string, int64_t>>{
           {kRecsysUserFeature, config.num_users}, {kRecsysItemFeature, config.num_items}}) {
    CAPTURE(feature);
    const Ids& ids = train.ids.at(feature);
    int64_t first = 0, last = 0, below_eighth = 0;
    for (int64_t id : ids) {
      REQUIRE(id >= 0);
      REQUIRE(id < n);
      first += id == 0;
      last += id == n - 1;
      below_eighth += id < n / 8;
    }
    const double total = static_cast<double>(ids.size());
    // P(id < n/8) = P(x^3 < 1/8) = 1/2.
    CHECK(below_eighth / total == doctest::Approx(0.5).epsilon(0.01));
    // P(id = 0) = P(x < n^(-1/3)); P(id = n - 1) = 1 - (1 - 1/n)^(1/3), about 1 / (3n).
    CHECK(first / total == doctest::Approx(std::cbrt(1.0 / n)).epsilon(0.05));
    CHECK(first > 50 * (last + 1));
  }
}

TEST_CASE("labels follow sigmoid of the planted logit, whose AUC is the Bayes bound") {
  const RecsysData data = Generate(SmallConfig());
  const Batch test = All(data.test);
  REQUIRE(data.test_logits.size() == static_cast<size_t>(test.size));
  double label_mean = 0, probability_mean = 0;
  for (int64_t e = 0; e < test.size; ++e) {
    const float label = test.labels.values()[e];
    REQUIRE((label == 0.0f || label == 1.0f));
    label_mean += label;
    probability_mean += 1 / (1 + std::exp(-double{data.test_logits[e]}));
  }
  label_mean /= test.size;
  probability_mean /= test.size;
  CHECK(std::abs(label_mean - probability_mean) < 0.01);  // standard deviation about 0.0025
  // A sharper check than the mean: labels track the logits' sign.
  double positive_when_high = 0, count_high = 0;
  for (int64_t e = 0; e < test.size; ++e) {
    if (data.test_logits[e] > 2) {
      count_high += 1;
      positive_when_high += test.labels.values()[e];
    }
  }
  REQUIRE(count_high > 100);
  CHECK(positive_when_high / count_high > 0.85);  // sigmoid(2) = 0.88 is the lower bound

  CHECK(data.bayes_auc >= 0.72);
  CHECK(data.bayes_auc <= 0.82);
  CHECK(data.bayes_auc == *Auc(data.test_logits, test.labels.values()));
}

TEST_CASE("an empty test split has an undefined (NaN) Bayes AUC") {
  RecsysConfig config = SmallConfig();
  config.num_train = 10;
  config.num_test = 0;
  const RecsysData data = Generate(config);
  CHECK(data.train.size() == 10);
  CHECK(data.test.size() == 0);
  CHECK(std::isnan(data.bayes_auc));
}

TEST_CASE("invalid recsys configs are rejected, naming the field") {
  struct Case {
    const char* field;
    void (*mutate)(RecsysConfig&);
  };
  const std::vector<Case> cases = {
      {"num_users", [](RecsysConfig& c) { c.num_users = 0; }},
      {"num_items", [](RecsysConfig& c) { c.num_items = -5; }},
      {"latent_dim", [](RecsysConfig& c) { c.latent_dim = 0; }},
      {"num_train", [](RecsysConfig& c) { c.num_train = -1; }},
      {"num_test", [](RecsysConfig& c) { c.num_test = -1; }},
      {"bias_stddev", [](RecsysConfig& c) { c.bias_stddev = -0.5; }},
      {"bias_stddev", [](RecsysConfig& c) { c.bias_stddev = NAN; }},
      {"planted model", [](RecsysConfig& c) { c.latent_dim = int64_t{1} << 40; }},
      {"planted model", [](RecsysConfig& c) { c.num_users = INT64_MAX; }},
      {"num_train", [](RecsysConfig& c) { c.num_train = int64_t{1} << 40; }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.field);
    RecsysConfig config = SmallConfig();
    c.mutate(config);
    const absl::Status status = GenerateRecsysData(config).status();
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(status.message()).find(c.field) != std::string::npos);
  }
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST_CASE("a user's history is the same wherever the user appears, and suits the user") {
  RecsysConfig config = SmallConfig();
  config.num_train = 2000;
  config.num_test = 2000;
  config.history_length = 5;
  auto data = GenerateRecsysData(config);
  REQUIRE(data.ok());
  CHECK(data->train.IdListFeatureNames() == std::vector<std::string>{kRecsysHistoryFeature});
  auto model = PlantedRecsysModel::Create(config);
  REQUIRE(model.ok());
  for (const Dataset* split : {&data->train, &data->test}) {
    const Batch batch = All(*split);
    const IdList& history = batch.id_lists.at(kRecsysHistoryFeature);
    REQUIRE(history.num_rows() == batch.size);
    CHECK(history.weights.empty());
    for (int64_t e = 0; e < batch.size; ++e) {
      const int64_t user = batch.ids.at(kRecsysUserFeature)[e];
      const std::vector<int64_t> want = model->History(user);
      const std::vector<int64_t> got(history.ids.begin() + history.row_splits[e],
                                     history.ids.begin() + history.row_splits[e + 1]);
      REQUIRE(got == want);
    }
  }
  // Distinct items in range, best suited first; most users get the whole length.
  int64_t full = 0;
  for (int64_t user = 0; user < 200; ++user) {
    const std::vector<int64_t> items = model->History(user);
    CHECK(items.size() <= 5);
    full += items.size() == 5 ? 1 : 0;
    for (size_t k = 0; k < items.size(); ++k) {
      CHECK((items[k] >= 0 && items[k] < config.num_items));
      for (size_t j = 0; j < k; ++j) CHECK(items[j] != items[k]);
      if (k > 0) CHECK(model->Affinity(user, items[k - 1]) >= model->Affinity(user, items[k]));
    }
  }
  CHECK(full > 150);
  // Without a history length there is no history feature.
  config.history_length = 0;
  auto plain = GenerateRecsysData(config);
  REQUIRE(plain.ok());
  CHECK(plain->train.IdListFeatureNames().empty());
  CHECK(All(plain->train).id_lists.empty());
  config.history_length = 65;
  CHECK(GenerateRecsysData(config).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
