// Distributed evaluation (coordinator/training/distributed_evaluation.h): forward-only closures on
// the workers of an in-process cluster, merged by the coordinator, held against a LocalTrainer
// evaluating the same variable values in one process — they must agree exactly, not approximately.
#include "coordinator/training/distributed_evaluation.h"

#include <doctest/doctest.h>

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/training/train_step_closure.h"
#include "core/training/local_trainer.h"
#include "tessera/partitioner.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

struct Setup {
  RecsysData data;
  ModelSpec spec;
  OptimizerSpec optimizer{"adagrad", {{"learning_rate", 0.2}}};
};

// Two whole evaluation batches and a partial one's worth of test examples.
Setup SmallRecsys() {
  RecsysConfig config;
  config.num_users = 300;
  config.num_items = 70;
  config.num_train = 6000;
  config.num_test = 2 * kEvalBatchSize + 808;
  RecsysModelOptions options;
  options.num_users = config.num_users;
  options.num_items = config.num_items;
  options.embedding_dim = 6;
  options.hidden_units = 7;
  return {ValueOrDie(GenerateRecsysData(config)), ValueOrDie(RecsysModelSpec(options))};
}

// Trains `steps` steps on a 2-PS, 3-worker cluster, evaluates on the workers, then evaluates the
// same trained values in a LocalTrainer; returns both.
std::pair<EvalResult, EvalResult> EvaluateBothWays(const Setup& setup, int64_t steps) {
  std::unique_ptr<Cluster> cluster = ValueOrDie(Cluster::StartInProcess({2, 3, 0}));
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
  auto model = std::make_shared<const Model>(ValueOrDie(Model::Create(setup.spec)));
  auto vars = ValueOrDie(strategy.CreateModelVariables(model, setup.optimizer));
  auto registry = std::make_shared<FunctionRegistry>();
  REQUIRE(RegisterTrainStep(*registry, vars, setup.data.train, 128, /*seed=*/5).ok());
  REQUIRE(RegisterEvalStep(*registry, vars, setup.data.test).ok());
  auto coordinator = ValueOrDie(ClusterCoordinator::Create(strategy, registry, {}));
  for (int64_t step = 0; step < steps; ++step) {
    REQUIRE(coordinator->Schedule(kTrainStep, {}, step).ok());
  }
  REQUIRE(coordinator->Join().ok());

  PendingEvaluation pending = ValueOrDie(
      PendingEvaluation::Schedule(*coordinator, *model, setup.data.test.size(), steps));
  const EvalResult distributed = ValueOrDie(pending.Result());
  CHECK(pending.step() == steps);

  LocalTrainer local = ValueOrDie(LocalTrainer::Create(setup.spec, setup.optimizer));
  for (const auto& [name, variable] : strategy.variables()) {
    REQUIRE(local.SetVariable(name, ValueOrDie(variable.Read())).ok());
  }
  return {distributed, ValueOrDie(local.Evaluate(setup.data.test))};
}

TEST_CASE("evaluating on the workers equals evaluating the same values in one process, exactly") {
  const Setup setup = SmallRecsys();
  double untrained_loss = 0;
  for (const int64_t steps : {int64_t{0}, int64_t{30}}) {
    CAPTURE(steps);
    const auto [distributed, local] = EvaluateBothWays(setup, steps);
    CHECK(distributed.examples == setup.data.test.size());
    CHECK(local.examples == setup.data.test.size());
    CHECK(distributed.loss == local.loss);  // the same doubles summed in the same order
    REQUIRE(distributed.auc.has_value());
    REQUIRE(local.auc.has_value());
    CHECK(*distributed.auc == *local.auc);
    REQUIRE(distributed.accuracy.has_value());
    CHECK(*distributed.accuracy == *local.accuracy);
    if (steps == 0) untrained_loss = distributed.loss;
    if (steps > 0) CHECK(distributed.loss < untrained_loss);  // it evaluated the trained values
  }
}

TEST_CASE("an evaluation step outside the test set, or of an empty test set, is refused") {
  const Setup setup = SmallRecsys();
  std::unique_ptr<Cluster> cluster = ValueOrDie(Cluster::StartInProcess({1, 1, 0}));
  ParameterServerStrategy strategy(*cluster);
  auto model = std::make_shared<const Model>(ValueOrDie(Model::Create(setup.spec)));
  auto vars = ValueOrDie(strategy.CreateModelVariables(model, setup.optimizer));
  auto registry = std::make_shared<FunctionRegistry>();
  REQUIRE(RegisterEvalStep(*registry, vars, setup.data.test).ok());
  CHECK(absl::IsAlreadyExists(RegisterEvalStep(*registry, vars, setup.data.test)));
  auto coordinator = ValueOrDie(ClusterCoordinator::Create(strategy, registry, {}));
  const int64_t batches = BatchesPerPass(setup.data.test.size(), kEvalBatchSize);
  ClosureValues args;
  args.Set(kEvalStepBatch, batches);  // batches 0 .. batches - 1 exist
  const absl::Status beyond = ValueOrDie(coordinator->Schedule(kEvalStep, args)).Fetch().status();
  CHECK(absl::IsInvalidArgument(beyond));
  CHECK(beyond.message().find(absl::StrCat("outside the test set's ", batches, " batches")) !=
        absl::string_view::npos);
  CHECK(absl::IsInvalidArgument(
      PendingEvaluation::Schedule(*coordinator, *model, /*test_examples=*/0, 0).status()));
}

TEST_CASE("DescribeEvaluation names the figures the model has") {
  EvalResult eval;
  eval.examples = 10;
  eval.loss = 0.5;
  CHECK(DescribeEvaluation(eval) == "loss 0.5000 (10 examples)");
  eval.auc = 0.75;
  eval.accuracy = 0.625;
  CHECK(DescribeEvaluation(eval) == "loss 0.5000, AUC 0.7500, accuracy 0.6250 (10 examples)");
}

}  // namespace
}  // namespace tessera
