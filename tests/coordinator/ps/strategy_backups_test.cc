// ParameterServerStrategy with shard_copies = 2 (Note [Backups on the next PS], coordinator/
// strategy.h) on the in-process cluster: where backups go, that every acknowledged change
// reaches them, promotion after a PS loss, and rebuilding backups.
#include <doctest/doctest.h>

#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "actors/base/messages.h"
#include "cluster/base/cluster.h"
#include "cluster/base/testing.h"
#include "coordinator/ps/sharded_variable.h"
#include "coordinator/ps/strategy.h"
#include "tessera/partitioner.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

constexpr auto kRequestTimeout = std::chrono::seconds(20);

std::unique_ptr<Cluster> StartCluster(int32_t num_ps) {
  return ValueOrDie(Cluster::StartInProcess({.num_ps = num_ps, .num_workers = 1}), "cluster");
}

ShardedVariable CreateTrained(ParameterServerStrategy& strategy, int64_t shards) {
  VariableOptions options;
  options.name = "emb";
  options.shape = Shape{24, 3};
  options.initializer = {"random_uniform", {{"minval", -1.0}, {"maxval", 1.0}}, 7};
  options.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}};
  options.partitioner = *FixedShardsPartitioner(shards);
  return ValueOrDie(strategy.CreateVariable(options), "emb");
}

// Shard `name` as PS node `task` holds it (a primary or a backup).
shard_actor ShardOn(Cluster& cluster, int32_t task, const std::string& name) {
  caf::scoped_actor self(cluster.actors().system());
  shard_actor out;
  self->request(cluster.actors().ps_node(task), kRequestTimeout, lookup_atom::value, name)
      .receive([&](shard_actor& shard) { out = std::move(shard); },
               [&](caf::error& err) { FAIL("lookup of ", name, " on ps ", task, ": ", err); });
  return out;
}

TensorSlice SnapshotOf(Cluster& cluster, const shard_actor& shard) {
  caf::scoped_actor self(cluster.actors().system());
  TensorSlice out;
  self->request(shard, kRequestTimeout, ShardOp(SnapshotOp{}))
      .receive([&](ShardOpResult& result) { out = std::get<TensorSlice>(std::move(result)); },
               [&](caf::error& err) { FAIL("snapshot: ", err); });
  return out;
}

bool SameState(const TensorSlice& a, const TensorSlice& b) {
  if (a.step != b.step || a.slots.size() != b.slots.size()) return false;
  if (!testing::SameTensor(a.value, b.value)) return false;
  for (size_t i = 0; i < a.slots.size(); ++i) {
    if (!testing::SameTensor(a.slots[i], b.slots[i])) return false;
  }
  return true;
}

// A gradient touching every row of `v`, different per call.
void Train(const ShardedVariable& v, int round) {
  std::vector<int64_t> ids;
  for (int64_t r = 0; r < v.shape().rows(); ++r) ids.push_back(r);
  Tensor rows(Shape{v.shape().rows(), 3});
  for (int64_t i = 0; i < rows.size(); ++i) rows.values()[i] = 0.01f * (i % 7) + 0.1f * round;
  REQUIRE(v.Scatter(ScatterOp::kAdd, ids, rows).ok());
}

TEST_CASE("with shard_copies = 2 each shard has its backup on the next PS, holding every change") {
  auto cluster = StartCluster(3);
  ParameterServerStrategy strategy(*cluster, Partitioner{}, 2);
  const ShardedVariable v = CreateTrained(strategy, 6);
  CHECK(strategy.placement().ShardsWithoutBackup() == 0);
  for (int round = 0; round < 3; ++round) Train(v, round);
  for (const VariableShard& shard : v.Variables()) {
    CAPTURE(shard.name);
    const int32_t backup_task = (shard.ps_task + 1) % 3;
    const TensorSlice primary = SnapshotOf(*cluster, ShardOn(*cluster, shard.ps_task, shard.name));
    const TensorSlice backup = SnapshotOf(*cluster, ShardOn(*cluster, backup_task, shard.name));
    CHECK(SameState(primary, backup));
    CHECK(primary.value.size() > 0);
  }
}

TEST_CASE("shard_copies = 2 needs two PS tasks, and shard_copies is 1 or 2") {
  auto one = StartCluster(1);
  ParameterServerStrategy lonely(*one, Partitioner{}, 2);
  absl::StatusOr<ShardedVariable> refused =
      lonely.CreateVariable({.name = "w", .shape = Shape{4, 2}});
  CHECK(refused.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(refused.status().message().find("at least 2 parameter servers") != std::string::npos);
  auto two = StartCluster(2);
  ParameterServerStrategy three(*two, Partitioner{}, 3);
  CHECK(three.CreateVariable({.name = "w", .shape = Shape{4, 2}}).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("a lost PS's backups are promoted with every acknowledged change, then rebuilt") {
  auto cluster = StartCluster(3);
  ParameterServerStrategy strategy(*cluster, Partitioner{}, 2);
  const ShardedVariable created = CreateTrained(strategy, 6);
  for (int round = 0; round < 3; ++round) Train(created, round);
  const Tensor before = ValueOrDie(created.Read(), "read");

  REQUIRE(testing::KillPs(*cluster, 0).ok());
  auto touched = strategy.placement().PromoteBackupsOf(0);
  REQUIRE(touched.ok());
  CHECK(*touched == std::vector<std::string>{"emb"});
  const ShardedVariable& v = strategy.variables().at("emb");
  for (const VariableShard& shard : v.Variables()) CHECK(shard.ps_task != 0);
  CHECK(testing::SameTensor(ValueOrDie(v.Read(), "read after"), before));
  // Shards 0 and 3 were promoted onto ps 1; shards 2 and 5 lost their backups with ps 0.
  CHECK(strategy.placement().ShardsWithoutBackup() == 4);

  auto rebuilt = strategy.placement().RebuildBackups({0});
  REQUIRE(rebuilt.ok());
  CHECK(*rebuilt == 4);
  CHECK(strategy.placement().ShardsWithoutBackup() == 0);
  Train(v, 7);
  for (const VariableShard& shard : v.Variables()) {
    CAPTURE(shard.name);
    // The backup is on the first live task after the primary's.
    int32_t backup_task = (shard.ps_task + 1) % 3;
    if (backup_task == 0) backup_task = 1;
    const TensorSlice primary = SnapshotOf(*cluster, ShardOn(*cluster, shard.ps_task, shard.name));
    const TensorSlice backup = SnapshotOf(*cluster, ShardOn(*cluster, backup_task, shard.name));
    CHECK(SameState(primary, backup));
  }
  // A shard whose primary and backup are both gone cannot be promoted.
  CHECK(strategy.placement().PromoteBackupsOf(1).ok());
  CHECK(strategy.placement().PromoteBackupsOf(2).status().code() ==
        absl::StatusCode::kFailedPrecondition);
}

// Note [A lost backup is struck before the primary acknowledges alone] (actors/ps/shard_actor.h).
TEST_CASE(
    "a backup that fails is told to the cluster's listener, struck, never promoted, rebuilt") {
  auto cluster = StartCluster(3);
  ParameterServerStrategy strategy(*cluster, Partitioner{}, 2);
  const ShardedVariable v = CreateTrained(strategy, 3);  // part_k on ps k, its backup on k + 1
  Train(v, 1);
  const shard_actor failed = ShardOn(*cluster, 1, "emb/part_0");
  caf::anon_send_exit(failed, caf::exit_reason::kill);
  // Nobody listens yet (the shards exist before their coordinator): the loss is kept, and handed
  // to the first listener as it is set.
  REQUIRE(cluster->actors().AwaitUnheardBackupLosses(1, testing::kWaitLimit));
  absl::Mutex mu;
  std::vector<std::pair<std::string, caf::actor_addr>> heard;
  cluster->actors().SetBackupLossListener(
      [&](const std::string& shard, const caf::actor_addr& backup) {
        absl::MutexLock lock(&mu);
        heard.emplace_back(shard, backup);
      });
  {
    absl::MutexLock lock(&mu);
    REQUIRE(heard.size() == 1);
    CHECK(heard[0].first == "emb/part_0");
    CHECK(heard[0].second == failed.address());
  }
  CHECK(strategy.placement().BackupOf("emb/part_0", 0).has_value());
  CHECK(strategy.placement().StrikeBackup("emb/part_0", caf::actor_addr()).status().code() ==
        absl::StatusCode::kNotFound);
  // Struck: the primary goes on alone, so the held change and the next are acknowledged.
  absl::StatusOr<int32_t> struck =
      strategy.placement().StrikeBackup("emb/part_0", failed.address());
  REQUIRE(struck.ok());
  CHECK(*struck == 1);
  CHECK_FALSE(strategy.placement().BackupOf("emb/part_0", 0).has_value());
  CHECK(strategy.placement().ShardsWithoutBackup() == 1);
  Train(v, 2);
  // A PS loss now finds no backup to promote for that shard, rather than the stale one.
  CHECK(strategy.placement().PromoteBackupsOf(0).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  // Rebuilt, it takes the primary's state, and a loss of the primary loses nothing.
  REQUIRE(strategy.placement().RebuildBackups({}).ok());
  CHECK(strategy.placement().ShardsWithoutBackup() == 0);
  Train(v, 3);
  const Tensor before = ValueOrDie(v.Read(), "read");
  REQUIRE(testing::KillPs(*cluster, 0).ok());
  REQUIRE(strategy.placement().PromoteBackupsOf(0).ok());
  CHECK(
      testing::SameTensor(ValueOrDie(strategy.variables().at("emb").Read(), "read after"), before));
  cluster->actors().SetBackupLossListener(nullptr);
}

TEST_CASE(
    "with two PS a lost one's backups are promoted but none can be rebuilt until it is back") {
  auto cluster = StartCluster(2);
  ParameterServerStrategy strategy(*cluster, Partitioner{}, 2);
  const ShardedVariable created = CreateTrained(strategy, 4);
  Train(created, 1);
  const Tensor before = ValueOrDie(created.Read(), "read");
  REQUIRE(testing::KillPs(*cluster, 1).ok());
  REQUIRE(strategy.placement().PromoteBackupsOf(1).ok());
  const ShardedVariable& v = strategy.variables().at("emb");
  CHECK(testing::SameTensor(ValueOrDie(v.Read(), "read after"), before));
  auto rebuilt = strategy.placement().RebuildBackups({1});
  CHECK(rebuilt.status().code() == absl::StatusCode::kUnavailable);
  CHECK(strategy.placement().ShardsWithoutBackup() == 4);
  // Training goes on, without backups.
  Train(v, 2);
}

}  // namespace
}  // namespace tessera
