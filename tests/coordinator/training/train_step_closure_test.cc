// The train_step closure (coordinator/training/train_step_closure.h): its batch is its closure's
// global step, typed (Closure::step), not an argument; a train step without one is refused.
#include "coordinator/training/train_step_closure.h"

#include <doctest/doctest.h>

#include <memory>

#include "absl/strings/match.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "core/model/model.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

// A fresh small recsys model on 1 PS and 1 worker, ready to train.
struct Fresh {
  Fresh() {
    RecsysConfig config;
    config.num_users = 200;
    config.num_items = 50;
    config.num_train = 4000;
    config.num_test = 0;
    RecsysModelOptions options;
    options.num_users = config.num_users;
    options.num_items = config.num_items;
    options.embedding_dim = 4;
    options.hidden_units = 5;
    const RecsysData data = ValueOrDie(GenerateRecsysData(config));
    cluster = ValueOrDie(Cluster::StartInProcess({1, 1, 0}));
    strategy = std::make_unique<ParameterServerStrategy>(*cluster);
    auto model = std::make_shared<const Model>(
        ValueOrDie(Model::Create(ValueOrDie(RecsysModelSpec(options)))));
    auto vars =
        ValueOrDie(strategy->CreateModelVariables(model, {"adagrad", {{"learning_rate", 0.1}}}));
    auto registry = std::make_shared<FunctionRegistry>();
    REQUIRE(RegisterTrainStep(*registry, vars, data.train, 64, /*seed=*/3).ok());
    coordinator = ValueOrDie(ClusterCoordinator::Create(*strategy, registry, {}));
  }

  // The loss of the first step trained, on global step `step`'s batch.
  double LossOfStep(int64_t step) {
    const RemoteValue value = ValueOrDie(coordinator->Schedule(kTrainStep, {}, step));
    return ValueOrDie(TrainStepOutcome(ValueOrDie(value.Fetch()))).loss;
  }

  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ParameterServerStrategy> strategy;
  std::unique_ptr<ClusterCoordinator> coordinator;  // declared last: stopped first
};

TEST_CASE("a train step trains the batch of its closure's step") {
  const double step_7 = Fresh().LossOfStep(7);
  CHECK(Fresh().LossOfStep(7) == step_7);  // the same model, the same batch: the same loss
  CHECK(Fresh().LossOfStep(8) != step_7);  // another batch
}

TEST_CASE("a train step scheduled without a step is refused, naming what it needs") {
  Fresh fresh;
  const RemoteValue value = ValueOrDie(fresh.coordinator->Schedule(kTrainStep));
  const absl::Status refused = value.Fetch().status();
  CHECK(absl::IsInvalidArgument(refused));
  CHECK_MESSAGE(absl::StrContains(refused.message(), "global step"), refused.ToString());
}

TEST_CASE("a train step's result is typed both ends, a malformed one refused naming the value") {
  const StepOutcome back = ValueOrDie(TrainStepOutcome(TrainStepValues(StepOutcome{0.25f, 64})));
  CHECK(back.loss == 0.25f);
  CHECK(back.examples == 64);
  ClosureValues wrong = TrainStepValues(StepOutcome{0.25f, 64});
  wrong.Set("examples", 64.0);  // a double where an int64 belongs
  const absl::Status refused = TrainStepOutcome(wrong).status();
  CHECK(absl::IsInvalidArgument(refused));
  CHECK_MESSAGE(absl::StrContains(refused.message(), "examples"), refused.ToString());
  CHECK(absl::IsInvalidArgument(TrainStepOutcome(ClosureValues()).status()));
}

}  // namespace
}  // namespace tessera
