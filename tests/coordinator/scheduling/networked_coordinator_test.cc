// The networked ClusterCoordinator in one test process: PS nodes published by a separate actor
// system (NetworkNode), the coordinator's own system connected to them over loopback, and worker
// "processes" running RunWorkerNode on threads — joining, refused, finishing; and a lost PS
// restored from the latest checkpoint onto a node started again at its address.
#include <doctest/doctest.h>

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "actors/ps/variable_ops.h"
#include "cluster/base/cluster.h"
#include "cluster/base/testing.h"
#include "cluster/network/network.h"
#include "cluster/scheduling/worker_node.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/scheduling/testing.h"
#include "tests/cluster/network_test_util.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

NetworkOptions FastNetwork() {
  NetworkOptions options;
  options.connect_timeout = absl::Seconds(10);
  return options;
}

ClusterSpec SpecFor(uint16_t ps_port, int32_t workers) {
  ClusterSpec spec;
  spec.ps = {NodeAddress{"127.0.0.1", ps_port}};
  spec.workers.assign(workers, NodeAddress{"127.0.0.1", 1});
  spec.coordinator = NodeAddress{"127.0.0.1", testing::UnusedPort()};
  return spec;
}

// The names of the shards PS node 0 of `host` holds.
std::vector<std::string> ShardsHeldBy(testing::NetworkNode& host) {
  return ValueOrDie(
      testing::Ask<std::vector<std::string>>(host.system(), host.ps_node(0), list_atom::value),
      "list");
}

// "w": 6 x 2 in two shards.
VariableOptions TwoShardW() {
  VariableOptions options;
  options.name = "w";
  options.shape = Shape{6, 2};
  options.partitioner = ValueOrDie(FixedShardsPartitioner(2));
  return options;
}

// "add_one": adds 1 to the scalar variable "counter" and returns nothing.
absl::Status AddCounterFunction(FunctionRegistry& registry, VariableHandle counter) {
  return registry.AddReplicaFunction(
      "add_one", [counter](ReplicaContext& ctx, const ClosureValues&, Done<ClosureValues> done) {
        AssignAsync(ctx.shards(), counter, AssignKind::kAdd, Tensor(Shape{}, 1.0f),
                    [done](absl::Status s) {
                      if (!s.ok()) return done(s);
                      done(ClosureValues{});
                    });
      });
}

// The scalar variable "counter" and a registry holding "add_one" on it.
std::pair<ShardedVariable, std::shared_ptr<FunctionRegistry>> CreateCounter(
    ParameterServerStrategy& strategy) {
  VariableOptions options;
  options.name = "counter";
  options.shape = Shape{};
  ShardedVariable counter = ValueOrDie(strategy.CreateVariable(options), "counter");
  auto registry = std::make_shared<FunctionRegistry>();
  REQUIRE(AddCounterFunction(*registry, counter.handle()).ok());
  return {std::move(counter), std::move(registry)};
}

// What a worker process builds from the coordinator's directory.
RegistryBuilder CounterWorker() {
  return [](const VariableDirectory& directory)
             -> absl::StatusOr<std::shared_ptr<const FunctionRegistry>> {
    auto handles = HandlesByName(directory);
    auto it = handles.find("counter");
    if (it == handles.end()) return absl::NotFoundError("no counter in the directory");
    auto registry = std::make_shared<FunctionRegistry>();
    if (absl::Status s = AddCounterFunction(*registry, it->second); !s.ok()) return s;
    return std::shared_ptr<const FunctionRegistry>(std::move(registry));
  };
}

TEST_CASE("networked coordinator: a worker process joins and runs closures while a second "
          "process for its task and a task outside the spec are refused") {
  testing::NetworkNode ps_host(FastNetwork());
  const uint16_t ps_port = ps_host.PublishPsNode(0);
  const ClusterSpec spec = SpecFor(ps_port, /*workers=*/2);
  auto cluster = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect");
  auto strategy = std::make_unique<ParameterServerStrategy>(*cluster);
  auto [counter, registry] = CreateCounter(*strategy);
  auto coordinator = ValueOrDie(ClusterCoordinator::Create(*strategy, registry), "Create");

  absl::Status worker_status = absl::UnknownError("not finished");
  std::thread worker([&] {
    worker_status = RunWorkerNode(
        {spec, FastNetwork(), /*task=*/0, /*threads=*/1, JobDescription{}}, CounterWorker());
  });
  REQUIRE(coordinator->WaitForWorkers(1, absl::Seconds(20)).ok());
  CHECK(coordinator->workers().live_slots == std::vector<int32_t>{0});

  for (int i = 0; i < 20; ++i) REQUIRE(coordinator->Schedule("add_one").ok());
  REQUIRE(coordinator->Join().ok());
  CHECK(ValueOrDie(counter.Read(), "Read").values()[0] == 20.0f);
  CHECK(coordinator->stats().completed == 20);

  NetworkOptions impatient = FastNetwork();
  impatient.connect_timeout = absl::Seconds(1);
  const absl::Status duplicate =
      RunWorkerNode({spec, impatient, 0, 1, JobDescription{}}, CounterWorker());
  CHECK(absl::IsAlreadyExists(duplicate));
  CHECK(duplicate.message().find("another process serves this task") != std::string::npos);
  const absl::Status outside =
      RunWorkerNode({spec, impatient, 7, 1, JobDescription{}}, CounterWorker());
  CHECK(absl::IsInvalidArgument(outside));
  CHECK(outside.message().find("--task=7") != std::string::npos);
  CHECK(coordinator->workers().live_slots == std::vector<int32_t>{0});  // unharmed

  coordinator.reset();  // the coordinator finishes: its worker exits cleanly
  worker.join();
  CHECK(worker_status.ok());
  counter = ShardedVariable();
  strategy.reset();
}

TEST_CASE("networked coordinator: the shards of a coordinator that is gone are dropped, so a "
          "new coordinator creates the same variables") {
  testing::NetworkNode ps_host(FastNetwork());
  const uint16_t ps_port = ps_host.PublishPsNode(0);
  const ClusterSpec spec = SpecFor(ps_port, /*workers=*/1);
  auto first = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect");
  auto strategy = std::make_unique<ParameterServerStrategy>(*first);
  const VariableOptions options = TwoShardW();
  REQUIRE(strategy->CreateVariable(options).ok());
  auto names = [&] { return ShardsHeldBy(ps_host); };
  REQUIRE(names() == std::vector<std::string>{"w/part_0", "w/part_1"});
  const std::vector<caf::actor> shards =
      testing::ShardsHeldBy(ps_host.system(), ps_host.ps_node(0));

  // The coordinator's session ends without a word to the PS, as in a crash: the node forgets
  // its shards, then stops them.
  caf::anon_send_exit(first->actors().session(), caf::exit_reason::kill);
  REQUIRE(testing::AwaitDown(ps_host.system(), shards));
  CHECK(names().empty());

  auto second = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect again");
  ParameterServerStrategy successor(*second);
  ShardedVariable w = ValueOrDie(successor.CreateVariable(options), "the same variable again");
  CHECK(ValueOrDie(w.Read(), "Read").shape() == Shape{6, 2});
  CHECK(names() == std::vector<std::string>{"w/part_0", "w/part_1"});
  strategy.reset();  // the old coordinator's drops leave the new one's shards alone
  first.reset();
  CHECK(names() == std::vector<std::string>{"w/part_0", "w/part_1"});
  CHECK(w.Read().ok());
  w = ShardedVariable();
}

// Note [A restarted coordinator re-adopts its run's shards] (coordinator/ps/strategy.h).
TEST_CASE(
    "networked coordinator: a coordinator restarted for the same run re-adopts the shards "
    "the lost one left, as they are, and drops them for a layout of its own") {
  testing::NetworkNode ps_host(FastNetwork());
  const uint16_t ps_port = ps_host.PublishPsNode(0, kProtocolVersion, 0, std::chrono::seconds(60));
  const ClusterSpec spec = SpecFor(ps_port, /*workers=*/1);
  const std::string run = "0123456789abcdef0123456789abcdef";
  auto names = [&] { return ShardsHeldBy(ps_host); };
  auto first = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect");
  auto strategy = std::make_unique<ParameterServerStrategy>(*first);
  CHECK(ValueOrDie(strategy->placement().ClaimShardsOfRun(run), "claim") == 0);
  ShardedVariable w = ValueOrDie(strategy->CreateVariable(TwoShardW()), "w");
  CHECK(strategy->placement().adopted_shards() == 0);
  const Tensor trained = testing::FromVector(Shape{6, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  REQUIRE(w.Assign(trained).ok());
  // The shards' actor ids (the handles are proxies of each coordinator's own actor system).
  const auto ids = [](const ShardedVariable& variable) {
    std::vector<caf::actor_id> out;
    for (const shard_actor& shard : variable.handle().shards) out.push_back(shard.id());
    return out;
  };
  const std::vector<caf::actor_id> first_shards = ids(w);
  w = ShardedVariable();

  // The coordinator dies without a word to the PS.
  caf::anon_send_exit(first->actors().session(), caf::exit_reason::kill);
  // Another run's coordinator is handed nothing.
  auto stranger = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect a stranger");
  ParameterServerStrategy other_run(*stranger);
  CHECK(ValueOrDie(other_run.placement().ClaimShardsOfRun("another run"), "claim") == 0);

  // The same run's coordinator, started again, is handed both shards — its claim waits for the
  // PS to have seen the first one go — and adopts them: the same actors, the trained values.
  auto second = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect again");
  auto successor = std::make_unique<ParameterServerStrategy>(*second);
  REQUIRE(ValueOrDie(successor->placement().ClaimShardsOfRun(run), "claim") == 2);
  ShardedVariable again = ValueOrDie(successor->CreateVariable(TwoShardW()), "w again");
  CHECK(successor->placement().adopted_shards() == 2);
  CHECK(ids(again) == first_shards);
  CHECK_TENSOR(ValueOrDie(again.Read(), "Read"), trained);
  again = ShardedVariable();

  // A third, planning three shards: the two claimed ones are dropped and three created afresh.
  caf::anon_send_exit(second->actors().session(), caf::exit_reason::kill);
  auto third = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect a third time");
  auto resharded = std::make_unique<ParameterServerStrategy>(*third);
  REQUIRE(ValueOrDie(resharded->placement().ClaimShardsOfRun(run), "claim") == 2);
  VariableOptions three = TwoShardW();
  three.partitioner = ValueOrDie(FixedShardsPartitioner(3));
  ShardedVariable fresh = ValueOrDie(resharded->CreateVariable(three), "w in three shards");
  CHECK(resharded->placement().adopted_shards() == 0);
  CHECK(names() == std::vector<std::string>{"w/part_0", "w/part_1", "w/part_2"});
  CHECK_TENSOR(ValueOrDie(fresh.Read(), "Read"), Tensor(Shape{6, 2}, 0.0f));
  fresh = ShardedVariable();
  resharded.reset();
  CHECK(names().empty());
  successor.reset();
  strategy.reset();
}

TEST_CASE(
    "networked coordinator: a restarted coordinator adopts a run of several variables created in "
    "one call, and drops them for a creation of only some") {
  testing::NetworkNode ps_host(FastNetwork());
  const uint16_t ps_port = ps_host.PublishPsNode(0, kProtocolVersion, 0, std::chrono::seconds(60));
  const ClusterSpec spec = SpecFor(ps_port, /*workers=*/1);
  const std::string run = "fedcba9876543210fedcba9876543210";
  auto names = [&] { return ShardsHeldBy(ps_host); };
  VariableOptions bias;
  bias.name = "b";
  bias.shape = Shape{3};
  const std::vector<VariableOptions> model = {TwoShardW(), bias};
  const Tensor trained = testing::FromVector(Shape{3}, {7, 8, 9});
  auto first = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect");
  auto strategy = std::make_unique<ParameterServerStrategy>(*first);
  CHECK(ValueOrDie(strategy->placement().ClaimShardsOfRun(run), "claim") == 0);
  {
    std::vector<ShardedVariable> made = ValueOrDie(strategy->CreateVariables(model), "create");
    REQUIRE(made[1].Assign(trained).ok());
  }
  caf::anon_send_exit(first->actors().session(), caf::exit_reason::kill);

  // Both variables in one call: all three shards adopted, the trained bias among them.
  auto second = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect again");
  auto successor = std::make_unique<ParameterServerStrategy>(*second);
  REQUIRE(ValueOrDie(successor->placement().ClaimShardsOfRun(run), "claim") == 3);
  {
    std::vector<ShardedVariable> again = ValueOrDie(successor->CreateVariables(model), "again");
    CHECK(successor->placement().adopted_shards() == 3);
    CHECK_TENSOR(ValueOrDie(again[1].Read(), "Read"), trained);
  }
  caf::anon_send_exit(second->actors().session(), caf::exit_reason::kill);

  // One variable alone is not the run's layout: every claimed shard is dropped, the bias too.
  auto third = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect a third time");
  auto partial = std::make_unique<ParameterServerStrategy>(*third);
  REQUIRE(ValueOrDie(partial->placement().ClaimShardsOfRun(run), "claim") == 3);
  ShardedVariable only_b = ValueOrDie(partial->CreateVariable(bias), "b alone");
  CHECK(partial->placement().adopted_shards() == 0);
  CHECK(names() == std::vector<std::string>{"b"});
  CHECK_TENSOR(ValueOrDie(only_b.Read(), "Read"), Tensor(Shape{3}, 0.0f));
  only_b = ShardedVariable();
  partial.reset();
  successor.reset();
  strategy.reset();
}

// A worker "process" of the counter job (RunWorkerNode on a thread), joined to the coordinator.
// Finish() once the coordinator is gone (the worker exits with it) gives the worker's status.
class CounterWorkerThread {
 public:
  CounterWorkerThread(const ClusterSpec& spec, ClusterCoordinator& coordinator)
      : coordinator_(coordinator) {
    thread_ = std::thread([this, spec] {
      status_ = RunWorkerNode({spec, FastNetwork(), /*task=*/0, /*threads=*/1, JobDescription{}},
                              CounterWorker());
    });
    REQUIRE(coordinator.WaitForWorkers(1, absl::Seconds(20)).ok());
  }
  // Runs "add_one" `times` times, to completion.
  void Add(int times) {
    for (int i = 0; i < times; ++i) REQUIRE(coordinator_.Schedule("add_one").ok());
    REQUIRE(coordinator_.Join().ok());
  }
  absl::Status Finish() {
    thread_.join();
    return status_;
  }

 private:
  ClusterCoordinator& coordinator_;
  std::thread thread_;
  absl::Status status_ = absl::UnknownError("not finished");
};

TEST_CASE("networked coordinator: a lost PS is restored from the latest checkpoint onto a node "
          "started again at its address") {
  testing::ScratchDir checkpoints("tessera-recovery");
  auto first_host = std::make_unique<testing::NetworkNode>(FastNetwork());
  const uint16_t ps_port = first_host->PublishPsNode(0);
  const ClusterSpec spec = SpecFor(ps_port, /*workers=*/1);
  auto cluster = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect");
  auto strategy = std::make_unique<ParameterServerStrategy>(*cluster);
  const VariableOptions options = TwoShardW();
  ShardedVariable w = ValueOrDie(strategy->CreateVariable(options), "w");
  const Tensor saved = testing::FromVector(Shape{6, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  REQUIRE(w.Assign(saved).ok());
  CheckpointManager manager(checkpoints.path(), 2);
  REQUIRE(manager.Save(*strategy, 10).ok());
  REQUIRE(w.AssignAdd(saved).ok());  // an update after the checkpoint: lost with the PS

  auto registry = std::make_shared<FunctionRegistry>();
  CoordinatorRun run;
  run.recovery_checkpoints = checkpoints.path();
  run.first_step = 12;
  auto coordinator =
      ValueOrDie(ClusterCoordinator::Create(*strategy, registry, {}, std::move(run)), "Create");

  const ps_node_actor lost = cluster->actors().ps_node(0);
  first_host.reset();  // the PS process dies, as the coordinator's side sees
  REQUIRE(testing::AwaitDown(cluster->actors().system(), lost));
  testing::NetworkNode second_host(FastNetwork());  // and comes back at its address
  REQUIRE(second_host.PublishPsNode(0, kProtocolVersion, ps_port) == ps_port);

  REQUIRE(ClusterCoordinatorTesting::AwaitRecoveries(*coordinator, 1, testing::kWaitLimit));
  REQUIRE(coordinator->Join().ok());  // nothing failed: the restore did not make the run fatal
  const PsRecovery recovery = coordinator->recoveries().at(0);
  CHECK(recovery.ps_task == 0);
  CHECK(recovery.checkpoint_step == 10);
  CHECK(recovery.lost_steps == 2);
  CHECK(recovery.checkpoint == checkpoints.path() + "/ckpt-10");
  // The strategy's handle names the new shards, which hold the checkpoint's values.
  const VariableHandle& moved = strategy->variables().at("w").handle();
  CHECK(moved.shards[0] != w.handle().shards[0]);
  const Tensor restored = ValueOrDie(strategy->variables().at("w").Read(), "Read");
  CHECK(std::vector<float>(restored.values().begin(), restored.values().end()) ==
        std::vector<float>(saved.values().begin(), saved.values().end()));

  coordinator.reset();
  w = ShardedVariable();
  strategy.reset();
}


TEST_CASE("networked coordinator: a lost PS is replaced by a standby, and a worker process "
          "carries on against it") {
  testing::ScratchDir checkpoints("tessera-standby");
  auto ps_host = std::make_unique<testing::NetworkNode>(FastNetwork());
  testing::NetworkNode standby_host(FastNetwork());
  const uint16_t standby_port = standby_host.PublishStandby();
  ClusterSpec spec = SpecFor(ps_host->PublishPsNode(0), /*workers=*/1);
  spec.ps_standby = {NodeAddress{"127.0.0.1", testing::UnusedPort()},  // nobody there
                     NodeAddress{"127.0.0.1", standby_port}};
  auto cluster = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect");
  auto strategy = std::make_unique<ParameterServerStrategy>(*cluster);
  auto [counter, registry] = CreateCounter(*strategy);
  CoordinatorRun run;
  run.recovery_checkpoints = checkpoints.path();
  auto coordinator =
      ValueOrDie(ClusterCoordinator::Create(*strategy, registry, {}, std::move(run)), "Create");
  CounterWorkerThread worker(spec, *coordinator);
  auto add = [&](int times) { worker.Add(times); };
  auto value = [&] {
    return ValueOrDie(strategy->variables().at("counter").Read(), "Read").values()[0];
  };
  add(5);
  REQUIRE(CheckpointManager(checkpoints.path(), 2).Save(*strategy, 5).ok());
  add(3);
  CHECK(value() == 8.0f);

  ps_host.reset();  // the PS machine is gone for good; nothing is restarted at its address
  REQUIRE(ClusterCoordinatorTesting::AwaitRecoveries(*coordinator, 1, testing::kWaitLimit));
  const PsRecovery recovery = coordinator->recoveries().at(0);
  CHECK(recovery.node == absl::StrCat("127.0.0.1:", standby_port));
  CHECK(recovery.checkpoint_step == 5);
  CHECK(cluster->ps_addresses() == std::vector<std::string>{recovery.node});
  CHECK(value() == 5.0f);  // the checkpoint's value, now held by the standby
  CHECK(ValueOrDie(testing::Ask<std::vector<std::string>>(
                       standby_host.system(), standby_host.ps_node(0), list_atom::value),
                   "list") == std::vector<std::string>{"counter"});

  add(4);  // the worker rejoined with the new directory and reaches the standby
  CHECK(value() == 9.0f);
  CHECK(coordinator->stats().completed == 12);

  coordinator.reset();
  CHECK(worker.Finish().ok());
  counter = ShardedVariable();
  strategy.reset();
  cluster.reset();

  // A coordinator started again with the same spec, which still names the lost PS, finds the
  // adopted standby among the standbys.
  NetworkOptions impatient = FastNetwork();
  impatient.connect_timeout = absl::Seconds(1);
  auto again = ValueOrDie(Cluster::Connect(spec, impatient), "Connect again");
  CHECK(again->ps_addresses() == std::vector<std::string>{recovery.node});
  ParameterServerStrategy successor(*again);
  CHECK(successor.CreateVariable(TwoShardW()).ok());
}

// Note [A lost backup is replaced] (coordinator/scheduling/ps_recovery.cc).
TEST_CASE(
    "networked coordinator: a backup that fails while its PS lives is struck and rebuilt, "
    "so the primary's later loss loses no acknowledged update") {
  std::vector<std::unique_ptr<testing::NetworkNode>> hosts;
  ClusterSpec spec = SpecFor(0, /*workers=*/1);
  spec.ps.clear();
  for (int32_t task = 0; task < 3; ++task) {
    hosts.push_back(std::make_unique<testing::NetworkNode>(FastNetwork()));
    spec.ps.push_back(NodeAddress{"127.0.0.1", hosts.back()->PublishPsNode(task)});
  }
  auto cluster = ValueOrDie(Cluster::Connect(spec, FastNetwork()), "Connect");
  auto strategy = std::make_unique<ParameterServerStrategy>(*cluster, Partitioner{}, 2);
  auto [counter, registry] = CreateCounter(*strategy);  // on ps 0, its backup on ps 1
  auto coordinator =
      ValueOrDie(ClusterCoordinator::Create(*strategy, registry, CoordinatorOptions{}), "Create");
  CounterWorkerThread worker(spec, *coordinator);
  auto add = [&](int times) { worker.Add(times); };
  // The counter's copy on ps `task`: its value, or an error when there is none.
  auto copy_on = [&](int32_t task) -> absl::StatusOr<float> {
    testing::NetworkNode& host = *hosts[task];
    TESSERA_ASSIGN_OR_RETURN(shard_actor shard,
                             testing::Ask<shard_actor>(host.system(), host.ps_node(0),
                                                       lookup_atom::value, std::string("counter")));
    TESSERA_ASSIGN_OR_RETURN(ShardOpResult read,
                             testing::Ask<ShardOpResult>(host.system(), shard, ShardOp(ReadOp{})));
    TESSERA_ASSIGN_OR_RETURN(ShardValue value, ResultOf<ReadOp>(std::move(read)));
    return value.value.values()[0];
  };
  add(5);
  REQUIRE(copy_on(1).ok());
  CHECK(*copy_on(1) == 5.0f);

  // The backup alone dies; its node lives on.
  const shard_actor backup =
      ValueOrDie(testing::Ask<shard_actor>(hosts[1]->system(), hosts[1]->ps_node(0),
                                           lookup_atom::value, std::string("counter")),
                 "lookup");
  caf::anon_send_exit(backup, caf::exit_reason::kill);
  add(3);  // acknowledged once the coordinator struck the backup
  // A new backup is rebuilt from the primary, and keeps up with it.
  REQUIRE(ClusterCoordinatorTesting::AwaitRebuilds(*coordinator, 1, testing::kWaitLimit));
  REQUIRE(copy_on(1).ok());
  CHECK(*copy_on(1) == 8.0f);
  add(2);
  CHECK(*copy_on(1) == 10.0f);

  hosts[0].reset();  // the primary's PS dies: the rebuilt backup takes over, holding all 10
  REQUIRE(ClusterCoordinatorTesting::AwaitRecoveries(*coordinator, 1, testing::kWaitLimit));
  const PsRecovery recovery = coordinator->recoveries().at(0);
  CHECK(recovery.ps_task == 0);
  CHECK(recovery.promoted);
  add(1);
  CHECK(ValueOrDie(strategy->variables().at("counter").Read(), "Read").values()[0] == 11.0f);

  coordinator.reset();
  CHECK(worker.Finish().ok());
  counter = ShardedVariable();
  strategy.reset();
}

}  // namespace
}  // namespace tessera
