// ModelBuilder's specs, and the models it writes run end to end: embedding bags with their
// combiners and per-id weights, hashed inputs, a two-tower dot product, a DLRM, a cross network,
// a program's own op and the mean-squared-error loss — each checked by finite differences.
#include "tessera/model.h"

#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/hash.h"
#include "core/base/random.h"
#include "core/model/model.h"
#include "core/training/evaluation.h"
#include "core/training/local_trainer.h"
#include "tessera/ops.h"
#include "tests/core/model_test_util.h"

namespace tessera {
namespace {

using testing::Variables;

bool Contains(const absl::Status& status, const std::string& part) {
  return std::string(status.message()).find(part) != std::string::npos;
}

// Initial values large enough for finite differences to be meaningful: U(-1, 1) everywhere.
Variables InitVariables(const ModelSpec& spec) {
  Variables vars;
  for (const ParamSpec& p : spec.params) {
    InitializerSpec init{"random_uniform", {{"minval", -1}, {"maxval", 1}}, p.initializer.seed};
    auto value = MakeInitializedBlock(init, p.shape, 0, p.shape.rows());
    REQUIRE(value.ok());
    vars.emplace(p.name, std::move(*value));
  }
  return vars;
}

using testing::FullParams;

Tensor Column(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return *Tensor::FromVector(Shape{n, 1}, std::move(values));
}

IdList MakeIdList(std::vector<std::vector<int64_t>> rows, std::vector<float> weights = {}) {
  IdList list;
  for (const std::vector<int64_t>& row : rows) {
    list.ids.insert(list.ids.end(), row.begin(), row.end());
    list.row_splits.push_back(static_cast<int64_t>(list.ids.size()));
  }
  list.weights = std::move(weights);
  return list;
}

// Central differences of the mean loss against the analytic gradient of every parameter
// (sparse gradients scattered into the whole table; untouched rows must be numerically zero).
void CheckGradients(const ModelSpec& spec, const Batch& batch, Variables vars) {
  auto model = Model::Create(spec);
  REQUIRE_MESSAGE(model.ok(), model.status().ToString());
  auto result = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE_MESSAGE(result.ok(), result.status().ToString());
  for (const ParamSpec& p : spec.params) {
    INFO("parameter " << p.name);
    RowMatrix analytic = RowMatrix::Zero(p.shape.rows(), p.shape.row_size());
    auto sparse = result->sparse_gradients.find(p.name);
    if (sparse != result->sparse_gradients.end()) {
      for (size_t k = 0; k < sparse->second.indices.size(); ++k) {
        analytic.row(sparse->second.indices[k]) = sparse->second.values.matrix().row(k);
      }
    } else {
      REQUIRE(result->dense_gradients.count(p.name) == 1);
      analytic = result->dense_gradients.at(p.name).matrix();
    }
    constexpr float kEps = 1e-2f;
    Tensor& var = vars.at(p.name);
    for (int64_t k = 0; k < var.size(); ++k) {
      const float saved = var.data()[k];
      var.data()[k] = saved + kEps;
      const double plus = *model->Forward(batch, FullParams(vars))->loss;
      var.data()[k] = saved - kEps;
      const double minus = *model->Forward(batch, FullParams(vars))->loss;
      var.data()[k] = saved;
      const double numeric = (plus - minus) / (2.0 * kEps);
      INFO("element " << k);
      CHECK(analytic.data()[k] == doctest::Approx(numeric).epsilon(2e-2).scale(0.1));
    }
  }
}

TEST_CASE("the builder infers every width: a DLRM in a few lines") {
  ModelBuilder b("dlrm", 1);
  ModelBuilder::Value x = b.Log1p(b.DenseInput("dense", 13));
  x = b.Dense(b.Dense(x, 64, "relu"), 16, "relu");
  std::vector<ModelBuilder::Value> z = {x};
  for (int i = 1; i <= 26; ++i) {
    const std::string c = absl::StrCat("C", i);
    z.push_back(b.Embedding(b.IdInput(c, 1000), b.EmbeddingTable(c + "_table", 1000, 16)));
  }
  const ModelBuilder::Value interaction = b.DotInteraction(z);
  CHECK(b.Width(interaction) == 16 + 27 * 26 / 2);
  const ModelBuilder::Value logits =
      b.Dense(b.Dense(b.Dense(interaction, 128, "relu"), 64, "relu"), 1, "linear", "logits");
  b.Output("logits", logits);
  b.Output("probability", b.Sigmoid(logits, "probability"));
  b.Loss("sigmoid_cross_entropy", logits);
  const absl::StatusOr<ModelSpec> spec = b.Build();
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  CHECK(spec->inputs.size() == 27);
  CHECK(spec->inputs[1].hash_buckets == 1000);
  // 26 tables + 3 dense layers of the top, 2 of the bottom, each kernel and bias.
  CHECK(spec->params.size() == 26 + 2 * 5);
  CHECK(spec->params[0].name == "dense_1/kernel");
  CHECK(spec->params[0].shape == Shape{13, 64});
  CHECK(spec->params[2].name == "dense_2/kernel");
  CHECK(spec->params[4].name == "C1_table");
  CHECK(spec->params[4].partitioned);
  CHECK_FALSE(spec->params[0].partitioned);
  CHECK(spec->params[30].shape == Shape{16 + 351, 128});
  // Distinct seeds per parameter, all from the one model seed.
  CHECK(spec->params[0].initializer.seed == DeriveParamSeed(1, 0));
  CHECK(spec->params[1].initializer.seed == DeriveParamSeed(1, 1));
  CHECK(Model::Create(*spec).ok());
}

TEST_CASE("the builder keeps the first mistake and names its node") {
  {
    ModelBuilder b("m");
    const ModelBuilder::Value x = b.DenseInput("x", 3);
    const ModelBuilder::Value y = b.DenseInput("y", 4);
    const ModelBuilder::Value sum = b.Add({x, y}, "mix");
    CHECK(b.Width(sum) == 0);
    b.Dense(sum, 2);  // a later call on the placeholder does not replace the first error
    const absl::Status status = b.Build().status();
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(status, "node 'mix' (add)"));
  }
  {
    ModelBuilder a("a"), b("b");
    const ModelBuilder::Value x = a.DenseInput("x", 3);
    b.DenseInput("x", 3);
    b.Relu(x);
    CHECK(Contains(b.Build().status(), "another builder"));
  }
  {
    ModelBuilder b("m");
    b.Op("no_such_op", {b.DenseInput("x", 3)});
    CHECK(Contains(b.Build().status(), "unknown op"));
  }
  {
    ModelBuilder b("m");
    const ModelBuilder::Value x = b.DenseInput("x", 3);
    b.Relu(x, "r");
    const ModelBuilder::Value again = b.Relu(x, "r");
    b.Loss("sigmoid_cross_entropy", b.Dense(again, 1));
    CHECK(Contains(b.Build().status(), "'r'"));
  }
  {
    ModelBuilder b("m");
    const ModelBuilder::Value ids = b.IdInput("user", /*hash_buckets=*/100);
    b.Loss("sigmoid_cross_entropy", b.Dense(b.Embedding(ids, b.EmbeddingTable("t", 50, 4)), 1));
    // A hashed input fills exactly hash_buckets rows.
    const absl::Status status = b.Build().status();
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(status, "100"));
  }
  {
    ModelBuilder b("m");
    b.Embedding(b.IdListInput("h"), b.EmbeddingTable("t", 5, 2), "median");
    CHECK(Contains(b.Build().status(), "median"));
  }
}

// The embedding node of a one-table model as its output, over a known table.
struct BagModel {
  ModelSpec spec;
  Variables vars;
};

BagModel OneBag(const std::string& combiner) {
  ModelBuilder b("bag");
  const ModelBuilder::Value bag =
      b.Embedding(b.IdListInput("history"), b.EmbeddingTable("items", 4, 2), combiner, "bag");
  b.Output("bag", bag);
  b.Loss("sigmoid_cross_entropy", b.Dense(bag, 1));
  BagModel m{*b.Build(), {}};
  m.vars = InitVariables(m.spec);
  m.vars.at("items") = *Tensor::FromVector(Shape{4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  return m;
}

TEST_CASE("embedding bags combine their rows by sum, mean and sqrtn, with weights") {
  Batch batch;
  batch.size = 3;
  // Example 0: rows 0 and 2 weighted 1 and 3; example 1: empty; example 2: row 3 twice (w 2, 2).
  batch.id_lists["history"] = MakeIdList({{0, 2}, {}, {3, 3}}, {1, 3, 2, 2});
  struct Want {
    std::string combiner;
    std::vector<float> values;  // [3, 2]
  };
  const float s0 = std::sqrt(10.0f), s2 = std::sqrt(8.0f);
  for (const Want& want :
       std::vector<Want>{{"sum", {16, 20, 0, 0, 28, 32}},
                         {"mean", {4, 5, 0, 0, 7, 8}},
                         {"", {4, 5, 0, 0, 7, 8}},  // mean is the default
                         {"sqrtn", {16 / s0, 20 / s0, 0, 0, 28 / s2, 32 / s2}}}) {
    INFO("combiner '" << want.combiner << "'");
    const BagModel m = OneBag(want.combiner);
    auto model = Model::Create(m.spec);
    REQUIRE(model.ok());
    auto forward = model->Forward(batch, FullParams(m.vars));
    REQUIRE_MESSAGE(forward.ok(), forward.status().ToString());
    const Tensor& bag = forward->outputs.at("bag");
    for (int k = 0; k < 6; ++k) CHECK(bag.data()[k] == doctest::Approx(want.values[k]));
  }
  // Without weights every id counts once: mean of rows 0 and 2 = (3, 4).
  batch.id_lists["history"].weights.clear();
  const BagModel m = OneBag("mean");
  auto forward = Model::Create(m.spec)->Forward(batch, FullParams(m.vars));
  REQUIRE(forward.ok());
  CHECK(forward->outputs.at("bag").data()[0] == doctest::Approx(3));
  CHECK(forward->outputs.at("bag").data()[1] == doctest::Approx(4));
}

TEST_CASE("malformed id lists are refused before any arithmetic") {
  const BagModel m = OneBag("sum");
  auto model = Model::Create(m.spec);
  REQUIRE(model.ok());
  auto run = [&](IdList list, int64_t size) {
    Batch batch;
    batch.size = size;
    batch.id_lists["history"] = std::move(list);
    return model->Forward(batch, FullParams(m.vars)).status();
  };
  CHECK(run(MakeIdList({{0}, {1}}), 2).ok());
  CHECK(Contains(run(MakeIdList({{0}, {1}}), 3), "rows"));
  IdList bad_end = MakeIdList({{0}, {1}});
  bad_end.row_splits.back() = 5;
  CHECK(Contains(run(bad_end, 2), "row_splits"));
  IdList decreasing;
  decreasing.ids = {0, 1};
  decreasing.row_splits = {0, 2, 1, 2};
  CHECK(Contains(run(decreasing, 3), "decrease"));
  CHECK(Contains(run(MakeIdList({{0}, {1}}, {1}), 2), "weights"));
  CHECK(Contains(run(MakeIdList({{0}, {1}}, {1, NAN}), 2), "finite"));
  const absl::Status out_of_range = run(MakeIdList({{0}, {4}}), 2);
  CHECK(out_of_range.code() == absl::StatusCode::kInvalidArgument);
  Batch missing;
  missing.size = 1;
  CHECK(Contains(model->Forward(missing, FullParams(m.vars)).status(), "history"));
}

// A two-tower model: a user tower (a hashed user id and a weighted bag of the items in the
// user's history, sharing the item table with the candidate) and an item tower, scored by a dot
// product.
ModelSpec TwoTower(const std::string& combiner, const std::string& loss) {
  ModelBuilder b("two_tower", 3);
  const ModelBuilder::Table items = b.EmbeddingTable("items", 6, 3);
  const ModelBuilder::Value user =
      b.Embedding(b.IdInput("user", /*hash_buckets=*/5), b.EmbeddingTable("users", 5, 3));
  const ModelBuilder::Value history = b.Embedding(b.IdListInput("history"), items, combiner);
  const ModelBuilder::Value user_tower =
      b.Dense(b.Concat({user, history}), 3, "tanh", "user_tower");
  const ModelBuilder::Value item_tower =
      b.Dense(b.Embedding(b.IdInput("item"), items), 3, "tanh", "item_tower");
  const ModelBuilder::Value logits = b.Dot(user_tower, item_tower, "logits");
  b.Output("logits", logits);
  b.Loss(loss, logits);
  absl::StatusOr<ModelSpec> spec = b.Build();
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  return *spec;
}

Batch TwoTowerBatch() {
  Batch batch;
  batch.size = 3;
  batch.ids["user"] = {StringId("alice"), 123456789012345, -7};  // raw ids, hashed
  batch.ids["item"] = {1, 4, 1};
  batch.id_lists["history"] = MakeIdList({{1, 2, 2}, {}, {5, 0}}, {0.5f, 1, 2, 1.5f, 1});
  batch.labels = Column({1, 0, 1});
  return batch;
}

TEST_CASE("a two-tower model's gradients match finite differences for every combiner") {
  for (const std::string combiner : {"sum", "mean", "sqrtn"}) {
    INFO("combiner " << combiner);
    const ModelSpec spec = TwoTower(combiner, "sigmoid_cross_entropy");
    CheckGradients(spec, TwoTowerBatch(), InitVariables(spec));
  }
}

TEST_CASE("mean squared error trains a regression head, with exact gradients") {
  const ModelSpec spec = TwoTower("mean", "mean_squared_error");
  Batch batch = TwoTowerBatch();
  batch.labels = Column({2.5f, -1, 0.25f});
  CheckGradients(spec, batch, InitVariables(spec));
  // The loss is the mean of (logit - label)^2.
  const Variables vars = InitVariables(spec);
  auto forward = Model::Create(spec)->Forward(batch, FullParams(vars));
  REQUIRE(forward.ok());
  double want = 0;
  for (int b = 0; b < 3; ++b) {
    const double d = forward->outputs.at("logits").data()[b] - batch.labels.data()[b];
    want += d * d / 3;
  }
  CHECK(*forward->loss == doctest::Approx(want));
}

TEST_CASE("a regression is evaluated by RMSE and MAE, a binary model by logloss and AUC") {
  const ModelSpec spec = TwoTower("mean", "mean_squared_error");
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  Batch batch = TwoTowerBatch();
  batch.labels = Column({2.5f, -1, 0.25f});
  auto forward = model->Forward(batch, FullParams(vars));
  REQUIRE(forward.ok());
  EvalAccumulator eval(*model);
  CHECK(eval.logits_output() == "logits");
  REQUIRE(eval.Add(*forward->loss, 3, eval.Logits(forward->outputs), batch.labels).ok());
  REQUIRE(eval.Add(*forward->loss, 3, eval.Logits(forward->outputs), batch.labels).ok());
  const absl::StatusOr<EvalResult> result = eval.Result();
  REQUIRE(result.ok());
  double squared = 0, absolute = 0;
  for (int b = 0; b < 3; ++b) {
    const double d = forward->outputs.at("logits").data()[b] - batch.labels.data()[b];
    squared += d * d;
    absolute += std::abs(d);
  }
  CHECK(result->examples == 6);
  CHECK(result->loss == doctest::Approx(squared / 3));
  REQUIRE(result->rmse.has_value());
  CHECK(*result->rmse == doctest::Approx(std::sqrt(squared / 3)));
  CHECK(*result->mae == doctest::Approx(absolute / 3));
  CHECK_FALSE(result->auc.has_value());
  CHECK_FALSE(result->accuracy.has_value());

  const ModelSpec binary = TwoTower("mean", "sigmoid_cross_entropy");
  auto binary_model = Model::Create(binary);
  REQUIRE(binary_model.ok());
  const Batch clicks = TwoTowerBatch();
  auto out = binary_model->Forward(clicks, FullParams(InitVariables(binary)));
  REQUIRE(out.ok());
  EvalAccumulator binary_eval(*binary_model);
  REQUIRE(binary_eval.Add(*out->loss, 3, binary_eval.Logits(out->outputs), clicks.labels).ok());
  const absl::StatusOr<EvalResult> binary_result = binary_eval.Result();
  REQUIRE(binary_result.ok());
  CHECK(binary_result->auc.has_value());
  CHECK_FALSE(binary_result->rmse.has_value());
}

TEST_CASE("hashed and id-list lookups from gathered rows equal the whole-table result") {
  const ModelSpec spec = TwoTower("sqrtn", "sigmoid_cross_entropy");
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  const Batch batch = TwoTowerBatch();
  auto needed = model->RowsNeeded(batch);
  REQUIRE(needed.ok());
  // The shared item table needs the candidates' and the histories' rows, once each.
  CHECK(needed->at("items").ids() == Ids{0, 1, 2, 4, 5});
  const Ids& users = needed->at("users").ids();
  CHECK(users.size() <= 3);
  for (int64_t u : users) CHECK((u >= 0 && u < 5));
  CHECK(std::find(users.begin(), users.end(), HashBucket(StringId("alice"), 5)) != users.end());

  const testing::GatheredParams gathered_params = testing::Gather(vars, *needed);
  auto gathered = model->ForwardBackward(batch, gathered_params.params);
  REQUIRE(gathered.ok());
  auto full = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE(full.ok());
  testing::CheckSameStep(*gathered, *full);
}

TEST_CASE("a DLRM and a cross network built by the builder have exact gradients") {
  Batch batch;
  batch.size = 3;
  batch.dense["dense"] = *Tensor::FromVector(Shape{3, 2}, {0.5f, 3, 1.5f, 0.25f, 2, 1});
  batch.ids["c1"] = {StringId("68fd1e64"), StringId(""), StringId("68fd1e64")};
  batch.ids["c2"] = {0, 1, 2};
  batch.labels = Column({0, 1, 1});
  {
    ModelBuilder b("dlrm", 5);
    const ModelBuilder::Value x = b.Dense(b.Log1p(b.DenseInput("dense", 2)), 3, "tanh");
    const ModelBuilder::Value e1 =
        b.Embedding(b.IdInput("c1", 7), b.EmbeddingTable("c1_table", 7, 3));
    const ModelBuilder::Value e2 = b.Embedding(b.IdInput("c2"), b.EmbeddingTable("c2_table", 3, 3));
    b.Loss("sigmoid_cross_entropy", b.Dense(b.DotInteraction({x, e1, e2}), 1));
    const ModelSpec spec = *b.Build();
    CheckGradients(spec, batch, InitVariables(spec));
  }
  {
    ModelBuilder b("dcn", 6);
    const ModelBuilder::Value e =
        b.Embedding(b.IdInput("c1", 7), b.EmbeddingTable("c1_table", 7, 2));
    const ModelBuilder::Value x0 = b.Concat({b.DenseInput("dense", 2), e});
    const ModelBuilder::Value x1 = b.Cross(x0, x0);
    const ModelBuilder::Value x2 = b.Cross(x0, x1);
    b.Loss("sigmoid_cross_entropy", b.Dense(b.Multiply({x2, b.Tanh(x1)}), 1));
    const ModelSpec spec = *b.Build();
    CheckGradients(spec, batch, InitVariables(spec));
  }
}

TEST_CASE("a program's own op joins a built model and trains") {
  REQUIRE(RegisterOp(testing::ScaleOp("builder_test_scale")).ok());

  ModelBuilder b("custom", 2);
  const ModelBuilder::Value e =
      b.Embedding(b.IdListInput("tags"), b.EmbeddingTable("tags_table", 4, 3), "sum");
  const ModelBuilder::Value scaled = b.Op("builder_test_scale", {e}, {}, {}, "scaled");
  CHECK(b.Width(scaled) == 3);
  const ModelBuilder::Value logits = b.Dense(scaled, 1, "linear", "logits");
  b.Loss("sigmoid_cross_entropy", logits);
  b.Output("logits", logits);
  const absl::StatusOr<ModelSpec> spec = b.Build();
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  CHECK(spec->params[1].name == "scaled/scale");
  CHECK(spec->params[1].shape == Shape{3});

  Batch batch;
  batch.size = 2;
  batch.id_lists["tags"] = MakeIdList({{0, 1}, {2, 3, 3}});
  batch.labels = Column({1, 0});
  CheckGradients(*spec, batch, InitVariables(*spec));

  // Training on the batch drives its loss down.
  auto trainer = LocalTrainer::Create(*spec, {"adagrad", {{"learning_rate", 0.3}}});
  REQUIRE(trainer.ok());
  const float first = *trainer->TrainStep(batch);
  float last = first;
  for (int step = 0; step < 50; ++step) last = *trainer->TrainStep(batch);
  CHECK(last < 0.5f * first);
}

TEST_CASE("a two-tower model learns planted preferences from multi-hot histories") {
  // Users like items of their history's genre: items 0-2 are genre A, 3-5 genre B. A user's
  // history holds 1-3 items of one genre; the candidate is clicked when its genre matches.
  const ModelSpec spec = TwoTower("mean", "sigmoid_cross_entropy");
  auto trainer = LocalTrainer::Create(spec, {"adagrad", {{"learning_rate", 0.1}}});
  REQUIRE(trainer.ok());
  PhiloxStream random(11, 0);
  auto draw_batch = [&](int64_t n) {
    Batch batch;
    batch.size = n;
    std::vector<std::vector<int64_t>> histories;
    std::vector<float> labels;
    for (int64_t i = 0; i < n; ++i) {
      const int genre = random.Uniform() < 0.5 ? 0 : 3;
      std::vector<int64_t> history;
      const int length = 1 + static_cast<int>(random.Uniform() * 3);
      for (int k = 0; k < length; ++k)
        history.push_back(genre + static_cast<int>(random.Uniform() * 3));
      histories.push_back(history);
      const int64_t item = static_cast<int64_t>(random.Uniform() * 6);
      batch.ids["user"].push_back(static_cast<int64_t>(random.Uniform() * 1000));
      batch.ids["item"].push_back(item);
      labels.push_back((item >= 3) == (genre == 3) ? 1 : 0);
    }
    batch.id_lists["history"] = MakeIdList(histories);
    batch.labels = Column(labels);
    return batch;
  };
  float first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    const absl::StatusOr<float> loss = trainer->TrainStep(draw_batch(64));
    REQUIRE_MESSAGE(loss.ok(), loss.status().ToString());
    if (step == 0) first = *loss;
    last = *loss;
  }
  CHECK(first > 0.6f);
  CHECK(last < 0.3f);
}

}  // namespace
}  // namespace tessera
