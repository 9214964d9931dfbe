// TrainStepAsync (actors/ps/train_step.h) against sharded variables on an in-process cluster, held
// against the local trainer running the same step on the same model.
#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "actors/ps/train_step.h"
#include "cluster/base/cluster.h"
#include "cluster/base/testing.h"
#include "coordinator/ps/internal/await.h"
#include "coordinator/ps/strategy.h"
#include "core/training/local_trainer.h"
#include "tessera/partitioner.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

constexpr int64_t kUsers = 23;
constexpr int64_t kItems = 9;

ModelSpec TinyRecsys() {
  RecsysModelOptions options;
  options.num_users = kUsers;
  options.num_items = kItems;
  options.embedding_dim = 4;
  options.hidden_units = 5;
  options.seed = 3;
  return ValueOrDie(RecsysModelSpec(options));
}

// A batch with repeated ids (so sparse gradients merge rows) over several shards of each table.
Batch TinyBatch(int64_t bad_user = -1) {
  Batch batch;
  batch.size = 6;
  batch.ids[kRecsysUserFeature] = {0, 22, 7, 7, 15, bad_user >= 0 ? bad_user : 3};
  batch.ids[kRecsysItemFeature] = {8, 0, 4, 4, 1, 8};
  batch.labels = ValueOrDie(Tensor::FromVector(Shape{6, 1}, {1, 0, 1, 1, 0, 1}));
  return batch;
}

struct Fixture {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ParameterServerStrategy> strategy;
  std::shared_ptr<const ModelVariables> vars;

  explicit Fixture(const OptimizerSpec& optimizer) {
    cluster = ValueOrDie(Cluster::StartInProcess({2, 1, 2}));
    strategy = std::make_unique<ParameterServerStrategy>(*cluster,
                                                         ValueOrDie(FixedShardsPartitioner(3)));
    auto model = std::make_shared<const Model>(ValueOrDie(Model::Create(TinyRecsys())));
    vars = ValueOrDie(strategy->CreateModelVariables(model, optimizer));
  }

  absl::StatusOr<StepOutcome> Step(Batch batch) {
    return internal::Await<StepOutcome>(
        cluster->actors().system(),
        [this, batch = std::move(batch)](caf::event_based_actor* self, Done<StepOutcome> done) {
          TrainStepAsync(self, vars, batch, nullptr, std::move(done));
        });
  }
};

TEST_CASE("train steps on sharded variables move them exactly as the local trainer's steps do") {
  const OptimizerSpec adagrad{"adagrad", {{"learning_rate", 0.3}}};
  Fixture f(adagrad);
  LocalTrainer local = ValueOrDie(LocalTrainer::Create(TinyRecsys(), adagrad));
  for (const auto& [name, variable] : f.strategy->variables()) {  // the same initial values
    CHECK_TENSOR(ValueOrDie(variable.Read()), *ValueOrDie(local.variable(name)));
  }
  for (int step = 0; step < 3; ++step) {  // adagrad's accumulators carry over between steps
    CAPTURE(step);
    const StepOutcome outcome = ValueOrDie(f.Step(TinyBatch()));
    const float local_loss = ValueOrDie(local.TrainStep(TinyBatch()));
    CHECK(outcome.loss == local_loss);
    CHECK(outcome.examples == 6);
  }
  CHECK(f.strategy->variables().at("user_embedding").num_shards() == 3);
  for (const auto& [name, variable] : f.strategy->variables()) {
    CAPTURE(name);
    CHECK_TENSOR(ValueOrDie(variable.Read()), *ValueOrDie(local.variable(name)));
  }
}

// Note [A step's gradient is split without a copy] (core/variables/indexed_slices.h).
TEST_CASE("a step's scratch writes a shared gradient's memory again only once no op holds it") {
  internal::StepScratch scratch;
  Tensor gradient(Shape{4, 2}, 1.0f);
  const float* first = gradient.data();
  std::shared_ptr<const Tensor> sent = scratch.Share("emb", gradient);
  CHECK(sent->data() == first);  // handed over, not copied
  CHECK(gradient.size() == 0);   // nothing free to write into yet

  // The next step's gradient, while an op still holds the first: new memory, the first kept.
  gradient = Tensor(Shape{3, 2}, 2.0f);
  const float* second = gradient.data();
  std::shared_ptr<const Tensor> held = sent;
  sent = scratch.Share("emb", gradient);
  CHECK(sent->data() == second);
  CHECK(gradient.size() == 0);
  CHECK(held->data() == first);
  CHECK(held->values()[0] == 1.0f);

  // Once no op holds the one sent last, its memory comes back for the step after.
  sent.reset();
  gradient = Tensor(Shape{3, 2}, 3.0f);
  std::shared_ptr<const Tensor> third = scratch.Share("emb", gradient);
  CHECK(third->values()[0] == 3.0f);
  CHECK(gradient.data() == second);
  // Each table has its own.
  Tensor other(Shape{1, 2}, 4.0f);
  CHECK(scratch.Share("other", other)->values()[0] == 4.0f);
  CHECK(held->values()[0] == 1.0f);
}

TEST_CASE("a train step with an id out of range fails before any shard changes") {
  Fixture f(OptimizerSpec{"sgd", {{"learning_rate", 0.5}}});
  std::map<std::string, Tensor> before;
  for (const auto& [name, variable] : f.strategy->variables()) {
    before[name] = ValueOrDie(variable.Read());
  }
  const absl::StatusOr<StepOutcome> outcome = f.Step(TinyBatch(/*bad_user=*/kUsers));
  CHECK(outcome.status().code() == absl::StatusCode::kInvalidArgument);
  for (const auto& [name, variable] : f.strategy->variables()) {
    CAPTURE(name);
    CHECK_TENSOR(ValueOrDie(variable.Read()), before.at(name));
  }
}

TEST_CASE("a train step against a lost PS is Unavailable naming a shard on it") {
  Fixture f(OptimizerSpec{"sgd", {{"learning_rate", 0.5}}});
  REQUIRE(testing::KillPs(*f.cluster, 1).ok());
  REQUIRE_FALSE(f.strategy->variables().at("user_embedding").Read().ok());  // down on return
  const absl::StatusOr<StepOutcome> outcome = f.Step(TinyBatch());
  CHECK(absl::IsUnavailable(outcome.status()));
  CHECK(absl::StrContains(outcome.status().message(), "on ps 1 is unavailable"));
}

}  // namespace
}  // namespace tessera
