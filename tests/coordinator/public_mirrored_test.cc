// The mirrored strategy as a program outside the library sees it: these tests include the public
// tree (tessera/*.h) and nothing else of Tessera but a test helper, and drive replicas in an
// in-process cluster's worker slots: training steps, evaluation, variables, and replica
// functions whose writes follow the variable's aggregation.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tessera/cluster.h"
#include "tessera/mirrored.h"
#include "tessera/tensor.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

MirroredOptions SmallRecsys(int64_t batch_size) {
  RecsysConfig config;
  config.num_users = 50;
  config.num_items = 30;
  config.num_train = 400;
  config.num_test = 100;
  RecsysData data = ValueOrDie(GenerateRecsysData(config));
  RecsysModelOptions model;
  model.num_users = 50;
  model.num_items = 30;
  model.embedding_dim = 4;
  model.hidden_units = 8;
  model.seed = 3;
  MirroredOptions options;
  options.model = ValueOrDie(RecsysModelSpec(model));
  options.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}};
  options.train = data.train;
  options.test = data.test;
  options.batch_size = batch_size;
  return options;
}

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.size())) == 0;
}

float Scalar(const Tensor& t) {
  REQUIRE(t.size() == 1);
  return t.data()[0];
}

TEST_CASE("public API: a mirrored strategy trains on every worker slot and its copies agree") {
  std::unique_ptr<Cluster> cluster = ValueOrDie(Cluster::StartInProcess({1, 2}));
  const MirroredOptions options = SmallRecsys(16);
  std::unique_ptr<MirroredStrategy> strategy =
      ValueOrDie(MirroredStrategy::Create(*cluster, options));
  CHECK(strategy->num_replicas_in_sync() == 2);
  CHECK(strategy->global_batch_size() == 32);

  const EvalResult before = ValueOrDie(strategy->Evaluate());
  CHECK(before.examples == 100);
  std::vector<double> losses;
  for (int64_t step = 0; step < 60; ++step) {
    const MirroredStrategy::StepResult result = ValueOrDie(strategy->TrainStep(step));
    // 400 examples: 12 global batches of 32 and the pass's last of 16, then the next pass.
    CHECK(result.examples == (step % 13 == 12 ? 16 : 32));
    losses.push_back(result.loss);
  }
  // Adagrad on the planted model: the loss falls (means over ten steps, against batch noise).
  double first = 0, last = 0;
  for (size_t k = 0; k < 10; ++k) {
    first += losses[k];
    last += losses[losses.size() - 1 - k];
  }
  CHECK(last < first);
  CHECK(ValueOrDie(strategy->Evaluate()).loss < before.loss);

  // Every replica applied the same all-reduced gradients: the copies are the same bits.
  for (const ParamSpec& param : options.model.params) {
    const PerReplica<Tensor> copies = ValueOrDie(strategy->ReadPerReplica(param.name));
    REQUIRE(LocalResults(copies).size() == 2);
    CHECK_MESSAGE(SameBits(copies.values[0], copies.values[1]), param.name);
  }
}

TEST_CASE("public API: replica functions write through their context by the aggregation") {
  auto functions = std::make_shared<MirroredFunctions>();
  (*functions)["tally"] = [](MirroredReplicaContext& ctx,
                             const ClosureValues& args) -> absl::StatusOr<ClosureValues> {
    const float mine = static_cast<float>(ctx.replica_id() + 1);
    absl::Status status = ctx.AssignAdd("total", Tensor(Shape{}, mine));  // ON_WRITE, SUM
    if (!status.ok()) return status;
    status = ctx.AssignAdd("seen", Tensor(Shape{}, 1.0f));  // ON_READ: this copy only
    if (!status.ok()) return status;
    ClosureValues out;
    out.Set("rank", Tensor(Shape{1, 2}, mine));
    return out;
  };
  std::unique_ptr<Cluster> cluster = ValueOrDie(Cluster::StartInProcess({1, 2}));
  MirroredOptions options = SmallRecsys(8);
  options.functions = functions;
  std::unique_ptr<MirroredStrategy> strategy =
      ValueOrDie(MirroredStrategy::Create(*cluster, options));
  MirroredVariableSpec total{"total", Shape{}};
  total.synchronization = VariableSynchronization::kOnWrite;
  total.aggregation = VariableAggregation::kSum;
  REQUIRE(strategy->CreateVariable(total).ok());
  MirroredVariableSpec seen{"seen", Shape{}};
  seen.synchronization = VariableSynchronization::kOnRead;
  seen.aggregation = VariableAggregation::kSum;
  REQUIRE(strategy->CreateVariable(seen).ok());
  CHECK(absl::IsAlreadyExists(strategy->CreateVariable(seen)));

  const PerReplica<ClosureValues> results = ValueOrDie(strategy->Run("tally", {}));
  REQUIRE(LocalResults(results).size() == 2);
  PerReplica<Tensor> ranks;
  for (const ClosureValues& result : LocalResults(results))
    ranks.values.push_back(ValueOrDie(result.Get<Tensor>("rank")));
  const Tensor sum = ValueOrDie(MirroredStrategy::Reduce(ReduceOp::kSum, ranks));
  CHECK(sum.shape() == Shape{1, 2});
  CHECK(sum.data()[0] == 3.0f);
  CHECK(ValueOrDie(MirroredStrategy::Reduce(ReduceOp::kMean, ranks)).data()[1] == 1.5f);
  const Tensor gathered = ValueOrDie(MirroredStrategy::Gather(ranks));
  CHECK(gathered.shape() == Shape{2, 2});
  CHECK(gathered.data()[3] == 2.0f);

  // ON_WRITE SUM: both replicas hold 1 + 2. ON_READ SUM: each copy 1, read as their sum.
  for (const Tensor& copy : ValueOrDie(strategy->ReadPerReplica("total")).values)
    CHECK(Scalar(copy) == 3.0f);
  for (const Tensor& copy : ValueOrDie(strategy->ReadPerReplica("seen")).values)
    CHECK(Scalar(copy) == 1.0f);
  CHECK(Scalar(ValueOrDie(strategy->Read("seen"))) == 2.0f);

  REQUIRE(strategy->Assign("total", Tensor(Shape{}, 7.0f)).ok());
  CHECK(Scalar(ValueOrDie(strategy->Read("total"))) == 7.0f);
  CHECK(absl::IsNotFound(strategy->Run("missing", {}).status()));
  CHECK(absl::IsNotFound(strategy->Read("missing").status()));
}

TEST_CASE("public API: a mirrored strategy refuses a batch of no examples and a bad model") {
  std::unique_ptr<Cluster> cluster = ValueOrDie(Cluster::StartInProcess({1, 2}));
  CHECK(absl::IsInvalidArgument(MirroredStrategy::Create(*cluster, SmallRecsys(0)).status()));
  MirroredOptions unknown_rule = SmallRecsys(8);
  unknown_rule.optimizer = OptimizerSpec{"no_such_rule", {}};
  CHECK(absl::IsInvalidArgument(MirroredStrategy::Create(*cluster, unknown_rule).status()));
  MirroredOptions no_model = SmallRecsys(8);
  no_model.model = ModelSpec{};
  CHECK_FALSE(MirroredStrategy::Create(*cluster, no_model).ok());
}

}  // namespace
}  // namespace tessera
