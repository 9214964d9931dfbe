#include "core/training/local_trainer.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/base/random.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"

namespace tessera {
namespace {

OptimizerSpec PyTorchAdagrad() {
  return {"adagrad",
          {{"learning_rate", 0.1}, {"initial_accumulator_value", 0}, {"epsilon", 1e-10}}};
}

ModelSpec SmallRecsysSpec(int64_t users, int64_t items) {
  RecsysModelOptions options;
  options.num_users = users;
  options.num_items = items;
  options.embedding_dim = 8;
  options.hidden_units = 16;
  options.seed = 3;
  return *RecsysModelSpec(options);
}

TEST_CASE("local training on a small planted recsys problem lowers the loss and lifts the AUC") {
  RecsysConfig config;
  config.num_users = 60;
  config.num_items = 30;
  config.num_train = 30000;
  config.num_test = 5000;
  auto data = GenerateRecsysData(config);
  REQUIRE(data.ok());
  auto trainer = LocalTrainer::Create(SmallRecsysSpec(60, 30), PyTorchAdagrad());
  REQUIRE(trainer.ok());
  auto before = trainer->Evaluate(data->test);
  REQUIRE(before.ok());
  CHECK(before->examples == 5000);
  REQUIRE(before->auc.has_value());
  // An untrained model scores near chance.
  CHECK(*before->auc < 0.6);

  BatchOptions options;
  options.batch_size = 128;
  options.num_epochs = 2;
  auto batches = BatchIterator::Create(data->train, options);
  REQUIRE(batches.ok());
  auto progress = trainer->Train(*batches);
  REQUIRE(progress.ok());
  CHECK(progress->exhausted);
  CHECK(progress->examples == 60000);
  CHECK(progress->steps == trainer->steps());

  auto after = trainer->Evaluate(data->test);
  REQUIRE(after.ok());
  CHECK(after->loss < before->loss - 0.02);
  REQUIRE(after->auc.has_value());
  // With few, often-seen ids the model gets close to the planted model's Bayes AUC.
  INFO("bayes auc " << data->bayes_auc << ", trained auc " << *after->auc);
  CHECK(*after->auc > 0.68);
  CHECK(*after->auc > data->bayes_auc - 0.08);
  CHECK(after->accuracy.has_value());
}

// Three Gaussian blobs in 8 dimensions, one per class.
Batch BlobExamples(int64_t n, uint64_t seed) {
  PhiloxStream rng(seed);
  Batch batch;
  batch.size = n;
  Tensor pixels(Shape{n, 8});
  Tensor labels(Shape{n, 1});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t label = static_cast<int64_t>(rng.Below(3));
    labels.row(i)[0] = static_cast<float>(label);
    for (int64_t j = 0; j < 8; ++j) {
      const float center = (j % 3 == label) ? 1.5f : 0.0f;
      pixels.row(i)[j] = center + static_cast<float>(rng.Normal());
    }
  }
  batch.dense["pixels"] = std::move(pixels);
  batch.labels = std::move(labels);
  return batch;
}

TEST_CASE("local training of a small MLP separates three classes") {
  auto train = Dataset::Create(BlobExamples(3000, 1));
  auto test = Dataset::Create(BlobExamples(1000, 2));
  REQUIRE(train.ok());
  REQUIRE(test.ok());
  MlpModelOptions options;
  options.input_dim = 8;
  options.hidden_units = {16};
  options.num_classes = 3;
  auto trainer = LocalTrainer::Create(*MlpModelSpec(options), {"adam", {{"learning_rate", 0.01}}});
  REQUIRE(trainer.ok());
  auto before = trainer->Evaluate(*test);
  REQUIRE(before.ok());
  BatchOptions batch_options;
  batch_options.batch_size = 32;
  batch_options.shuffle = true;
  batch_options.seed = 5;
  batch_options.num_epochs = 3;
  auto batches = BatchIterator::Create(*train, batch_options);
  REQUIRE(batches.ok());
  REQUIRE(trainer->Train(*batches).ok());
  auto after = trainer->Evaluate(*test, 256);
  REQUIRE(after.ok());
  CHECK(after->loss < before->loss - 0.3);
  CHECK_FALSE(after->auc.has_value());
  REQUIRE(after->accuracy.has_value());
  CHECK(*after->accuracy > 0.8);  // chance is 1/3
}

TEST_CASE("a step applies exactly the model's gradients and touches only the batch's rows") {
  const double lr = 0.5;
  const ModelSpec spec = SmallRecsysSpec(10, 6);
  auto trainer = LocalTrainer::Create(spec, {"sgd", {{"learning_rate", lr}}});
  REQUIRE(trainer.ok());
  const std::map<std::string, Tensor> before = trainer->variables();
  Batch batch;
  batch.size = 3;
  batch.ids["user"] = {7, 2, 7};
  batch.ids["item"] = {0, 5, 5};
  batch.labels = *Tensor::FromVector(Shape{3, 1}, {1, 0, 1});
  StepParams params;
  for (const auto& [name, value] : before) params.full.emplace(name, value.view());
  auto grads = trainer->model().ForwardBackward(batch, params);
  REQUIRE(grads.ok());
  auto loss = trainer->TrainStep(batch);
  REQUIRE(loss.ok());
  CHECK(*loss == grads->loss);
  CHECK(trainer->steps() == 1);

  for (const auto& [name, grad] : grads->dense_gradients) {
    INFO(name);
    const RowMatrix want = before.at(name).matrix() - static_cast<float>(lr) * grad.matrix();
    CHECK((*trainer->variable(name))->matrix().isApprox(want));
  }
  const Tensor& users = **trainer->variable("user_embedding");
  const IndexedSlices& user_grad = grads->sparse_gradients.at("user_embedding");
  REQUIRE(user_grad.indices == Ids{2, 7});
  for (int64_t row = 0; row < 10; ++row) {
    INFO("user row " << row);
    RowMatrix want = before.at("user_embedding").matrix().row(row);
    for (size_t k = 0; k < user_grad.indices.size(); ++k) {
      if (user_grad.indices[k] == row) {
        want -= static_cast<float>(lr) * user_grad.values.matrix().row(k);
      }
    }
    CHECK(users.matrix().row(row).isApprox(want));
    if (row != 2 && row != 7)
      CHECK(users.matrix().row(row) == before.at("user_embedding").matrix().row(row));
  }
}

TEST_CASE("a bad batch fails the step and changes no variable") {
  auto trainer = LocalTrainer::Create(SmallRecsysSpec(10, 6), PyTorchAdagrad());
  REQUIRE(trainer.ok());
  const std::map<std::string, Tensor> before = trainer->variables();
  Batch batch;
  batch.size = 2;
  batch.ids["user"] = {1, 10};
  batch.ids["item"] = {0, 1};
  batch.labels = Tensor(Shape{2, 1});
  auto loss = trainer->TrainStep(batch);
  CHECK(loss.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(trainer->steps() == 0);
  for (const auto& [name, value] : before) {
    CHECK((*trainer->variable(name))->matrix() == value.matrix());
  }
}

TEST_CASE("variables, slots and the optimizer are exposed and checked") {
  auto bad_optimizer = LocalTrainer::Create(SmallRecsysSpec(4, 4), {"rmsprop", {}});
  CHECK(bad_optimizer.status().code() == absl::StatusCode::kInvalidArgument);
  ModelSpec bad_spec = SmallRecsysSpec(4, 4);
  bad_spec.nodes[0].op = "lookup";
  CHECK(LocalTrainer::Create(bad_spec, PyTorchAdagrad()).status().code() ==
        absl::StatusCode::kInvalidArgument);

  auto trainer = LocalTrainer::Create(SmallRecsysSpec(4, 4), PyTorchAdagrad());
  REQUIRE(trainer.ok());
  CHECK(trainer->variables().size() == 6);
  CHECK(trainer->variable("nope").status().code() == absl::StatusCode::kNotFound);
  auto slots = trainer->slots("user_embedding");
  REQUIRE(slots.ok());
  REQUIRE((*slots)->tensors.size() == 1);
  CHECK((*slots)->tensors[0].shape() == Shape{4, 8});
  CHECK(trainer->optimizer().spec().params.at("initial_accumulator_value") == 0);
  // Keras-style initial values: embeddings within 0.05, biases zero.
  CHECK((*trainer->variable("user_embedding"))->matrix().cwiseAbs().maxCoeff() <= 0.05f);
  CHECK((*trainer->variable("hidden/bias"))->matrix().isZero());

  const Tensor ones(Shape{4, 8}, 1.0f);
  REQUIRE(trainer->SetVariable("item_embedding", ones).ok());
  CHECK((*trainer->variable("item_embedding"))->matrix().isOnes());
  CHECK(trainer->SetVariable("item_embedding", Tensor(Shape{3, 8})).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(trainer->SetVariable("nope", ones).code() == absl::StatusCode::kNotFound);
  auto bad_eval = trainer->Evaluate(Dataset(), 0);
  CHECK(bad_eval.status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
