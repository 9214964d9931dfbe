// Creating shards at once (Note [Creating shards at once], coordinator/ps/strategy.h): the values
// are exactly those of creating one by one and of the LocalTrainer, at any shard count; a failure
// leaves nothing behind; and every create_shard of a model, or of a restarted PS, is in flight at
// the same time — checked through a gate in front of a networked PS node that answers no
// create_shard until it holds all it expects.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <caf/stateful_actor.hpp>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/ps/ps_node_actor.h"
#include "cluster/base/cluster.h"
#include "cluster/base/testing.h"
#include "cluster/network/network.h"
#include "coordinator/ps/strategy.h"
#include "core/model/model.h"
#include "core/training/local_trainer.h"
#include "tessera/partitioner.h"
#include "tessera/workloads/reference_models.h"
#include "tests/cluster/network_test_util.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

ModelSpec SmallRecsys() {
  RecsysModelOptions options;
  options.num_users = 53;
  options.num_items = 21;
  options.embedding_dim = 5;
  options.hidden_units = 6;
  options.seed = 17;
  return ValueOrDie(RecsysModelSpec(options));
}

const OptimizerSpec kAdagrad{"adagrad", {{"learning_rate", 0.1}, {"initial_accumulator_value", 0.1}}};

bool Bitwise(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::equal(a.values().begin(), a.values().end(), b.values().begin(),
                    [](float x, float y) { return std::memcmp(&x, &y, sizeof(float)) == 0; });
}

// Shard `s` of `v`'s optimizer slots and step, asked of the shard itself.
TensorSlice SnapshotOf(Cluster& cluster, const ShardedVariable& v, size_t s) {
  return ValueOrDie(
      testing::AskOp(cluster.actors().system(), v.handle().shards.at(s), SnapshotOp{}), "snapshot");
}

std::vector<std::string> ShardsOn(Cluster& cluster, int32_t task) {
  return ValueOrDie(
      testing::Ask<std::vector<std::string>>(cluster.actors().system(),
                                             cluster.actors().ps_node(task), list_atom::value),
      "list");
}

TEST_CASE("a model's variables created at once hold the LocalTrainer's initial values and "
          "slots, at any shard count") {
  const ModelSpec spec = SmallRecsys();
  const LocalTrainer trainer = ValueOrDie(LocalTrainer::Create(spec, kAdagrad));
  auto model = std::make_shared<const Model>(ValueOrDie(Model::Create(spec)));
  for (int64_t shards : {1, 2, 3, 5}) {
    CAPTURE(shards);
    auto cluster = testing::StartCluster(2, 1);
    ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(shards)));
    ValueOrDie(strategy.CreateModelVariables(model, kAdagrad), "CreateModelVariables");
    // The same variables one at a time, on a strategy of their own, 3 shards each.
    ParameterServerStrategy one_by_one(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
    for (const ParamSpec& param : spec.params) {
      CAPTURE(param.name);
      const ShardedVariable& v = strategy.variables().at(param.name);
      CHECK(v.num_shards() == (param.partitioned ? shards : 1));
      const Tensor value = ValueOrDie(v.Read(), "Read");
      CHECK(Bitwise(value, trainer.variables().at(param.name)));
      VariableOptions options;
      options.name = absl::StrCat("again/", param.name);
      options.shape = param.shape;
      options.initializer = param.initializer;
      options.optimizer = kAdagrad;
      const ShardedVariable again = ValueOrDie(one_by_one.CreateVariable(options), "again");
      CHECK(Bitwise(ValueOrDie(again.Read(), "Read"), value));
      // Every shard's Adagrad accumulator starts at the initial value.
      for (size_t s = 0; s < static_cast<size_t>(v.num_shards()); ++s) {
        const TensorSlice slice = SnapshotOf(*cluster, v, s);
        REQUIRE(slice.slots.size() == 1);
        CHECK(slice.slot_names == std::vector<std::string>{"accumulator"});
        CHECK(std::all_of(slice.slots[0].values().begin(), slice.slots[0].values().end(),
                          [](float a) { return a == 0.1f; }));
        CHECK(slice.step == 0);
      }
    }
  }
}

TEST_CASE("a model whose creation fails on a PS leaves no shard anywhere and the counter as it "
          "was") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
  auto model = std::make_shared<const Model>(ValueOrDie(Model::Create(SmallRecsys())));
  // An optimizer every PS refuses: the error is the first shard's, in placement order.
  const absl::Status bad =
      strategy.CreateModelVariables(model, {"adagrad", {{"learning_rate", -1.0}}}).status();
  CHECK_MESSAGE(absl::IsInvalidArgument(bad), bad.ToString());
  CHECK_MESSAGE(absl::StartsWith(bad.message(), "user_embedding/part_0: "), bad.ToString());
  CHECK(strategy.variables().empty());
  CHECK(ShardsOn(*cluster, 0).empty());
  CHECK(ShardsOn(*cluster, 1).empty());
  // The round-robin counter is back where it was: the model now starts on ps 0.
  ValueOrDie(strategy.CreateModelVariables(model, kAdagrad), "CreateModelVariables");
  CHECK(strategy.variables().at("user_embedding").handle().ps_tasks ==
        std::vector<int32_t>{0, 1, 0});

  // A PS that is gone: the shards created on the other one are dropped again.
  auto second = testing::StartCluster(2, 1);
  ParameterServerStrategy other(*second, ValueOrDie(FixedShardsPartitioner(3)));
  REQUIRE(testing::KillPs(*second, 1).ok());
  const absl::Status gone = other.CreateModelVariables(model, kAdagrad).status();
  CHECK_MESSAGE(absl::IsUnavailable(gone), gone.ToString());
  CHECK_MESSAGE(absl::StrContains(gone.message(), "ps 1"), gone.ToString());
  CHECK(other.variables().empty());
  CHECK(ShardsOn(*second, 0).empty());
}

// -- Every request in flight at once ----------------------------------------------------------

using release_atom = caf::atom_constant<caf::atom("release")>;

template <class T>
struct Type {
  using type = T;
};

// A PS node's stand-in on the network: forwards everything to `node`, except create_shard, which
// it holds until `expected` are held at once (or 5 s passed: a creator sending one at a time
// then fails the check on `max_held` rather than hang).
struct CreateGateState {
  static inline const char* name = "tessera.test.create_gate";
  caf::actor node;
  size_t expected = 0;
  bool open = false;
  struct Held {
    caf::response_promise promise;
    ShardSpec spec;
    caf::actor owner;
  };
  std::vector<Held> held;
  std::shared_ptr<std::atomic<size_t>> max_held;
};

caf::behavior CreateGate(caf::stateful_actor<CreateGateState>* self, caf::actor node,
                         size_t expected, std::shared_ptr<std::atomic<size_t>> max_held) {
  self->state.node = node;
  self->state.expected = expected;
  self->state.max_held = std::move(max_held);
  auto create = [self](const ShardSpec& spec, const caf::actor& owner, caf::response_promise p) {
    self->request(self->state.node, caf::infinite, create_shard_atom::value, spec, owner)
        .then([p](shard_actor& shard) mutable { p.deliver(shard); },
              [p](caf::error& err) mutable { p.deliver(std::move(err)); });
  };
  auto release = [self, create] {
    self->state.open = true;
    for (CreateGateState::Held& h : self->state.held) create(h.spec, h.owner, h.promise);
    self->state.held.clear();
  };
  // Forwards (xs...) to the node and its reply, of type R (void: none), back.
  auto forward = [self](auto reply_type, auto... xs) {
    using R = typename decltype(reply_type)::type;
    caf::response_promise p = self->make_response_promise();
    if constexpr (std::is_void_v<R>) {
      self->request(self->state.node, caf::infinite, xs...)
          .then([p]() mutable { p.deliver(caf::unit); },
                [p](caf::error& err) mutable { p.deliver(std::move(err)); });
    } else {
      self->request(self->state.node, caf::infinite, xs...)
          .then([p](R& reply) mutable { p.deliver(std::move(reply)); },
                [p](caf::error& err) mutable { p.deliver(std::move(err)); });
    }
    return p;
  };
  return {
      [=](create_shard_atom, const ShardSpec& spec, const caf::actor& owner) {
        caf::response_promise p = self->make_response_promise();
        if (self->state.open) {
          create(spec, owner, p);
          return p;
        }
        if (self->state.held.empty()) {
          self->delayed_send(self, std::chrono::seconds(5), release_atom::value);
        }
        self->state.held.push_back({p, spec, owner});
        *self->state.max_held = std::max(self->state.max_held->load(), self->state.held.size());
        if (self->state.held.size() >= self->state.expected) release();
        return p;
      },
      [=](release_atom) {
        if (!self->state.open) release();
      },
      [=](drop_shard_atom a, const std::string& name, const caf::actor& owner) {
        return forward(Type<void>{}, a, name, owner);
      },
      [=](list_atom a) { return forward(Type<std::vector<std::string>>{}, a); },
      [=](adopt_atom a, int32_t task) { return forward(Type<void>{}, a, task); },
      [=](ping_atom a) { return forward(Type<pong_atom>{}, a); },
  };
}

// A PS process: a node behind a create gate, published on `port` (0: any).
struct GatedPs {
  testing::NetworkNode host{NetworkOptions{}};
  ps_node_actor node;
  caf::actor gate;
  std::shared_ptr<std::atomic<size_t>> max_held = std::make_shared<std::atomic<size_t>>(0);
  uint16_t port = 0;

  GatedPs(size_t expected, uint16_t wanted) {
    node = SpawnPsNode(host.system(), 0);
    gate = host.system().spawn(CreateGate, caf::actor_cast<caf::actor>(node), expected, max_held);
    port = ValueOrDie(PublishNode(host.system(), "ps 0", gate, wanted, host.options()), "publish");
  }
  ~GatedPs() {
    caf::anon_send_exit(gate, caf::exit_reason::user_shutdown);
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  }
};

TEST_CASE("every create_shard of a model, and of a restarted PS, is in flight at once") {
  const ModelSpec spec = SmallRecsys();
  auto model = std::make_shared<const Model>(ValueOrDie(Model::Create(spec)));
  // fixed:3 on one PS: 3 + 3 shards of the embeddings, 4 unpartitioned dense parameters.
  constexpr size_t kShards = 10;
  auto first = std::make_unique<GatedPs>(kShards, 0);
  const uint16_t port = first->port;
  ClusterSpec cluster_spec;
  cluster_spec.ps = {NodeAddress{"127.0.0.1", port}};
  cluster_spec.workers = {NodeAddress{"127.0.0.1", 1}};
  cluster_spec.coordinator = NodeAddress{"127.0.0.1", testing::UnusedPort()};
  NetworkOptions network;
  network.connect_timeout = absl::Seconds(10);
  auto cluster = ValueOrDie(Cluster::Connect(cluster_spec, network), "Connect");
  auto strategy =
      std::make_unique<ParameterServerStrategy>(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
  ValueOrDie(strategy->CreateModelVariables(model, kAdagrad), "CreateModelVariables");
  CHECK(first->max_held->load() == kShards);
  const LocalTrainer trainer = ValueOrDie(LocalTrainer::Create(spec, kAdagrad));
  const ShardedVariable& users = strategy->variables().at("user_embedding");
  REQUIRE(users.Assign(Tensor(users.shape(), 2.0f)).ok());

  // The PS process dies and comes back at its address: its shards are created again, at once,
  // freshly initialized.
  const ps_node_actor lost = cluster->actors().ps_node(0);
  first.reset();
  REQUIRE(testing::AwaitDown(cluster->actors().system(), lost));
  GatedPs second(kShards, port);
  REQUIRE(second.port == port);
  REQUIRE(cluster->actors().ReplacePs(0).ok());
  const std::vector<std::string> touched =
      ValueOrDie(strategy->placement().RecreateShardsOn(0), "Recreate");
  CHECK(touched.size() == spec.params.size());
  CHECK(second.max_held->load() == kShards);
  for (const ParamSpec& param : spec.params) {
    CAPTURE(param.name);
    CHECK(Bitwise(ValueOrDie(strategy->variables().at(param.name).Read(), "Read"),
                  trainer.variables().at(param.name)));
  }
  strategy.reset();  // drops the shards from the PS, through the gate
  CHECK(ValueOrDie(testing::Ask<std::vector<std::string>>(second.host.system(), second.node,
                                                          list_atom::value),
                   "list")
            .empty());
}

}  // namespace
}  // namespace tessera
