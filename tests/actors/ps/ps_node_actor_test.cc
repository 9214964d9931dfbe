#include "actors/ps/ps_node_actor.h"

#include <doctest/doctest.h>

#include <atomic>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "actors/ps/shard_actor.h"
#include "tests/actors/actor_test_util.h"
#include "tests/captured_log.h"

namespace tessera {
namespace {

using testing::DeterministicSystem;
using testing::SameTensor;
using testing::TestShardSpec;

ps_node_actor SpawnTestNode(DeterministicSystem& fixture, int32_t task) {
  return fixture.Track(SpawnPsNode(fixture.system(), task));
}

shard_actor CreateShard(DeterministicSystem& fixture, const ps_node_actor& node,
                        const ShardSpec& spec, const caf::actor& owner = caf::actor()) {
  auto shard = fixture.Ask<shard_actor>(node, create_shard_atom::value, spec, owner);
  REQUIRE(shard.ok());
  return *shard;
}

// An actor standing for a coordinator's session: a shard owner.
caf::actor SpawnOwner(DeterministicSystem& fixture) {
  // (An argument, unused: CAF 0.17 dereferences a null argument tuple when there is none.)
  return fixture.Track(fixture.system().spawn(
      [](int) -> caf::behavior { return {[](ping_atom) { return pong_atom::value; }}; }, 0));
}

// Monitors `actors` and records each one's exit reason as it goes down. The watcher's handle is
// kept (CAF terminates an actor nobody references) and tracked, so a failing test still ends it.
struct DownWatcher {
  std::vector<caf::error> reasons;
  caf::actor watcher;

  template <class Handle>
  void Watch(DeterministicSystem& fixture, const std::vector<Handle>& actors) {
    const size_t expected = actors.size();
    watcher = fixture.Track(fixture.system().spawn(
        [this, expected](caf::event_based_actor* self,
                         std::vector<Handle> watched) -> caf::behavior {
          for (const Handle& actor : watched) self->monitor(actor);
          self->set_down_handler([this, self, expected](caf::down_msg& msg) {
            reasons.push_back(msg.reason);
            if (reasons.size() == expected) self->quit();
          });
          return {[](int) {}};  // keeps the watcher alive until every down arrives
        },
        actors));
    fixture.Run();
  }
};

TEST_CASE("a PS node creates shards that initialize their own rows, finds and lists them") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 0);
  const shard_actor part0 = CreateShard(fixture, node, TestShardSpec(0, 2, 13, 3));
  const shard_actor part1 = CreateShard(fixture, node, TestShardSpec(1, 2, 13, 3));

  auto names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"emb/part_0", "emb/part_1"});

  auto found = fixture.Ask<shard_actor>(node, lookup_atom::value, std::string("emb/part_1"));
  REQUIRE(found.ok());
  CHECK(*found == part1);

  // Shard 1 of 13 rows over 2 shards holds rows [7, 13) of the variable's initial value.
  const ShardSpec spec = TestShardSpec(1, 2, 13, 3);
  auto whole = MakeInitializedBlock(spec.initializer, spec.full_shape, 0, 13);
  REQUIRE(whole.ok());
  auto value = fixture.AskOp(part1, ReadOp{});
  REQUIRE(value.ok());
  CHECK(SameTensor(value->value, Tensor::Copy(whole->RowBlock(7, 6))));
  auto other = fixture.AskOp(part0, ReadOp{});
  REQUIRE(other.ok());
  CHECK(SameTensor(other->value, Tensor::Copy(whole->RowBlock(0, 7))));
}

TEST_CASE("a PS node refuses a duplicate shard name, a bad spec and an unknown name") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 2);
  CreateShard(fixture, node, TestShardSpec(0, 2, 10, 4));

  auto duplicate =
      fixture.Ask<shard_actor>(node, create_shard_atom::value, TestShardSpec(0, 2, 10, 4),
                               caf::actor());
  CHECK(duplicate.status() == absl::AlreadyExistsError("ps node 2 already holds shard emb/part_0"));

  auto unknown_optimizer = fixture.Ask<shard_actor>(
      node, create_shard_atom::value, TestShardSpec(1, 2, 10, 4, OptimizerSpec{"adamw9", {}}),
      caf::actor());
  CHECK(unknown_optimizer.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::string_view(unknown_optimizer.status().message()).substr(0, 12) == "emb/part_1: ");

  ShardSpec outside = TestShardSpec(1, 2, 10, 4);
  outside.row_offset = 8;
  auto bad_rows = fixture.Ask<shard_actor>(node, create_shard_atom::value, outside, caf::actor());
  CHECK(bad_rows.status().code() == absl::StatusCode::kInvalidArgument);

  auto missing = fixture.Ask<shard_actor>(node, lookup_atom::value, std::string("emb/part_9"));
  CHECK(missing.status() == absl::NotFoundError("ps node 2 holds no shard emb/part_9"));

  auto names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"emb/part_0"});  // the failures added nothing
}

// Note [Shards initialize themselves] (actors/ps/ps_node_actor.h).
TEST_CASE("a PS node answers other requests while the shards it was asked for are built") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 0);
  std::vector<std::string> replies;
  fixture.system().spawn(
      [&replies](caf::event_based_actor* self, ps_node_actor to) {
        for (int32_t k = 0; k < 2; ++k) {
          self->request(to, caf::infinite, create_shard_atom::value, TestShardSpec(k, 2, 64, 8),
                        caf::actor())
              .then([&replies, k](shard_actor&) { replies.push_back(absl::StrCat("created ", k)); },
                    [&replies](caf::error&) { replies.push_back("create failed"); });
        }
        self->request(to, caf::infinite, ping_atom::value)
            .then([&replies](pong_atom) { replies.push_back("pong"); });
      },
      node);
  fixture.Run();
  // The node took both creates and the ping before either shard was built: the ping, sent last,
  // is answered first. (A node building its shards itself would answer in order.)
  CHECK(replies == std::vector<std::string>{"pong", "created 0", "created 1"});
  auto names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"emb/part_0", "emb/part_1"});
}

TEST_CASE("a shard whose memory cannot be had is ResourceExhausted, and the node carries on") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 1);
  // 2^40 rows of 1024 floats: 4 PiB, a valid spec beyond any address space (whatever the
  // kernel's overcommit policy, the allocation fails rather than the machine).
  const ShardSpec huge = TestShardSpec(0, 1, int64_t{1} << 40, 1024);
  auto refused = fixture.Ask<shard_actor>(node, create_shard_atom::value, huge, caf::actor());
  CHECK(refused.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StartsWith(refused.status().message(), "emb: cannot allocate"));
  // The name is free again and the node serves on.
  auto names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(names->empty());
  const shard_actor small = CreateShard(fixture, node, TestShardSpec(0, 1, 4, 2));
  CHECK(fixture.AskOp(small, ReadOp{}).ok());
}

// Note [One request per PS node] (actors/ps/shard_client.h).
TEST_CASE("a PS node runs a batch's calls through their shards in order and answers each") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 1);
  const OptimizerSpec sgd{"sgd", {{"learning_rate", 0.5}}};
  const shard_actor part0 = CreateShard(fixture, node, TestShardSpec(0, 2, 6, 2, sgd));
  const shard_actor part1 = CreateShard(fixture, node, TestShardSpec(1, 2, 6, 2, sgd));
  const Tensor initial0 = fixture.AskOp(part0, ReadOp{})->value;
  const Tensor initial1 = fixture.AskOp(part1, ReadOp{})->value;
  REQUIRE(initial1.shape() == Shape{3, 2});

  auto to = [](const shard_actor& shard, ShardOp op) { return ShardCall{shard.id(), std::move(op)}; };
  const std::vector<ShardCall> calls = {
      to(part1, GatherOp{{2, 0}}),
      to(part0, AssignOp{AssignKind::kAdd, Tensor(Shape{3, 2}, 1.0f)}),
      to(part0, ReadOp{}),  // after the add: one shard serves its calls in order
      to(part0, ApplyDenseGradientOp{Tensor(Shape{3, 2}, 2.0f)}),
      to(part1, ApplySparseGradientOp{IndexedSlices{Ids{1}, Tensor(Shape{1, 2}, 4.0f)}}),
      to(part1, ScatterRowsOp{ScatterOp::kUpdate, IndexedSlices{Ids{0}, Tensor(Shape{1, 2}, 9.0f)}}),
      ShardCall{part0.id() + part1.id() + 1, ReadOp{}},  // no shard of this node
      to(part1, GatherOp{{3}}),  // out of the shard's 3 rows: its own error
      to(part0, InfoOp{}),
  };
  auto replies = fixture.Ask<std::vector<ShardReply>>(node, batch_atom::value, calls);
  REQUIRE(replies.ok());
  REQUIRE(replies->size() == calls.size());
  const std::vector<ShardReply>& r = *replies;
  auto value_of = [&r](size_t k) { return std::get<ShardValue>(r[k].result); };
  auto version_of = [&r](size_t k) { return std::get<ShardVersion>(r[k].result).version; };

  REQUIRE(!r[0].error);
  CHECK(SameTensor(value_of(0).value, Tensor::FromVector(Shape{2, 2},
                                                         {initial1.row(2)[0], initial1.row(2)[1],
                                                          initial1.row(0)[0], initial1.row(0)[1]})
                                          .value()));
  CHECK(version_of(1) == 1);
  REQUIRE(!r[2].error);
  for (int64_t k = 0; k < initial0.size(); ++k) {
    CHECK(value_of(2).value.values()[k] == initial0.values()[k] + 1.0f);
  }
  CHECK(version_of(3) == 2);
  CHECK(version_of(4) == 1);
  CHECK(version_of(5) == 2);
  CHECK(std::get<ShardInfo>(r[8].result).name == "emb/part_0");
  CHECK(std::get<ShardInfo>(r[8].result).version == 2);
  CHECK(ErrorToStatus(r[6].error).code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(ErrorToStatus(r[6].error).message(),
                          "ps node 1 holds no shard with actor id"));
  CHECK(ErrorToStatus(r[7].error).code() == absl::StatusCode::kInvalidArgument);

  // Each call did what it does sent alone: sgd took 0.5 * gradient off the values (exact in
  // float: 0.5 * 2 and 0.5 * 4 are).
  const Tensor after0 = fixture.AskOp(part0, ReadOp{})->value;
  for (int64_t k = 0; k < after0.size(); ++k) {
    CHECK(after0.values()[k] == (initial0.values()[k] + 1.0f) - 1.0f);
  }
  const Tensor after1 = fixture.AskOp(part1, ReadOp{})->value;
  CHECK(after1.row(0)[0] == 9.0f);
  CHECK(after1.row(1)[1] == initial1.row(1)[1] - 2.0f);
  CHECK(after1.row(2)[0] == initial1.row(2)[0]);

  auto empty =
      fixture.Ask<std::vector<ShardReply>>(node, batch_atom::value, std::vector<ShardCall>{});
  REQUIRE(empty.ok());
  CHECK(empty->empty());
}

TEST_CASE("a batch naming a dropped shard gets Unavailable for it, not a reply from a newer one") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 0);
  const shard_actor old_shard = CreateShard(fixture, node, TestShardSpec(0, 1, 4, 2));
  REQUIRE(fixture.AskVoid(node, drop_shard_atom::value, std::string("emb"), caf::actor()).ok());
  const shard_actor new_shard = CreateShard(fixture, node, TestShardSpec(0, 1, 4, 2));
  ShardCall call{old_shard.id(), ReadOp{}};
  auto replies =
      fixture.Ask<std::vector<ShardReply>>(node, batch_atom::value, std::vector<ShardCall>{call});
  REQUIRE(replies.ok());
  REQUIRE(replies->size() == 1);
  CHECK(ErrorToStatus((*replies)[0].error).code() == absl::StatusCode::kUnavailable);
  call.shard = new_shard.id();
  replies =
      fixture.Ask<std::vector<ShardReply>>(node, batch_atom::value, std::vector<ShardCall>{call});
  REQUIRE(replies.ok());
  CHECK(!(*replies)[0].error);
  CHECK(std::get<ShardValue>((*replies)[0].result).value.shape() == Shape{4, 2});
}

TEST_CASE("a PS node reports its shard count, bytes and the shards' versions") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 1);
  auto empty = fixture.Ask<PsNodeStats>(node, stats_atom::value);
  REQUIRE(empty.ok());
  CHECK(empty->task == 1);
  CHECK(empty->num_shards == 0);
  CHECK(empty->bytes == 0);

  const shard_actor a = CreateShard(fixture, node, TestShardSpec(0, 3, 32, 4));
  CreateShard(fixture, node, TestShardSpec(2, 3, 32, 4, OptimizerSpec{"sgd", {}}));
  REQUIRE(fixture
              .AskOp(a, ScatterRowsOp{ScatterOp::kAdd, IndexedSlices{Ids{0}, Tensor(Shape{1, 4}, 1.0f)}})
              .ok());
  auto stats = fixture.Ask<PsNodeStats>(node, stats_atom::value);
  REQUIRE(stats.ok());
  CHECK(stats->task == 1);
  CHECK(stats->num_shards == 2);
  REQUIRE(stats->shards.size() == 2);
  CHECK(stats->shards[0].name == "emb/part_0");
  CHECK(stats->shards[0].version == 1);
  CHECK(stats->shards[1].name == "emb/part_2");
  CHECK(stats->shards[1].version == 0);
  // 11 + 10 rows of 4 floats; SGD keeps no slots.
  CHECK(stats->bytes == (11 + 10) * 4 * 4);
  CHECK(stats->shards[0].updates == 1);
  CHECK(stats->shards[0].rows_touched == 1);
  REQUIRE(stats->shards[0].hottest_rows.size() == 1);  // 5 asked for by default, 1 updated
  CHECK(stats->shards[0].hottest_rows[0].row == 0);
  CHECK(stats->shards[0].hottest_rows[0].updates == 1);
  CHECK(stats->shards[1].hottest_rows.empty());

  // Shard 2 holds rows [22, 32): its hottest rows are global ids, as many as asked for.
  const shard_actor c = *fixture.Ask<shard_actor>(node, lookup_atom::value, std::string("emb/part_2"));
  REQUIRE(fixture
              .AskOp(c, ApplySparseGradientOp{IndexedSlices{Ids{3, 3, 3, 1, 1, 9},
                                                            Tensor(Shape{6, 4}, 1.0f)}})
              .ok());
  auto asked = fixture.Ask<PsNodeStats>(node, stats_atom::value, int32_t{2});
  REQUIRE(asked.ok());
  REQUIRE(asked->shards.size() == 2);
  const ShardInfo& part_2 = asked->shards[1];
  CHECK(part_2.version == 1);
  CHECK(part_2.updates == 1);
  CHECK(part_2.rows_touched == 3);
  REQUIRE(part_2.hottest_rows.size() == 2);
  CHECK(part_2.hottest_rows[0].row == 25);
  CHECK(part_2.hottest_rows[0].updates == 3);
  CHECK(part_2.hottest_rows[1].row == 23);
  CHECK(part_2.hottest_rows[1].updates == 2);

  auto pong = fixture.Ask<pong_atom>(node, ping_atom::value);
  CHECK(pong.ok());
}

TEST_CASE("killing a PS node takes all its shards down with it") {
  for (const caf::exit_reason reason : {caf::exit_reason::kill, caf::exit_reason::user_shutdown}) {
    CAPTURE(caf::to_string(reason));
    DeterministicSystem fixture;
    const ps_node_actor node = SpawnTestNode(fixture, 0);
    std::vector<shard_actor> shards;
    for (int32_t i = 0; i < 3; ++i) {
      shards.push_back(CreateShard(fixture, node, TestShardSpec(i, 3, 30, 2)));
    }
    DownWatcher watcher;
    watcher.Watch(fixture, shards);
    CHECK(watcher.reasons.empty());

    caf::anon_send_exit(node, reason);
    fixture.Run();
    REQUIRE(watcher.reasons.size() == shards.size());
    for (const caf::error& down : watcher.reasons) CHECK(down == caf::make_error(reason));
    auto read = fixture.AskOp(shards[0], ReadOp{});
    CHECK(read.status().code() == absl::StatusCode::kUnavailable);
  }
}

TEST_CASE("a shard that dies on its own leaves its node running and frees its name") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 0);
  const shard_actor doomed = CreateShard(fixture, node, TestShardSpec(0, 2, 8, 2));
  const shard_actor survivor = CreateShard(fixture, node, TestShardSpec(1, 2, 8, 2));
  caf::anon_send_exit(doomed, caf::exit_reason::kill);
  fixture.Run();

  CHECK(fixture.Ask<pong_atom>(node, ping_atom::value).ok());
  auto names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"emb/part_1"});
  CHECK(fixture.AskOp(survivor, ReadOp{}).ok());
  // The name can be used again, e.g. to restore the lost shard.
  CHECK(fixture.Ask<shard_actor>(node, create_shard_atom::value, TestShardSpec(0, 2, 8, 2),
                                 caf::actor())
            .ok());
}

TEST_CASE("dropping a shard stops it and leaves the node and its other shards running") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 0);
  const shard_actor dropped = CreateShard(fixture, node, TestShardSpec(0, 2, 8, 2));
  const shard_actor kept = CreateShard(fixture, node, TestShardSpec(1, 2, 8, 2));
  DownWatcher watcher;
  watcher.Watch(fixture, std::vector<shard_actor>{dropped});

  CHECK(fixture.AskVoid(node, drop_shard_atom::value, std::string("emb/part_0"),
                        caf::actor()).ok());
  fixture.Run();
  REQUIRE(watcher.reasons.size() == 1);
  CHECK(watcher.reasons[0] == caf::make_error(caf::exit_reason::user_shutdown));
  CHECK(fixture.Ask<pong_atom>(node, ping_atom::value).ok());
  CHECK(fixture.AskOp(kept, ReadOp{}).ok());
  CHECK(fixture.AskVoid(node, drop_shard_atom::value, std::string("emb/part_0"),
                        caf::actor()).code() ==
        absl::StatusCode::kNotFound);
}

TEST_CASE("a PS node drops the shards of an owner that goes down, and keeps the others") {
  DeterministicSystem fixture;
  const ps_node_actor node = SpawnTestNode(fixture, 0);
  const caf::actor gone = SpawnOwner(fixture);
  const caf::actor alive = SpawnOwner(fixture);
  const shard_actor owned = CreateShard(fixture, node, TestShardSpec(0, 3, 9, 2), gone);
  CreateShard(fixture, node, TestShardSpec(1, 3, 9, 2), gone);
  const shard_actor other = CreateShard(fixture, node, TestShardSpec(2, 3, 9, 2), alive);
  ShardSpec unowned_spec = TestShardSpec(0, 1, 4, 2);
  unowned_spec.variable = "bias";
  const shard_actor unowned = CreateShard(fixture, node, unowned_spec);
  DownWatcher watcher;
  watcher.Watch(fixture, std::vector<shard_actor>{owned});

  caf::anon_send_exit(gone, caf::exit_reason::kill);
  fixture.Run();
  REQUIRE(watcher.reasons.size() == 1);
  CHECK(watcher.reasons[0] == caf::make_error(caf::exit_reason::user_shutdown));
  auto names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"bias", "emb/part_2"});
  CHECK(fixture.AskOp(other, ReadOp{}).ok());
  CHECK(fixture.AskOp(unowned, ReadOp{}).ok());
  // The names are free again: a new coordinator creates the same variable.
  const caf::actor successor = SpawnOwner(fixture);
  CHECK(fixture.Ask<shard_actor>(node, create_shard_atom::value, TestShardSpec(0, 3, 9, 2),
                                 successor)
            .ok());
  // A dropped shard forgets its owner: the owner going down later touches nothing else.
  // Only its owner may drop a shard.
  CHECK(fixture.AskVoid(node, drop_shard_atom::value, std::string("emb/part_2"), successor)
            .code() == absl::StatusCode::kFailedPrecondition);
  CHECK(fixture.AskVoid(node, drop_shard_atom::value, std::string("emb/part_2"), alive).ok());
  caf::anon_send_exit(alive, caf::exit_reason::kill);
  fixture.Run();
  names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"bias", "emb/part_0"});
}

TEST_CASE("a lost owner's shards are kept for the lease, give way to a new owner, then go") {
  DeterministicSystem fixture;
  const ps_node_actor node =
      fixture.Track(SpawnPsNode(fixture.system(), 0, std::chrono::seconds(30)));
  const caf::actor lost = SpawnOwner(fixture);
  const caf::actor stranger = SpawnOwner(fixture);
  const shard_actor kept = CreateShard(fixture, node, TestShardSpec(0, 3, 9, 2), lost);
  CreateShard(fixture, node, TestShardSpec(1, 3, 9, 2), lost);
  CreateShard(fixture, node, TestShardSpec(2, 3, 9, 2), lost);
  using Held = std::vector<HeldShard>;
  // The owner, alive, gets its shards back by name, with their specs; anybody else gets none.
  absl::StatusOr<Held> held = fixture.Ask<Held>(node, reclaim_atom::value, lost, std::string());
  REQUIRE(held.ok());
  REQUIRE(held->size() == 3);
  CHECK(held->at(0).name == "emb/part_0");
  CHECK(held->at(0).shard == kept);
  CHECK(held->at(0).spec.row_offset == 0);
  CHECK(held->at(2).spec.row_offset == 6);
  CHECK_FALSE(held->at(0).backed_up);
  CHECK(fixture.Ask<Held>(node, reclaim_atom::value, stranger, std::string())->empty());

  caf::anon_send_exit(lost, caf::exit_reason::kill);
  fixture.Run();
  fixture.AdvanceTime(std::chrono::seconds(29));
  auto names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(names->size() == 3);                  // kept for the lease
  CHECK(fixture.AskOp(kept, ReadOp{}).ok());  // and still served
  // A new coordinator creating one of the names supersedes the orphan.
  CHECK(
      fixture.Ask<shard_actor>(node, create_shard_atom::value, TestShardSpec(1, 3, 9, 2), stranger)
          .ok());
  fixture.AdvanceTime(std::chrono::seconds(2));  // the lease is over
  names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"emb/part_1"});  // the new owner's alone
}

TEST_CASE("a standby PS node is adopted as the lost task once, and a PS node keeps its own task") {
  DeterministicSystem fixture;
  const ps_node_actor standby = SpawnTestNode(fixture, kStandbyTask);
  CHECK(fixture.AskVoid(standby, adopt_atom::value, -3).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(fixture.AskVoid(standby, adopt_atom::value, 1).ok());
  CHECK(fixture.AskVoid(standby, adopt_atom::value, 1).ok());  // asked again: still ps 1
  const absl::Status taken = fixture.AskVoid(standby, adopt_atom::value, 0);
  CHECK(taken.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(taken.message().find("ps node 1 is not a standby: it cannot serve as ps 0") !=
        std::string::npos);
  // Adopted, it is that task's node: its errors say so.
  CreateShard(fixture, standby, TestShardSpec(0, 2, 8, 2));
  CHECK(fixture.Ask<shard_actor>(standby, create_shard_atom::value, TestShardSpec(0, 2, 8, 2),
                                 caf::actor())
            .status() == absl::AlreadyExistsError("ps node 1 already holds shard emb/part_0"));

  const ps_node_actor ps2 = SpawnTestNode(fixture, 2);
  CHECK(fixture.AskVoid(ps2, adopt_atom::value, 2).ok());  // restarted at its address
  CHECK(fixture.AskVoid(ps2, adopt_atom::value, 0).code() ==
        absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST_CASE("a PS node gives its shard a backup on another node, refusing an unknown name") {
  DeterministicSystem fixture;
  const ps_node_actor primary_node = fixture.Track(SpawnPsNode(fixture.system(), 0));
  const ps_node_actor backup_node = fixture.Track(SpawnPsNode(fixture.system(), 1));
  const ShardSpec spec = testing::TestShardSpec(0, 1, 6, 2, OptimizerSpec{"sgd", {}});
  const shard_actor primary =
      *fixture.Ask<shard_actor>(primary_node, create_shard_atom::value, spec, caf::actor());
  const shard_actor backup =
      *fixture.Ask<shard_actor>(backup_node, create_shard_atom::value, spec, caf::actor());
  const std::string name = ShardName(spec.variable, spec.shard_index, spec.num_shards);
  CHECK(fixture
            .Ask<int64_t>(primary_node, backup_atom::value, std::string("nope"),
                          caf::actor_cast<caf::actor>(backup), std::string(), false)
            .status()
            .code() == absl::StatusCode::kNotFound);
  // In process: no address, nothing to connect to.
  REQUIRE(fixture
              .Ask<int64_t>(primary_node, backup_atom::value, name,
                            caf::actor_cast<caf::actor>(backup), std::string(), false)
              .ok());
  REQUIRE(fixture.AskOp(primary, ApplyDenseGradientOp{Tensor(Shape{6, 2}, 1.0f)}).ok());
  auto copied = fixture.AskOp(backup, ReadOp{});
  REQUIRE(copied.ok());
  CHECK(SameTensor(copied->value, fixture.AskOp(primary, ReadOp{})->value));
  CHECK(copied->version == 1);
}

TEST_CASE("a shard's lost backup is told to its owner, and its changes wait for the owner") {
  DeterministicSystem fixture;
  const ps_node_actor primary_node = SpawnTestNode(fixture, 0);
  const ps_node_actor backup_node = SpawnTestNode(fixture, 1);
  // An owner that records the losses it hears of.
  std::vector<std::pair<std::string, caf::actor>> heard;
  const caf::actor owner = fixture.Track(fixture.system().spawn(
      [&heard](int) -> caf::behavior {
        return {[&heard](backup_lost_atom, const std::string& name, const caf::actor& backup) {
          heard.emplace_back(name, backup);
        }};
      },
      0));
  const ShardSpec spec = TestShardSpec(0, 1, 6, 2, OptimizerSpec{"sgd", {}});
  const std::string name = "emb";
  const shard_actor primary = CreateShard(fixture, primary_node, spec, owner);
  const shard_actor backup = CreateShard(fixture, backup_node, spec);
  const caf::actor backup_handle = caf::actor_cast<caf::actor>(backup);
  REQUIRE(fixture
              .Ask<int64_t>(primary_node, backup_atom::value, name, backup_handle, std::string(),
                            false)
              .ok());
  using Held = std::vector<HeldShard>;
  REQUIRE(
      fixture.Ask<Held>(primary_node, reclaim_atom::value, owner, std::string())->at(0).backed_up);
  // A report that does not come from the shard itself is ignored.
  caf::anon_send(primary_node, backup_lost_atom::value, name, backup_handle);
  fixture.Run();
  CHECK(heard.empty());
  CHECK(
      fixture.Ask<Held>(primary_node, reclaim_atom::value, owner, std::string())->at(0).backed_up);

  caf::anon_send_exit(backup, caf::exit_reason::kill);
  fixture.Run();
  REQUIRE(heard.size() == 1);
  CHECK(heard[0].first == name);
  CHECK(heard[0].second == backup_handle);
  CHECK_FALSE(
      fixture.Ask<Held>(primary_node, reclaim_atom::value, owner, std::string())->at(0).backed_up);
  // The change is applied but not acknowledged until the owner answers: no backup now.
  std::optional<absl::StatusOr<ShardOpResult>> change;
  fixture.system().spawn(
      [&change, primary](caf::event_based_actor* self, int) {
        self->request(primary, caf::infinite,
                      ShardOp(ApplyDenseGradientOp{Tensor(Shape{6, 2}, 1.0f)}))
            .then([&change](ShardOpResult& r) { change = std::move(r); },
                  [&change](caf::error& e) { change = ErrorToStatus(e); });
      },
      0);
  fixture.Run();
  CHECK(!change.has_value());
  REQUIRE(fixture
              .Ask<int64_t>(primary_node, backup_atom::value, name, caf::actor(), std::string(),
                            false)
              .ok());
  REQUIRE(change.has_value());
  CHECK(change->ok());
  CHECK(fixture.AskOp(primary, ApplyDenseGradientOp{Tensor(Shape{6, 2}, 1.0f)}).ok());
}

TEST_CASE("a PS node connects to the backup's node first, and a failed connection is the error") {
  caf::actor_system_config config;
  caf::actor_system system(config);
  std::vector<std::string> dialled;
  std::mutex mu;
  auto connector = [&](const std::string& address) -> absl::StatusOr<caf::actor> {
    std::lock_guard<std::mutex> lock(mu);
    dialled.push_back(address);
    if (address == "10.0.0.9:1") return absl::UnavailableError("cannot reach 10.0.0.9:1");
    return caf::actor();  // connected; no link (the backup is reached directly)
  };
  const ps_node_actor node = SpawnPsNode(system, 0, caf::timespan{0}, connector);
  const ps_node_actor other = SpawnPsNode(system, 1);
  const ShardSpec spec = testing::TestShardSpec(0, 1, 4, 2);
  caf::scoped_actor self(system);
  shard_actor backup;
  self->request(node, std::chrono::seconds(10), create_shard_atom::value, spec, caf::actor())
      .receive([](shard_actor&) {}, [](caf::error& err) { FAIL(err); });
  self->request(other, std::chrono::seconds(10), create_shard_atom::value, spec, caf::actor())
      .receive([&](shard_actor& s) { backup = s; }, [](caf::error& err) { FAIL(err); });
  const std::string name = ShardName(spec.variable, spec.shard_index, spec.num_shards);
  absl::Status reached;
  self->request(node, std::chrono::seconds(10), backup_atom::value, name,
                caf::actor_cast<caf::actor>(backup), std::string("127.0.0.1:7"), false)
      .receive([](int64_t) {}, [&](caf::error& err) { reached = ErrorToStatus(err); });
  CHECK(reached.ok());
  absl::Status refused;
  self->request(node, std::chrono::seconds(10), backup_atom::value, name,
                caf::actor_cast<caf::actor>(backup), std::string("10.0.0.9:1"), false)
      .receive([](int64_t) {}, [&](caf::error& err) { refused = ErrorToStatus(err); });
  CHECK(refused.code() == absl::StatusCode::kUnavailable);
  CHECK(refused.message().find("10.0.0.9:1") != std::string::npos);
  {
    std::lock_guard<std::mutex> lock(mu);
    CHECK(dialled == std::vector<std::string>{"127.0.0.1:7", "10.0.0.9:1"});
  }
  self->send_exit(node, caf::exit_reason::user_shutdown);
  self->send_exit(other, caf::exit_reason::user_shutdown);
}

// Note [A node's forwards travel together] (actors/ps/forward_link.h): across processes a node's
// shards send their changes to the backups' node through the node's link to it, as batches.
TEST_CASE("a PS node's shards send their changes to the backups' node through its forward link") {
  caf::actor_system_config config;
  caf::actor_system system(config);
  const ps_node_actor backup_node = SpawnPsNode(system, 1);
  // The backups' node as the connector gives it: a stand-in that counts what it passes on.
  std::atomic<int> batches{0};
  std::atomic<int> calls_passed{0};
  const caf::actor relay = system.spawn(
      [&batches, &calls_passed, backup_node](caf::event_based_actor* self, int) -> caf::behavior {
        return {[&batches, &calls_passed, self, backup_node](batch_atom,
                                                             std::vector<ShardCall>& calls) {
          ++batches;
          calls_passed += static_cast<int>(calls.size());
          return self->delegate(backup_node, batch_atom::value, std::move(calls));
        }};
      },
      0);
  auto connector = [relay](const std::string&) -> absl::StatusOr<caf::actor> { return relay; };
  const ps_node_actor node = SpawnPsNode(system, 0, caf::timespan{0}, connector);
  caf::scoped_actor self(system);
  auto create = [&](const ps_node_actor& on, const ShardSpec& spec) {
    shard_actor shard;
    self->request(on, std::chrono::seconds(10), create_shard_atom::value, spec, caf::actor())
        .receive([&](shard_actor& s) { shard = s; }, [](caf::error& err) { FAIL(err); });
    return shard;
  };
  std::vector<shard_actor> primaries;
  std::vector<shard_actor> backups;
  for (int32_t k = 0; k < 3; ++k) {
    const ShardSpec spec = TestShardSpec(k, 3, 12, 2, testing::Adagrad());
    primaries.push_back(create(node, spec));
    backups.push_back(create(backup_node, spec));
    self->request(node, std::chrono::seconds(10), backup_atom::value,
                  ShardName(spec.variable, spec.shard_index, spec.num_shards),
                  caf::actor_cast<caf::actor>(backups.back()), std::string("127.0.0.1:7"), false)
        .receive([](int64_t) {}, [](caf::error& err) { FAIL(err); });
  }
  // One request to the node, as a worker's: a gradient for each shard.
  std::vector<ShardCall> calls;
  for (int32_t k = 0; k < 3; ++k) {
    calls.push_back(ShardCall{primaries[k].id(),
                              ApplySparseGradientOp{IndexedSlices{
                                  Ids{0, 3, 3}, testing::Iota(Shape{3, 2}, 0.5f * (k + 1))}}});
  }
  self->request(node, std::chrono::seconds(10), batch_atom::value, std::move(calls))
      .receive(
          [](std::vector<ShardReply>& replies) {
            REQUIRE(replies.size() == 3);
            for (const ShardReply& reply : replies) CHECK(!reply.error);
          },
          [](caf::error& err) { FAIL(err); });
  // Acknowledged, so every backup has its change, and each went through the link.
  CHECK(calls_passed == 3);
  CHECK(batches >= 1);
  CHECK(batches <= 3);
  for (int32_t k = 0; k < 3; ++k) {
    auto read = [&](const shard_actor& shard) {
      ShardValue value;
      self->request(shard, std::chrono::seconds(10), ShardOp(ReadOp{}))
          .receive([&](ShardOpResult& r) { value = std::get<ShardValue>(std::move(r)); },
                   [](caf::error& err) { FAIL(err); });
      return value;
    };
    const ShardValue primary = read(primaries[k]);
    const ShardValue backup = read(backups[k]);
    CHECK(primary.version == 1);
    CHECK(backup.version == 1);
    CHECK(SameTensor(primary.value, backup.value));
  }
  self->send_exit(node, caf::exit_reason::user_shutdown);
  self->send_exit(backup_node, caf::exit_reason::user_shutdown);
  self->send_exit(relay, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

// Sends reclaim_atom (owner, run) to `node` and runs the system; the answer lands in the result
// when it comes (the system runs again later: AdvanceTime, Run).
std::shared_ptr<std::optional<absl::StatusOr<std::vector<HeldShard>>>> ClaimLater(
    DeterministicSystem& fixture, const ps_node_actor& node, const caf::actor& owner,
    const std::string& run) {
  auto out = std::make_shared<std::optional<absl::StatusOr<std::vector<HeldShard>>>>();
  fixture.system().spawn(
      [out, owner, run](caf::event_based_actor* self, ps_node_actor to) {
        self->request(to, caf::infinite, reclaim_atom::value, owner, run)
            .then([out](std::vector<HeldShard>& held) { *out = std::move(held); },
                  [out](caf::error& err) { *out = ErrorToStatus(err); });
      },
      node);
  fixture.Run();
  return out;
}

// Note [A restarted coordinator re-adopts its run's shards] (coordinator/ps/strategy.h), the node's
// part: the run's orphans move to the new owner with their state; nothing else does.
TEST_CASE("a coordinator of the same run takes over its lost predecessor's shards as they are") {
  DeterministicSystem fixture;
  const ps_node_actor node =
      fixture.Track(SpawnPsNode(fixture.system(), 0, std::chrono::seconds(30)));
  const ps_node_actor backup_node = fixture.Track(SpawnPsNode(fixture.system(), 1));
  const caf::actor first = SpawnOwner(fixture);
  const caf::actor other_run = SpawnOwner(fixture);
  using Held = std::vector<HeldShard>;
  const std::string run = "0123456789abcdef0123456789abcdef";
  // Each coordinator names its run before it creates anything.
  REQUIRE(fixture.Ask<Held>(node, reclaim_atom::value, first, run)->empty());
  REQUIRE(fixture.Ask<Held>(node, reclaim_atom::value, other_run, std::string("another"))->empty());
  const ShardSpec spec = TestShardSpec(0, 2, 8, 2, OptimizerSpec{"sgd", {}});
  const shard_actor trained = CreateShard(fixture, node, spec, first);
  const shard_actor backup = CreateShard(fixture, backup_node, spec);
  REQUIRE(fixture
              .Ask<int64_t>(node, backup_atom::value, std::string("emb/part_0"),
                            caf::actor_cast<caf::actor>(backup), std::string(), false)
              .ok());
  CreateShard(fixture, node, TestShardSpec(1, 2, 8, 2), first);
  REQUIRE(fixture.AskOp(trained, ApplyDenseGradientOp{Tensor(Shape{4, 2}, 1.0f)}).ok());
  const Tensor value = fixture.AskOp(trained, ReadOp{})->value;

  // A coordinator of the same run, while the first is alive, waits for it to go, up to
  // kClaimPatience; the first lives on, so it then gets nothing of it.
  const caf::actor early = SpawnOwner(fixture);
  auto early_claim = ClaimLater(fixture, node, early, run);
  CHECK_FALSE(early_claim->has_value());
  fixture.AdvanceTime(kClaimPatience - std::chrono::seconds(1));
  CHECK_FALSE(early_claim->has_value());
  fixture.AdvanceTime(std::chrono::seconds(1));
  REQUIRE(early_claim->has_value());
  REQUIRE((*early_claim)->ok());
  CHECK((**early_claim)->empty());

  caf::anon_send_exit(first, caf::exit_reason::kill);
  fixture.Run();
  fixture.AdvanceTime(std::chrono::seconds(20));  // within the lease
  // Another run's coordinator gets nothing; the restarted one of the same run gets both shards,
  // each with its spec and whether it forwards to a backup.
  CHECK(fixture.Ask<Held>(node, reclaim_atom::value, other_run, std::string("another"))->empty());
  const caf::actor restarted = SpawnOwner(fixture);
  absl::StatusOr<Held> held = fixture.Ask<Held>(node, reclaim_atom::value, restarted, run);
  REQUIRE(held.ok());
  REQUIRE(held->size() == 2);
  CHECK(held->at(0).shard == trained);
  CHECK(held->at(0).spec.optimizer.has_value());
  CHECK(held->at(0).backed_up);
  CHECK(held->at(1).name == "emb/part_1");
  CHECK_FALSE(held->at(1).backed_up);
  // Taken over: the first owner's lease no longer drops them, and they are the new owner's to
  // drop, not the early one's.
  fixture.AdvanceTime(std::chrono::seconds(20));
  auto names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(names->size() == 2);
  auto read = fixture.AskOp(trained, ReadOp{});
  REQUIRE(read.ok());
  CHECK(SameTensor(read->value, value));
  CHECK(fixture.AskVoid(node, drop_shard_atom::value, std::string("emb/part_1"), early).code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(fixture.AskVoid(node, drop_shard_atom::value, std::string("emb/part_1"), restarted).ok());
  // The new owner lost in turn: its lease drops what it holds.
  caf::anon_send_exit(restarted, caf::exit_reason::kill);
  fixture.Run();
  fixture.AdvanceTime(std::chrono::seconds(31));
  names = fixture.Ask<std::vector<std::string>>(node, list_atom::value);
  REQUIRE(names.ok());
  CHECK(names->empty());
}

// A restarted coordinator may claim before the node has seen its predecessor's connection close:
// the claim waits for that, and is answered with the shards once it happens.
TEST_CASE("a claim made while the run's predecessor still looks alive is answered once it goes") {
  testing::CapturedLog log;
  DeterministicSystem fixture;
  const ps_node_actor node =
      fixture.Track(SpawnPsNode(fixture.system(), 0, std::chrono::seconds(30)));
  const caf::actor first = SpawnOwner(fixture);
  const std::string run = "fedcba9876543210fedcba9876543210";
  REQUIRE(fixture.Ask<std::vector<HeldShard>>(node, reclaim_atom::value, first, run)->empty());
  const shard_actor shard = CreateShard(fixture, node, TestShardSpec(0, 1, 8, 2), first);
  // Nothing waits where there is no predecessor of the run holding shards: another run's claim
  // is answered at once.
  const caf::actor stranger = SpawnOwner(fixture);
  CHECK(fixture
            .Ask<std::vector<HeldShard>>(node, reclaim_atom::value, stranger,
                                         std::string("another run"))
            ->empty());

  const caf::actor restarted = SpawnOwner(fixture);
  auto claim = ClaimLater(fixture, node, restarted, run);
  CHECK_FALSE(claim->has_value());
  fixture.AdvanceTime(std::chrono::seconds(1));
  CHECK_FALSE(claim->has_value());
  caf::anon_send_exit(first, caf::exit_reason::kill);  // the node sees it go
  fixture.Run();
  REQUIRE(claim->has_value());
  REQUIRE((*claim)->ok());
  const std::vector<HeldShard>& held = ***claim;
  REQUIRE(held.size() == 1);
  CHECK(held[0].shard == shard);
  // The shard is the restarted owner's now: the first owner's lease does not drop it.
  fixture.AdvanceTime(std::chrono::seconds(31));
  CHECK(fixture.Ask<std::vector<std::string>>(node, list_atom::value)->size() == 1);
  // The node says at info what it holds, waits for and drops.
  CHECK(fixture.AskVoid(node, drop_shard_atom::value, held[0].name, restarted).ok());
  const std::string text = log.text();
  CHECK_MESSAGE(absl::StrContains(text, "[info] holds shard " + held[0].name), text);
  CHECK_MESSAGE(absl::StrContains(text, "waiting up to 15 s for them to go"), text);
  CHECK_MESSAGE(absl::StrContains(
                    text, "[info] dropped shard " + held[0].name + ", as its coordinator asked"),
                text);
}

}  // namespace
}  // namespace tessera
