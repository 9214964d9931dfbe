// ShardClient (actors/ps/shard_client.h): routing, batching, error annotation, and replies that do
// not fit, on the deterministic scheduler.
#include "actors/ps/shard_client.h"

#include <doctest/doctest.h>

#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "actors/ps/ps_node_actor.h"
#include "tests/actors/actor_test_util.h"

namespace tessera {
namespace {

using testing::DeterministicSystem;
using testing::SameTensor;
using testing::TestShardSpec;

// A 10 x 2 variable "emb" in two shards of 5 rows, both on PS node 0.
struct TwoShards {
  DeterministicSystem fixture;
  ps_node_actor node;
  VariableHandle v;

  TwoShards() {
    node = fixture.Track(SpawnPsNode(fixture.system(), 0));
    v.name = "emb";
    v.shape = Shape{10, 2};
    v.layout = *ShardLayout::Make(10, 2);
    for (int32_t s = 0; s < 2; ++s) {
      auto shard = fixture.Ask<shard_actor>(node, create_shard_atom::value,
                                            TestShardSpec(s, 2, 10, 2), caf::actor());
      REQUIRE(shard.ok());
      v.shards.push_back(*shard);
      v.ps_tasks.push_back(0);
    }
  }

  Tensor Block(int64_t shard) { return fixture.AskOp(v.shards[shard], ReadOp{})->value; }

  // Spawns an actor running `body(self)` (which returns the actor's behaviour) and runs the
  // system until it is idle.
  template <class Body>
  caf::actor RunActor(Body body) {
    caf::actor actor = fixture.system().spawn(
        [body](caf::event_based_actor* self, int) -> caf::behavior { return body(self); }, 0);
    fixture.Track(actor);
    fixture.Run();
    return actor;
  }
};

TEST_CASE("a direct client sends each call at once and prefixes a shard's error with op and shard") {
  TwoShards t;
  std::optional<absl::StatusOr<ShardValue>> rows, bad;
  t.RunActor([&](caf::event_based_actor* self) -> caf::behavior {
    ShardClient client(self);
    client.Call<GatherOp>(t.v, 1, GatherOp{{4, 0}}, [&](absl::StatusOr<ShardValue> r) { rows = r; });
    client.Call<GatherOp>(t.v, 1, GatherOp{{5}}, [&](absl::StatusOr<ShardValue> r) { bad = r; });
    return {};
  });
  REQUIRE(rows.has_value());
  REQUIRE(rows->ok());
  const Tensor block = t.Block(1);
  CHECK(SameTensor((*rows)->value, *GatherRows(block, Ids{4, 0})));
  REQUIRE(bad.has_value());
  CHECK(bad->status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(bad->status().message(), "gather on emb/part_1: "));
  CHECK(absl::StrContains(bad->status().message(), "out of range [0, 5)"));
}

TEST_CASE("a batching client holds a node's calls until Flush, then the node applies them") {
  TwoShards t;
  const Tensor before = t.Block(0);
  auto client = std::make_shared<std::unique_ptr<ShardClient>>();
  std::optional<absl::StatusOr<ShardVersion>> assigned;
  std::optional<absl::StatusOr<ShardValue>> read;
  const caf::actor sender = t.RunActor([&](caf::event_based_actor* self) -> caf::behavior {
    *client = std::make_unique<ShardClient>(self, std::vector<ps_node_actor>{t.node});
    (*client)->Call<AssignOp>(t.v, 0, AssignOp{AssignKind::kAdd, Tensor(Shape{5, 2}, 1.0f)},
                              [&](absl::StatusOr<ShardVersion> r) { assigned = r; });
    // Same shard, same batch: applied after the add, in call order.
    (*client)->Call<ReadOp>(t.v, 0, ReadOp{}, [&](absl::StatusOr<ShardValue> r) { read = r; });
    return {[client](int) { (*client)->Flush(); }};
  });
  CHECK(!assigned.has_value());
  CHECK(SameTensor(t.Block(0), before));  // nothing left before the flush

  caf::anon_send(sender, 1);
  t.fixture.Run();
  REQUIRE(assigned.has_value());
  REQUIRE(assigned->ok());
  CHECK((*assigned)->version == 1);
  REQUIRE(read.has_value());
  REQUIRE(read->ok());
  for (int64_t k = 0; k < before.size(); ++k) {
    CHECK((*read)->value.values()[k] == before.values()[k] + 1.0f);
  }
  CHECK(SameTensor(t.Block(0), (*read)->value));
  client->reset();
}

TEST_CASE("a call to a shard that is gone is Unavailable naming the shard and its PS task") {
  TwoShards t;
  caf::anon_send_exit(t.v.shards[1], caf::exit_reason::kill);
  t.fixture.Run();
  std::optional<absl::StatusOr<ShardValue>> read;
  t.RunActor([&](caf::event_based_actor* self) -> caf::behavior {
    ShardClient client(self);
    client.Call<ReadOp>(t.v, 1, ReadOp{}, [&](absl::StatusOr<ShardValue> r) { read = r; });
    return {};
  });
  REQUIRE(read.has_value());
  CHECK(absl::IsUnavailable(read->status()));
  CHECK(absl::StrContains(read->status().message(), "read: shard emb/part_1 on ps 0 is unavailable"));
}

TEST_CASE("a node answering a batch with the wrong number of replies fails each call with DataLoss") {
  TwoShards t;
  const auto liar = caf::actor_cast<ps_node_actor>(t.fixture.Track(t.fixture.system().spawn(
      [](caf::event_based_actor*, int) -> caf::behavior {
        return {[](batch_atom, std::vector<ShardCall>&) { return std::vector<ShardReply>{}; }};
      },
      0)));
  std::vector<absl::Status> outcomes;
  t.RunActor([&](caf::event_based_actor* self) -> caf::behavior {
    ShardClient client(self, {liar});
    for (int64_t s = 0; s < 2; ++s) {
      client.Call<ReadOp>(t.v, s, ReadOp{},
                          [&](absl::StatusOr<ShardValue> r) { outcomes.push_back(r.status()); });
    }
    return {};  // the client flushes as it goes out of scope
  });
  REQUIRE(outcomes.size() == 2);
  for (const absl::Status& s : outcomes) {
    CHECK(s.code() == absl::StatusCode::kDataLoss);
    CHECK(absl::StrContains(s.message(), "ps 0 answered 0 of 2 shard calls"));
  }
}

TEST_CASE("a result of another kind than the op's is DataLoss, not a crash") {
  TwoShards t;
  const auto forger = caf::actor_cast<shard_actor>(t.fixture.Track(t.fixture.system().spawn(
      [](caf::event_based_actor*, int) -> caf::behavior {
        return {[](ShardOp&) { return ShardOpResult(ShardVersion{3}); }};
      },
      0)));
  t.v.shards[0] = forger;
  std::optional<absl::StatusOr<ShardValue>> read;
  t.RunActor([&](caf::event_based_actor* self) -> caf::behavior {
    ShardClient client(self);
    client.Call<ReadOp>(t.v, 0, ReadOp{}, [&](absl::StatusOr<ShardValue> r) { read = r; });
    return {};
  });
  REQUIRE(read.has_value());
  CHECK(read->status().code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StrContains(read->status().message(), "a read was answered with a result of kind 0"));
}

}  // namespace
}  // namespace tessera
