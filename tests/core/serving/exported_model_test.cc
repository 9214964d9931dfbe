#include "core/serving/exported_model.h"

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/base/mem_env.h"
#include "tessera/delimited_text.h"
#include "tessera/env.h"
#include "tessera/model.h"
#include "tessera/workloads/reference_models.h"

namespace tessera {
namespace {

bool Contains(const absl::Status& status, const std::string& part) {
  return std::string(status.message()).find(part) != std::string::npos;
}

// A tiny recsys model with its initial values and its serving signature.
ExportedModel TinyRecsys() {
  RecsysModelOptions options;
  options.num_users = 5;
  options.num_items = 4;
  options.embedding_dim = 3;
  options.hidden_units = 4;
  options.seed = 3;
  ExportedModel model;
  model.spec = *RecsysModelSpec(options);
  for (ParamSpec& p : model.spec.params) {
    // Non-zero biases so they show in the outputs.
    if (p.initializer.name == "zeros") p.initializer = {"random_normal", {}, p.initializer.seed};
    auto value = MakeInitializedBlock(p.initializer, p.shape, 0, p.shape.rows());
    REQUIRE(value.ok());
    model.variables.emplace(p.name, std::move(*value));
  }
  model.signatures = {*ServingSignature(model.spec)};
  model.step = 42;
  return model;
}

Batch UserItemBatch(Ids users, Ids items) {
  Batch batch;
  batch.size = static_cast<int64_t>(users.size());
  batch.ids["user"] = std::move(users);
  batch.ids["item"] = std::move(items);
  return batch;
}

bool SameSignature(const TensorSignature& a, const TensorSignature& b) {
  return a.name == b.name && a.dtype == b.dtype && a.shape == b.shape;
}

TEST_CASE("a model's text inputs are its hashed inputs that its training data holds as texts") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(WriteFileAtomically(*env, "/rows.csv", "1,u5,7\n0,30440,2\n", false).ok());
  auto source = DelimitedTextSource::Open(
      {"/rows.csv"}, *ParseTextFormat("label,cat:user,cat:item", ','), env.get());
  REQUIRE(source.ok());
  const Dataset files = *Dataset::FromSource(*source);
  ModelSpec spec = TinyRecsys().spec;
  spec.inputs.at(0).hash_buckets = 5;  // "user" hashed into its 5 rows; "item" ids are rows
  CHECK(TextInputs(spec, files) == std::vector<std::string>{"user"});
  spec.inputs.at(1).hash_buckets = 4;
  CHECK(TextInputs(spec, files) == std::vector<std::string>{"item", "user"});
  // Raw ids in memory: no text.
  Batch raw = UserItemBatch({1, 2}, {3, 0});
  raw.labels = Tensor(Shape{2, 1});
  CHECK(TextInputs(spec, *Dataset::Create(std::move(raw))).empty());
}

TEST_CASE("the serving signature lists the spec's inputs and outputs with a -1 batch dim") {
  SUBCASE("recsys: two id inputs, two one-wide outputs") {
    const ExportedModel model = TinyRecsys();
    auto signature = ServingSignature(model.spec);
    REQUIRE(signature.ok());
    CHECK(signature->name == "serving_default");
    REQUIRE(signature->inputs.size() == 2);
    CHECK(SameSignature(signature->inputs[0], {"user", DType::kInt64, {-1}}));
    CHECK(SameSignature(signature->inputs[1], {"item", DType::kInt64, {-1}}));
    REQUIRE(signature->outputs.size() == 2);
    CHECK(SameSignature(signature->outputs[0], {"logits", DType::kFloat32, {-1, 1}}));
    CHECK(SameSignature(signature->outputs[1], {"probability", DType::kFloat32, {-1, 1}}));
  }
  SUBCASE("mlp: one dense input, ten-wide outputs") {
    MlpModelOptions options;
    options.input_dim = 6;
    options.hidden_units = {5};
    auto signature = ServingSignature(*MlpModelSpec(options));
    REQUIRE(signature.ok());
    REQUIRE(signature->inputs.size() == 1);
    CHECK(SameSignature(signature->inputs[0], {"pixels", DType::kFloat32, {-1, 6}}));
    REQUIRE(signature->outputs.size() == 2);
    CHECK(SameSignature(signature->outputs[0], {"logits", DType::kFloat32, {-1, 10}}));
    CHECK(SameSignature(signature->outputs[1], {"probabilities", DType::kFloat32, {-1, 10}}));
  }
  SUBCASE("an invalid spec has no signature") {
    ModelSpec spec = TinyRecsys().spec;
    spec.outputs["broken"] = "no_such_node";
    auto signature = ServingSignature(spec);
    CHECK(signature.status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("an inconsistent exported model is InvalidArgument naming what is wrong") {
  struct Case {
    const char* name;
    std::function<void(ExportedModel&)> damage;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"a parameter without a variable",
       [](ExportedModel& m) { m.variables.erase("hidden/kernel"); }, "hidden/kernel"},
      {"a variable of the wrong shape",
       [](ExportedModel& m) { m.variables["logits/bias"] = Tensor(Shape{2}); }, "logits/bias"},
      {"a variable the spec does not have",
       [](ExportedModel& m) { m.variables["stray"] = Tensor(Shape{1}); }, "stray"},
      {"two signatures of one name",
       [](ExportedModel& m) { m.signatures.push_back(m.signatures[0]); }, "serving_default"},
      {"an invalid spec", [](ExportedModel& m) { m.spec.loss.logits = "nowhere"; }, "nowhere"},
      {"a negative step", [](ExportedModel& m) { m.step = -1; }, "step"},
  };
  CHECK(ValidateExportedModel(TinyRecsys()).ok());
  for (const Case& c : cases) {
    CAPTURE(c.name);
    ExportedModel model = TinyRecsys();
    c.damage(model);
    const absl::Status status = ValidateExportedModel(model);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(status, c.message));
    CHECK(Predictor::Create(model).status() == status);
  }
}

TEST_CASE("a model without signatures is still valid") {
  ExportedModel model = TinyRecsys();
  model.signatures.clear();
  CHECK(ValidateExportedModel(model).ok());
}

TEST_CASE("predict equals the model's forward pass with every variable passed whole") {
  const ExportedModel exported = TinyRecsys();
  auto predictor = Predictor::Create(exported);
  REQUIRE(predictor.ok());
  CHECK((*predictor)->model().step == 42);

  const Batch batch = UserItemBatch({0, 4, 2, 2}, {3, 0, 1, 1});
  auto outputs = (*predictor)->Predict(batch);
  REQUIRE(outputs.ok());

  auto model = Model::Create(exported.spec);
  REQUIRE(model.ok());
  StepParams params;
  for (const auto& [name, value] : exported.variables) params.full.emplace(name, value.view());
  auto forward = model->Forward(batch, params);
  REQUIRE(forward.ok());
  REQUIRE(outputs->size() == 2);
  for (const char* name : {"logits", "probability"}) {
    CAPTURE(name);
    CHECK(outputs->at(name).shape() == Shape{4, 1});
    CHECK(outputs->at(name).matrix() == forward->outputs.at(name).matrix());
  }
  // Equal ids give equal predictions, and the outputs are not all alike.
  CHECK(outputs->at("logits").row(2)[0] == outputs->at("logits").row(3)[0]);
  CHECK(outputs->at("logits").row(0)[0] != outputs->at("logits").row(1)[0]);
}

TEST_CASE("predict ignores labels, even ones a loss would reject") {
  auto predictor = Predictor::Create(TinyRecsys());
  REQUIRE(predictor.ok());
  Batch batch = UserItemBatch({1, 2}, {0, 3});
  auto plain = (*predictor)->Predict(batch);
  REQUIRE(plain.ok());
  batch.labels = *Tensor::FromVector(Shape{2, 1}, {7, -3});  // not 0/1: no loss could take them
  auto labeled = (*predictor)->Predict(batch);
  REQUIRE(labeled.ok());
  CHECK(labeled->at("probability").matrix() == plain->at("probability").matrix());
}

TEST_CASE("bad prediction batches are InvalidArgument naming the feature") {
  auto predictor = Predictor::Create(TinyRecsys());
  REQUIRE(predictor.ok());
  struct Case {
    const char* name;
    Batch batch;
    const char* message;
  };
  Batch missing;
  missing.size = 1;
  missing.ids["user"] = {0};
  Batch short_ids = UserItemBatch({0, 1}, {0});
  short_ids.size = 2;
  const std::vector<Case> cases = {
      {"an id past the table", UserItemBatch({0, 5}, {0, 0}), "user"},
      {"a negative id", UserItemBatch({0}, {-1}), "item"},
      {"a missing feature", missing, "item"},
      {"too few ids", short_ids, "item"},
      {"an empty batch", Batch{}, "size"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    auto outputs = (*predictor)->Predict(c.batch);
    CHECK(outputs.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(outputs.status(), c.message));
  }
}

TEST_CASE("one predictor serves concurrent predictions from several threads") {
  auto predictor = Predictor::Create(TinyRecsys());
  REQUIRE(predictor.ok());
  const Batch batch = UserItemBatch({0, 1, 2, 3, 4}, {3, 2, 1, 0, 0});
  auto want = (*predictor)->Predict(batch);
  REQUIRE(want.ok());
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        auto got = (*predictor)->Predict(batch);
        if (!got.ok() || got->at("logits").matrix() != want->at("logits").matrix()) {
          ++mismatches[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(mismatches == std::vector<int>(4, 0));
}

}  // namespace
}  // namespace tessera
