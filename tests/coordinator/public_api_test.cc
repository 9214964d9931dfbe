// The TF-style API as a program outside the library sees it: these tests include the public tree
// (tessera/*.h) and nothing else of Tessera but a test helper, and drive a cluster, a strategy, sharded variables
// and a coordinator whose replica functions use only their ReplicaContext.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "tessera/cluster.h"
#include "tessera/coordinator.h"
#include "tessera/partitioner.h"
#include "tessera/strategy.h"
#include "tessera/tensor.h"
#include "tessera/variables.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

Tensor Rows(int64_t rows, int64_t width, float first) {
  std::vector<float> values(static_cast<size_t>(rows * width));
  for (size_t k = 0; k < values.size(); ++k) values[k] = first + static_cast<float>(k);
  return ValueOrDie(Tensor::FromVector(Shape{rows, width}, std::move(values)));
}

std::vector<float> Values(const Tensor& t) { return {t.values().begin(), t.values().end()}; }

struct Fixture {
  Fixture() {
    cluster = ValueOrDie(Cluster::StartInProcess({/*num_ps=*/2, /*num_workers=*/2}));
    strategy = std::make_unique<ParameterServerStrategy>(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
    VariableOptions emb;
    emb.name = "emb";
    emb.shape = Shape{9, 2};
    table = ValueOrDie(strategy->CreateVariable(emb));
    VariableOptions seen;
    seen.name = "seen";
    seen.shape = Shape{};
    seen.synchronization = VariableSynchronization::kOnRead;
    seen.aggregation = VariableAggregation::kSum;
    per_worker = ValueOrDie(strategy->CreateVariable(seen));
  }

  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ParameterServerStrategy> strategy;  // destroyed before the cluster
  ShardedVariable table;
  ShardedVariable per_worker;
};

TEST_CASE("public API: a cluster, a strategy and sharded variables, from the driver") {
  Fixture f;
  CHECK(f.cluster->num_ps() == 2);
  CHECK(f.cluster->num_workers() == 2);
  CHECK_FALSE(f.cluster->networked());
  CHECK(f.table.num_shards() == 3);
  const std::vector<VariableShard> shards = f.table.Variables();
  REQUIRE(shards.size() == 3);
  CHECK(shards[1].name == "emb/part_1");
  CHECK(shards[1].offset == 3);
  CHECK(shards[1].ps_task == 1);  // round-robin over the PS tasks
  CHECK(f.strategy->variables().count("emb") == 1);

  REQUIRE(f.table.Assign(Rows(9, 2, 0)).ok());
  CHECK(Values(ValueOrDie(f.table.Gather({8, 0, 4}))) == std::vector<float>{16, 17, 0, 1, 8, 9});
  REQUIRE(f.table.ScatterAdd({4, 4}, Rows(2, 2, 1)).ok());  // repeats accumulate
  CHECK(Values(ValueOrDie(f.table.Index(4))) == std::vector<float>{8 + 1 + 3, 9 + 2 + 4});
  CHECK(Values(ValueOrDie(f.table.Slice(7, std::nullopt))) == std::vector<float>{14, 15, 16, 17});
  const absl::Status out_of_range = f.table.ScatterUpdate({9}, Rows(1, 2, 0));
  CHECK(absl::IsInvalidArgument(out_of_range));
  CHECK_MESSAGE(absl::StrContains(out_of_range.message(), "9"), out_of_range.ToString());

  // A variable of another partitioner, and one colocated (never partitioned).
  {
    ParameterServerStrategy::PartitionerScope scope(*f.strategy, ValueOrDie(FixedShardsPartitioner(2)));
    VariableOptions other;
    other.name = "other";
    other.shape = Shape{4, 1};
    CHECK(ValueOrDie(f.strategy->CreateVariable(other)).num_shards() == 2);
  }
  VariableOptions duplicate;
  duplicate.name = "emb";
  duplicate.shape = Shape{1};
  CHECK(absl::IsInvalidArgument(f.strategy->CreateVariable(duplicate).status()));

  // An ON_READ variable: the driver reads the copies reduced, and cannot update them itself.
  CHECK(f.per_worker.is_on_read());
  CHECK(f.per_worker.Variables().size() == 2);
  CHECK(absl::IsFailedPrecondition(f.per_worker.AssignAdd(Tensor(Shape{}, 1.0f))));

  // An empty handle says so.
  const ShardedVariable none;
  CHECK(absl::IsFailedPrecondition(none.Read().status()));
  CHECK(absl::IsFailedPrecondition(none.Gather({0}).status()));
}

TEST_CASE("public API: replica functions read and update variables through their context") {
  Fixture f;
  REQUIRE(f.table.Assign(Rows(9, 2, 0)).ok());
  auto registry = std::make_shared<FunctionRegistry>();
  auto builds = std::make_shared<std::atomic<int>>(0);
  REQUIRE(registry
              ->AddResource<int64_t>("row",
                                     [builds](const WorkerInfo& w) -> absl::StatusOr<int64_t> {
                                       ++*builds;
                                       return int64_t{w.index};  // worker k touches row k
                                     })
              .ok());
  // "bump": gathers its worker's row and the closure's step's row, adds the first to the second,
  // counts itself on the worker's copy of "seen", and returns what it gathered.
  REQUIRE(registry
              ->AddReplicaFunction(
                  "bump",
                  [table = f.table, seen = f.per_worker](ReplicaContext& ctx, const ClosureValues&,
                                                         Done<ClosureValues> done) {
                    absl::StatusOr<int64_t*> row = ctx.Resource<int64_t>("row");
                    if (!row.ok()) return done(row.status());
                    const int64_t target = ctx.step();
                    ctx.Gather(table, {**row},
                               [&ctx, table, seen, target, done](absl::StatusOr<Tensor> rows) {
                                 if (!rows.ok()) return done(rows.status());
                                 ctx.Scatter(table, ScatterOp::kAdd, {target}, *rows,
                                             [&ctx, seen, gathered = *rows, done](absl::Status s) {
                                               if (!s.ok()) return done(s);
                                               ctx.Assign(
                                                   seen, AssignKind::kAdd, Tensor(Shape{}, 1.0f),
                                                   [gathered, done](absl::Status s) {
                                                     if (!s.ok()) return done(s);
                                                     done(ClosureValues().Set("rows", gathered));
                                                   });
                                             });
                               });
                  })
              .ok());
  REQUIRE(
      registry
          ->AddReplicaFunction("fail",
                               [](ReplicaContext&, const ClosureValues&, Done<ClosureValues> done) {
                                 done(absl::InvalidArgumentError("boom"));
                               })
          .ok());
  std::unique_ptr<ClusterCoordinator> coordinator =
      ValueOrDie(ClusterCoordinator::Create(*f.strategy, registry));
  CHECK(absl::IsNotFound(coordinator->Schedule("no such function").status()));

  std::vector<RemoteValue> values;
  for (int64_t step = 2; step < 8; ++step) {
    values.push_back(ValueOrDie(coordinator->Schedule("bump", {}, step)));
  }
  REQUIRE(coordinator->Join().ok());
  CHECK(ValueOrDie(coordinator->Done()));
  const ClosureStats stats = coordinator->stats();
  CHECK(stats.completed == 6);
  CHECK(stats.failed == 0);
  // Rows 0 and 1 (workers 0 and 1) are never a target, so every gather saw them unchanged: each
  // target row t in [2, 8) grew by row 0 or row 1, whichever worker ran its closure.
  const Tensor after = ValueOrDie(f.table.Read());
  for (int64_t t = 2; t < 8; ++t) {
    CAPTURE(t);
    const std::vector<float> gathered = Values(ValueOrDie(values[t - 2].Fetch<Tensor>("rows")));
    CHECK((gathered == std::vector<float>{0, 1} || gathered == std::vector<float>{2, 3}));
    CHECK(after.values()[t * 2] == static_cast<float>(2 * t) + gathered[0]);
    CHECK(after.values()[t * 2 + 1] == static_cast<float>(2 * t + 1) + gathered[1]);
  }
  CHECK(Values(ValueOrDie(f.table.Slice(0, 2))) == std::vector<float>{0, 1, 2, 3});
  // Each worker counted its own closures on its own copy; the driver reads their sum.
  CHECK(Values(ValueOrDie(f.per_worker.Read())) == std::vector<float>{6});
  CHECK(*builds <= 2);  // a resource is built once per worker

  // A closure's error is raised once, by the next call that waits.
  const RemoteValue failed = ValueOrDie(coordinator->Schedule("fail"));
  const absl::Status joined = coordinator->Join();
  CHECK(absl::IsInvalidArgument(joined));
  CHECK(absl::IsInvalidArgument(failed.Fetch().status()));
  CHECK(failed.state() == RemoteValueState::kFailed);
  CHECK(coordinator->Join().ok());
}

}  // namespace
}  // namespace tessera
