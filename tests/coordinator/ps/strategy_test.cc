// ParameterServerStrategy on the real in-process cluster: which partitioner decides the shard
// count, round-robin placement, partition-aware initialization, ON_READ variables and
// UpdateFromReplicas.
#include "coordinator/ps/strategy.h"

#include <doctest/doctest.h>
#include <sys/resource.h>

#include <caf/scoped_actor.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "actors/base/messages.h"
#include "actors/scheduling/replica.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/internal/await.h"
#include "coordinator/ps/sharded_variable.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "tessera/model.h"
#include "tessera/partitioner.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::FromVector;
using testing::ValueOrDie;

constexpr auto kRequestTimeout = std::chrono::seconds(20);

ShardedVariable Create(ParameterServerStrategy& strategy, const std::string& name, Shape shape,
                       std::optional<Partitioner> partitioner = std::nullopt) {
  VariableOptions options;
  options.name = name;
  options.shape = std::move(shape);
  options.partitioner = std::move(partitioner);
  return ValueOrDie(strategy.CreateVariable(options), name.c_str());
}

std::vector<int32_t> PsTasks(const ShardedVariable& v) {
  std::vector<int32_t> out;
  for (const VariableShard& shard : v.Variables()) out.push_back(shard.ps_task);
  return out;
}

// The shard names PS node `task` holds (sorted), asked of the node itself.
std::vector<std::string> ShardsOn(Cluster& cluster, int32_t task) {
  caf::scoped_actor self(cluster.actors().system());
  std::vector<std::string> out;
  bool answered = false;
  self->request(cluster.actors().ps_node(task), kRequestTimeout, list_atom::value)
      .receive(
          [&](std::vector<std::string>& names) {
            out = std::move(names);
            answered = true;
          },
          [&](caf::error& err) { FAIL_CHECK(ErrorToStatus(err).ToString()); });
  CHECK(answered);
  return out;
}

PsNodeStats StatsOf(Cluster& cluster, int32_t task) {
  caf::scoped_actor self(cluster.actors().system());
  PsNodeStats out;
  self->request(cluster.actors().ps_node(task), kRequestTimeout, stats_atom::value)
      .receive([&](PsNodeStats& stats) { out = std::move(stats); },
               [&](caf::error& err) { FAIL_CHECK(ErrorToStatus(err).ToString()); });
  return out;
}

TEST_CASE("the partitioner in force decides the number of shards") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
  const Shape shape{32, 4};  // 512 bytes of float32, 16 bytes per row

  CHECK(Create(strategy, "fixed", shape).num_shards() == 3);
  // FixedShards caps at the row count.
  CHECK(Create(strategy, "two_rows", Shape{2, 4}).num_shards() == 2);
  {
    // MinSize: ceil(512 / 256) = 2 shards (max_shards 8 does not bind).
    ParameterServerStrategy::PartitionerScope scope(strategy,
                                                    ValueOrDie(MinSizePartitioner(256, 8)));
    CHECK(Create(strategy, "min_size", shape).num_shards() == 2);
    // Its default max_shards is 1.
    CHECK(Create(strategy, "min_size_default_max", shape, ValueOrDie(MinSizePartitioner(16)))
              .num_shards() == 1);
    // MinSize never goes below one shard, even for tiny variables.
    CHECK(Create(strategy, "min_size_tiny", Shape{3, 1}).num_shards() == 1);
  }
  {
    // MaxSize: at most 64 bytes = 4 rows per shard -> 8 shards; capped by max_shards.
    ParameterServerStrategy::PartitionerScope scope(strategy, ValueOrDie(MaxSizePartitioner(64)));
    CHECK(Create(strategy, "max_size", shape).num_shards() == 8);
    CHECK(Create(strategy, "max_size_capped", shape, ValueOrDie(MaxSizePartitioner(64, 3)))
              .num_shards() == 3);
    // 48 bytes: 3 rows per shard -> ceil(32 / 3) = 11 shards.
    CHECK(Create(strategy, "max_size_48", shape, ValueOrDie(MaxSizePartitioner(48))).num_shards() ==
          11);
  }
  // The scopes are gone: the strategy's partitioner again.
  CHECK(Create(strategy, "fixed_again", shape).num_shards() == 3);
  // Shards under MaxSize(64) really hold 4 rows each.
  const std::vector<VariableShard> shards = strategy.variables().at("max_size").Variables();
  REQUIRE(shards.size() == 8);
  for (const VariableShard& s : shards) CHECK(s.shape == Shape{4, 4});
}

TEST_CASE("a PartitionerScope overrides the strategy's and VariableOptions overrides the scope") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
  const Shape shape{20, 2};
  {
    ParameterServerStrategy::PartitionerScope outer(strategy,
                                                    ValueOrDie(FixedShardsPartitioner(4)));
    CHECK(Create(strategy, "outer", shape).num_shards() == 4);
    {
      ParameterServerStrategy::PartitionerScope inner(strategy,
                                                      ValueOrDie(FixedShardsPartitioner(5)));
      CHECK(Create(strategy, "inner", shape).num_shards() == 5);
      CHECK(Create(strategy, "own", shape, ValueOrDie(FixedShardsPartitioner(3))).num_shards() ==
            3);
      // An explicit "none" beats the scope too.
      CHECK(Create(strategy, "own_none", shape, Partitioner()).num_shards() == 1);
    }
    CHECK(Create(strategy, "outer_again", shape).num_shards() == 4);
  }
  CHECK(Create(strategy, "strategy", shape).num_shards() == 2);
  CHECK(strategy.partitioner().description() == "fixed:2");
}

TEST_CASE("a scalar and a colocated variable are never partitioned") {
  auto cluster = testing::StartCluster(3, 1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
  const ShardedVariable a = Create(strategy, "a", Shape{8, 2});  // ps 0, 1
  const ShardedVariable b = Create(strategy, "b", Shape{8, 2});  // ps 2, 0
  CHECK(PsTasks(a) == std::vector<int32_t>{0, 1});
  CHECK(PsTasks(b) == std::vector<int32_t>{2, 0});

  const ShardedVariable scalar = Create(strategy, "scalar", Shape{});  // ps 1
  CHECK(scalar.num_shards() == 1);
  REQUIRE(scalar.Variables().size() == 1);
  CHECK(scalar.Variables()[0].name == "scalar");
  CHECK(scalar.Variables()[0].shape == Shape{});
  CHECK(PsTasks(scalar) == std::vector<int32_t>{1});

  VariableOptions options;
  options.name = "slot_of_b";
  options.shape = Shape{8, 2};
  options.colocate_with = &b;
  options.partitioner = ValueOrDie(FixedShardsPartitioner(4));  // ignored when colocated
  const ShardedVariable colocated = ValueOrDie(strategy.CreateVariable(options));
  CHECK(colocated.num_shards() == 1);
  CHECK(PsTasks(colocated) == std::vector<int32_t>{2});  // b's first shard's PS
  const std::vector<std::string> on_ps2 = ShardsOn(*cluster, 2);
  CHECK(std::find(on_ps2.begin(), on_ps2.end(), "slot_of_b") != on_ps2.end());
  // Colocation takes no turn of the round-robin counter: the next shard goes to ps 2.
  CHECK(PsTasks(Create(strategy, "after", Shape{3})) == std::vector<int32_t>{2, 0});
}

TEST_CASE("shards are placed round-robin over the PS tasks with one counter per strategy") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(4)));
  const ShardedVariable a = Create(strategy, "a", Shape{8, 1});
  CHECK(PsTasks(a) == std::vector<int32_t>{0, 1, 0, 1});
  const ShardedVariable b =
      Create(strategy, "b", Shape{8, 1}, ValueOrDie(FixedShardsPartitioner(3)));
  CHECK(PsTasks(b) == std::vector<int32_t>{0, 1, 0});
  // The counter stands at 7 now: an unpartitioned variable goes to ps 1, not back to ps 0.
  const ShardedVariable c = Create(strategy, "c", Shape{8, 1}, Partitioner());
  CHECK(PsTasks(c) == std::vector<int32_t>{1});
  CHECK(PsTasks(Create(strategy, "d", Shape{8, 1})) == std::vector<int32_t>{0, 1, 0, 1});

  CHECK(strategy.DescribePlacement(0) ==
        "a/part_0, a/part_2, b/part_0, b/part_2, d/part_0, d/part_2");
  CHECK(strategy.DescribePlacement(1) == "a/part_1, a/part_3, b/part_1, c, d/part_1, d/part_3");
  // The PS nodes agree.
  CHECK(ShardsOn(*cluster, 0) == std::vector<std::string>{"a/part_0", "a/part_2", "b/part_0",
                                                          "b/part_2", "d/part_0", "d/part_2"});
  CHECK(ShardsOn(*cluster, 1) ==
        std::vector<std::string>{"a/part_1", "a/part_3", "b/part_1", "c", "d/part_1", "d/part_3"});
  CHECK(strategy.variables().size() == 4);
}

TEST_CASE("the same seed gives the same full variable whatever the number of shards") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster);
  const Shape shape{31, 7};
  const InitializerSpec init{"truncated_normal", {{"mean", 0.5}, {"stddev", 2.0}}, 42};
  const Tensor reference = ValueOrDie(MakeInitializedBlock(init, shape, 0, shape.rows()));
  for (int64_t shards : {1, 2, 3, 7}) {
    CAPTURE(shards);
    VariableOptions options;
    options.name = absl::StrCat("init_", shards);
    options.shape = shape;
    options.initializer = init;
    options.partitioner = ValueOrDie(FixedShardsPartitioner(shards));
    const ShardedVariable v = ValueOrDie(strategy.CreateVariable(options));
    CHECK(v.num_shards() == shards);
    CHECK_TENSOR(ValueOrDie(v.Read()), reference);
  }
  // Another seed gives another value (the seed is used at all).
  VariableOptions options;
  options.name = "other_seed";
  options.shape = shape;
  options.initializer = init;
  options.initializer.seed = 43;
  options.partitioner = ValueOrDie(FixedShardsPartitioner(3));
  const Tensor other = ValueOrDie(ValueOrDie(strategy.CreateVariable(options)).Read());
  CHECK_FALSE(testing::SameTensor(other, reference));
}

int64_t PeakRssBytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

TEST_CASE("a large variable is initialized on its PS nodes without the driver building it") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(4)));
  const Shape shape{int64_t{4} << 20, 16};  // 4M x 16 float32 = 256 MiB
  const int64_t bytes = shape.num_elements() * 4;
  const InitializerSpec init{"random_uniform", {{"minval", -0.05}, {"maxval", 0.05}}, 3};
  const int64_t peak_before = PeakRssBytes();
  VariableOptions options;
  options.name = "big";
  options.shape = shape;
  options.initializer = init;
  const ShardedVariable big = ValueOrDie(strategy.CreateVariable(options));
  const int64_t growth = PeakRssBytes() - peak_before;
  CHECK(big.num_shards() == 4);
  // The shards hold the value once; a driver-side full value would double the peak.
  CHECK_MESSAGE(growth < bytes * 3 / 2, "peak RSS grew by ", growth, " bytes for a ", bytes,
                "-byte variable");
  CHECK(StatsOf(*cluster, 0).bytes + StatsOf(*cluster, 1).bytes == bytes);

  const int64_t rows = shape.rows();
  const std::vector<int64_t> ids = {0, rows / 4 - 1, rows / 4, rows / 2, rows - 1, 12345};
  const Tensor got = ValueOrDie(big.Gather(ids));
  for (size_t k = 0; k < ids.size(); ++k) {
    CAPTURE(ids[k]);
    const Tensor want = ValueOrDie(MakeInitializedBlock(init, shape, ids[k], 1));
    CHECK(std::equal(want.values().begin(), want.values().end(), got.row(k).begin()));
  }
  CHECK_TENSOR(ValueOrDie(big.Slice(rows - 2, std::nullopt, 1)),
               ValueOrDie(MakeInitializedBlock(init, shape, rows - 2, 2)));
}

TEST_CASE("CreateVariable rejects duplicates, MEAN on int64 and ON_READ with NONE") {
  auto cluster = testing::StartCluster(2, 2);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
  Create(strategy, "taken", Shape{6, 2});

  VariableOptions duplicate;
  duplicate.name = "taken";
  duplicate.shape = Shape{4};
  const absl::Status dup = strategy.CreateVariable(duplicate).status();
  CHECK_MESSAGE(absl::IsInvalidArgument(dup), dup.ToString());

  VariableOptions unnamed;
  unnamed.shape = Shape{4};
  CHECK(absl::IsInvalidArgument(strategy.CreateVariable(unnamed).status()));

  VariableOptions mean_int;
  mean_int.name = "mean_int";
  mean_int.shape = Shape{4};
  mean_int.dtype = DType::kInt64;
  mean_int.aggregation = VariableAggregation::kMean;
  const absl::Status mean = strategy.CreateVariable(mean_int).status();
  CHECK_MESSAGE(absl::IsInvalidArgument(mean), mean.ToString());

  VariableOptions on_read_none;
  on_read_none.name = "on_read_none";
  on_read_none.shape = Shape{4};
  on_read_none.synchronization = VariableSynchronization::kOnRead;
  on_read_none.aggregation = VariableAggregation::kNone;
  const absl::Status none = strategy.CreateVariable(on_read_none).status();
  CHECK_MESSAGE(absl::IsInvalidArgument(none), none.ToString());

  // A bad initializer fails on the PS after some shards may exist: none is left behind, and
  // the name stays free.
  VariableOptions bad_init;
  bad_init.name = "bad_init";
  bad_init.shape = Shape{6, 2};
  bad_init.initializer = {"random_uniform", {{"minval", 1.0}, {"maxval", -1.0}}, 0};
  const absl::Status init = strategy.CreateVariable(bad_init).status();
  CHECK_MESSAGE(absl::IsInvalidArgument(init), init.ToString());

  // Nothing but "taken" was created anywhere.
  CHECK(strategy.variables().size() == 1);
  CHECK(ShardsOn(*cluster, 0) == std::vector<std::string>{"taken/part_0", "taken/part_2"});
  CHECK(ShardsOn(*cluster, 1) == std::vector<std::string>{"taken/part_1"});
  bad_init.initializer = {"ones", {}, 0};
  const ShardedVariable ok = ValueOrDie(strategy.CreateVariable(bad_init));
  CHECK_TENSOR(ValueOrDie(ok.Read()), Tensor(Shape{6, 2}, 1.0f));
}

TEST_CASE("CreateVariables creates every variable or none of them") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
  auto options = [](const std::string& name, InitializerSpec init) {
    VariableOptions o;
    o.name = name;
    o.shape = Shape{4, 2};
    o.initializer = std::move(init);
    return o;
  };
  const InitializerSpec ones{"ones", {}, 0};
  const InitializerSpec bad{"random_uniform", {{"minval", 1.0}, {"maxval", -1.0}}, 0};

  // A duplicate within the call, and a bad initializer found by a PS: nothing is created.
  CHECK(absl::IsInvalidArgument(
      strategy.CreateVariables({options("a", ones), options("a", ones)}).status()));
  CHECK(absl::IsInvalidArgument(
      strategy.CreateVariables({options("a", ones), options("b", bad)}).status()));
  CHECK(strategy.variables().empty());
  CHECK(ShardsOn(*cluster, 0).empty());
  CHECK(ShardsOn(*cluster, 1).empty());
  CHECK(ValueOrDie(strategy.CreateVariables({})).empty());

  // Both at once, in order, placed round-robin across the call as one by one would be.
  std::vector<ShardedVariable> made =
      ValueOrDie(strategy.CreateVariables({options("a", ones), options("b", ones)}));
  REQUIRE(made.size() == 2);
  CHECK(made[0].name() == "a");
  CHECK(made[1].name() == "b");
  CHECK_TENSOR(ValueOrDie(made[1].Read()), Tensor(Shape{4, 2}, 1.0f));
  CHECK(ShardsOn(*cluster, 0) == std::vector<std::string>{"a/part_0", "b/part_0"});
  CHECK(ShardsOn(*cluster, 1) == std::vector<std::string>{"a/part_1", "b/part_1"});
}

// Three ON_READ variables over 3 worker slots whose copies hold 1, 2 and 3.
ShardedVariable CreateOnRead(ParameterServerStrategy& strategy, const std::string& name,
                             VariableAggregation aggregation) {
  VariableOptions options;
  options.name = name;
  options.shape = Shape{2, 2};
  options.synchronization = VariableSynchronization::kOnRead;
  options.aggregation = aggregation;
  options.partitioner = ValueOrDie(FixedShardsPartitioner(2));  // ignored: copies are whole
  return ValueOrDie(strategy.CreateVariable(options), name.c_str());
}

TEST_CASE("an ON_READ variable has one copy per worker and Read reduces them") {
  auto cluster = testing::StartCluster(2, 3);
  ParameterServerStrategy strategy(*cluster);
  const ShardedVariable sum = CreateOnRead(strategy, "sum", VariableAggregation::kSum);
  const ShardedVariable mean = CreateOnRead(strategy, "mean", VariableAggregation::kMean);
  const ShardedVariable first =
      CreateOnRead(strategy, "first", VariableAggregation::kOnlyFirstReplica);

  CHECK(sum.is_on_read());
  CHECK(sum.synchronization() == VariableSynchronization::kOnRead);
  const std::vector<VariableShard> copies = sum.Variables();
  REQUIRE(copies.size() == 3);
  for (int32_t k = 0; k < 3; ++k) {
    CAPTURE(k);
    CHECK(copies[k].name == absl::StrCat("sum/worker_", k));
    CHECK(copies[k].offset == 0);
    CHECK(copies[k].shape == Shape{2, 2});
    CHECK(copies[k].ps_task == k % 2);  // round-robin, the strategy's first variable
    CHECK(ValueOrDie(sum.ForWorker(k)).name == copies[k].name);
  }
  CHECK(absl::IsInvalidArgument(sum.ForWorker(3).status()));
  CHECK(absl::IsInvalidArgument(sum.ForWorker(-1).status()));

  for (const ShardedVariable* v : {&sum, &mean, &first}) {
    for (int32_t k = 0; k < 3; ++k) testing::AssignCopy(*cluster, *v, k, static_cast<float>(k + 1));
  }
  CHECK_TENSOR(ValueOrDie(sum.Read()), Tensor(Shape{2, 2}, 6.0f));
  CHECK_TENSOR(ValueOrDie(mean.Read()), Tensor(Shape{2, 2}, 2.0f));
  CHECK_TENSOR(ValueOrDie(first.Read()), Tensor(Shape{2, 2}, 1.0f));
}

TEST_CASE("the driver cannot update an ON_READ variable directly") {
  auto cluster = testing::StartCluster(1, 2);
  ParameterServerStrategy strategy(*cluster);
  const ShardedVariable v = CreateOnRead(strategy, "metric", VariableAggregation::kSum);
  const Tensor value(Shape{2, 2}, 1.0f);
  const absl::Status assign = v.Assign(value);
  CHECK_MESSAGE(absl::IsFailedPrecondition(assign), assign.ToString());
  CHECK(absl::IsFailedPrecondition(v.AssignAdd(value)));
  CHECK(absl::IsFailedPrecondition(v.AssignSub(value)));
  CHECK(absl::IsFailedPrecondition(v.ScatterAdd({0}, Tensor(Shape{1, 2}, 1.0f))));
  CHECK(absl::IsFailedPrecondition(v.Gather({0}).status()));
  const std::vector<Tensor> replicas = {value, value};
  CHECK(absl::IsFailedPrecondition(v.UpdateFromReplicas(AssignKind::kAssign, replicas)));
  CHECK_TENSOR(ValueOrDie(v.Read()), Tensor(Shape{2, 2}, 0.0f));
}

TEST_CASE("closures update their worker's copy of an ON_READ variable and Read sums them") {
  auto cluster = testing::StartCluster(1, 3);
  ParameterServerStrategy strategy(*cluster);
  const ShardedVariable count = CreateOnRead(strategy, "count", VariableAggregation::kSum);
  auto registry = std::make_shared<FunctionRegistry>();
  REQUIRE(registry
              ->AddReplicaFunction(
                  "count",
                  [count](ReplicaContext& ctx, const ClosureValues&, Done<ClosureValues> done) {
                    absl::StatusOr<VariableHandle> mine = count.ForWorker(ctx.worker().index);
                    if (!mine.ok()) return done(mine.status());
                    AssignAsync(ctx.shards(), *mine, AssignKind::kAdd, Tensor(Shape{2, 2}, 1.0f),
                                [done](absl::Status s) {
                                  if (!s.ok()) return done(s);
                                  done(ClosureValues{});
                                });
                  })
              .ok());
  auto coordinator = ValueOrDie(ClusterCoordinator::Create(strategy, registry));
  std::vector<RemoteValue> values;
  for (int i = 0; i < 30; ++i) values.push_back(ValueOrDie(coordinator->Schedule("count")));
  REQUIRE(testing::FetchAllWithin(values).ok());
  REQUIRE(coordinator->Join().ok());
  CHECK_TENSOR(ValueOrDie(count.Read()), Tensor(Shape{2, 2}, 30.0f));
}

TEST_CASE("UpdateFromReplicas combines replica values with the variable's aggregation") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
  const std::vector<Tensor> replicas = {FromVector(Shape{2}, {1, 2}), FromVector(Shape{2}, {3, 4}),
                                        FromVector(Shape{2}, {5, 6})};
  auto make = [&](const std::string& name, VariableAggregation aggregation) {
    VariableOptions options;
    options.name = name;
    options.shape = Shape{2};
    options.initializer = {"constant", {{"value", 10.0}}, 0};
    options.aggregation = aggregation;
    return ValueOrDie(strategy.CreateVariable(options));
  };
  const ShardedVariable sum = make("sum", VariableAggregation::kSum);
  const ShardedVariable mean = make("mean", VariableAggregation::kMean);
  const ShardedVariable first = make("first", VariableAggregation::kOnlyFirstReplica);
  const ShardedVariable none = make("none", VariableAggregation::kNone);
  CHECK(sum.num_shards() == 2);

  REQUIRE(sum.UpdateFromReplicas(AssignKind::kAssign, replicas).ok());
  CHECK_TENSOR(ValueOrDie(sum.Read()), FromVector(Shape{2}, {9, 12}));
  REQUIRE(mean.UpdateFromReplicas(AssignKind::kAssign, replicas).ok());
  CHECK_TENSOR(ValueOrDie(mean.Read()), FromVector(Shape{2}, {3, 4}));
  REQUIRE(first.UpdateFromReplicas(AssignKind::kAssign, replicas).ok());
  CHECK_TENSOR(ValueOrDie(first.Read()), FromVector(Shape{2}, {1, 2}));

  // With AssignAdd / AssignSub the combined value is added / subtracted once.
  REQUIRE(sum.UpdateFromReplicas(AssignKind::kAdd, replicas).ok());
  CHECK_TENSOR(ValueOrDie(sum.Read()), FromVector(Shape{2}, {18, 24}));
  REQUIRE(mean.UpdateFromReplicas(AssignKind::kSub, replicas).ok());
  CHECK_TENSOR(ValueOrDie(mean.Read()), FromVector(Shape{2}, {0, 0}));

  const absl::Status s = none.UpdateFromReplicas(AssignKind::kAdd, replicas);
  CHECK_MESSAGE(absl::IsInvalidArgument(s), s.ToString());
  CHECK_TENSOR(ValueOrDie(none.Read()), FromVector(Shape{2}, {10, 10}));

  // Mismatched replica shapes and no replicas at all are errors too; nothing changes.
  const std::vector<Tensor> mixed = {FromVector(Shape{2}, {1, 2}), Tensor(Shape{3}, 1.0f)};
  CHECK(absl::IsInvalidArgument(sum.UpdateFromReplicas(AssignKind::kAdd, mixed)));
  CHECK(absl::IsInvalidArgument(sum.UpdateFromReplicas(AssignKind::kAdd, {})));
  const std::vector<Tensor> wrong_shape = {Tensor(Shape{3}, 1.0f), Tensor(Shape{3}, 1.0f)};
  CHECK(absl::IsInvalidArgument(sum.UpdateFromReplicas(AssignKind::kAdd, wrong_shape)));
  CHECK_TENSOR(ValueOrDie(sum.Read()), FromVector(Shape{2}, {18, 24}));
}

}  // namespace
}  // namespace tessera
