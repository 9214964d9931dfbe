// Note [Shard backups] (actors/ps/shard_actor.h): a shard forwards what changed it to its
// backup and acknowledges only once the backup has it.
#include <doctest/doctest.h>

#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/stateful_actor.hpp>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "actors/ps/shard_actor.h"
#include "tests/actors/actor_test_util.h"
#include "tests/captured_log.h"

namespace tessera {
namespace {

using testing::Adagrad;
using testing::DeterministicSystem;
using testing::Iota;
using testing::SameTensor;
using testing::TestShardSpec;

// Shard 1 of 3 of a 32 x 4 variable trained by Adagrad: 11 rows starting at 11.
shard_actor SpawnTestShard(DeterministicSystem& fixture) {
  auto state = ShardState::Create(TestShardSpec(1, 3, 32, 4, Adagrad()));
  REQUIRE(state.ok());
  return fixture.Track(SpawnShard(fixture.system(), std::move(state).value()));
}

absl::StatusOr<int64_t> SetBackup(DeterministicSystem& fixture, const shard_actor& primary,
                                  const caf::actor& backup, bool send_state) {
  return fixture.Ask<int64_t>(primary, backup_atom::value, backup, caf::actor(), send_state);
}

// Everything of a shard a backup must match: block, slots and step.
void CheckSameState(DeterministicSystem& fixture, const shard_actor& a, const shard_actor& b) {
  auto left = fixture.AskOp(a, SnapshotOp{});
  auto right = fixture.AskOp(b, SnapshotOp{});
  REQUIRE(left.ok());
  REQUIRE(right.ok());
  CHECK(SameTensor(left->value, right->value));
  REQUIRE(left->slots.size() == right->slots.size());
  for (size_t i = 0; i < left->slots.size(); ++i) {
    CHECK(SameTensor(left->slots[i], right->slots[i]));
  }
  CHECK(left->step == right->step);
}

int64_t VersionOf(DeterministicSystem& fixture, const shard_actor& shard) {
  auto info = fixture.AskOp(shard, InfoOp{});
  REQUIRE(info.ok());
  return info->version;
}

UpdateId Named(int64_t closure) { return UpdateId{7, closure, 0, 0}; }

TEST_CASE("a backed-up shard's backup applies every change, alone or batched, and matches it") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  const shard_actor backup = SpawnTestShard(fixture);
  REQUIRE(SetBackup(fixture, primary, caf::actor_cast<caf::actor>(backup), false).ok());

  REQUIRE(fixture.AskOp(primary, AssignOp{AssignKind::kAdd, Iota(Shape{11, 4}, 0.5f)}).ok());
  REQUIRE(fixture
              .AskOp(primary, ScatterRowsOp{ScatterOp::kUpdate,
                                            IndexedSlices{Ids{2, 5}, Iota(Shape{2, 4}, -3)}})
              .ok());
  REQUIRE(fixture.AskOp(primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, -1.0f)}).ok());
  // Reads and snapshots are the primary's alone.
  REQUIRE(fixture.AskOp(primary, GatherOp{Ids{1, 1}}).ok());
  REQUIRE(fixture.AskOp(primary, ReadOp{}).ok());
  std::vector<ShardOp> batch;
  batch.push_back(ApplySparseGradientOp{IndexedSlices{Ids{4, 9, 4}, Iota(Shape{3, 4}, 0.3f)}});
  batch.push_back(GatherOp{Ids{0}});
  batch.push_back(ApplySparseGradientOp{IndexedSlices{Ids{99}, Iota(Shape{1, 4}, 1)}});  // bad
  batch.push_back(ApplySparseGradientOp{IndexedSlices{Ids{10}, Iota(Shape{1, 4}, 2)}});
  auto replies = fixture.Ask<std::vector<ShardReply>>(primary, batch);
  REQUIRE(replies.ok());
  REQUIRE(replies->size() == 4);
  CHECK(!(*replies)[0].error);
  CHECK(!(*replies)[1].error);
  CHECK(ErrorToStatus((*replies)[2].error).code() == absl::StatusCode::kInvalidArgument);
  CHECK(!(*replies)[3].error);

  // Five changes applied (the bad gradient changed nothing), on both, in the same order.
  CHECK(VersionOf(fixture, primary) == 5);
  CHECK(VersionOf(fixture, backup) == 5);
  CheckSameState(fixture, primary, backup);
}

// A relay in front of a backup that holds what the primary forwards until it is released (any
// int32_t message): what a client sees while its change has not reached the backup yet.
struct HeldChanges {
  std::vector<std::pair<std::vector<ShardOp>, caf::response_promise>> held;
};

caf::behavior HoldingRelay(caf::stateful_actor<HeldChanges>* self, shard_actor backup) {
  return {
      [self](std::vector<ShardOp>& ops) {
        auto promise = self->make_response_promise();
        self->state.held.emplace_back(std::move(ops), promise);
        return promise;
      },
      [self, backup](int32_t) {
        for (auto& [ops, promise] : self->state.held) {
          self->request(backup, caf::infinite, std::move(ops))
              .then([promise](std::vector<ShardReply>& replies) mutable {
                promise.deliver(std::move(replies));
              });
        }
        self->state.held.clear();
      },
  };
}

// Sends `op` to `primary` without waiting; `acknowledged` gets its reply once one comes.
void SendUnanswered(DeterministicSystem& fixture, const shard_actor& primary, ShardOp op,
                    std::optional<absl::StatusOr<ShardOpResult>>& acknowledged) {
  // (An argument, unused: CAF 0.17 dereferences a null argument tuple when there is none.)
  fixture.system().spawn(
      [&acknowledged, primary, op](caf::event_based_actor* self, int) {
        self->request(primary, caf::infinite, op)
            .then([&acknowledged](ShardOpResult& r) { acknowledged = std::move(r); },
                  [&acknowledged](caf::error& e) { acknowledged = ErrorToStatus(e); });
      },
      0);
}

TEST_CASE("a shard with a backup acknowledges a change only once its backup has applied it") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  const shard_actor backup = SpawnTestShard(fixture);
  caf::actor relay = fixture.Track(fixture.system().spawn(HoldingRelay, backup));
  REQUIRE(SetBackup(fixture, primary, relay, false).ok());

  std::optional<absl::StatusOr<ShardOpResult>> acknowledged;
  SendUnanswered(fixture, primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 1.0f), Named(3)},
                 acknowledged);
  fixture.Run();
  // The primary applied it and reads see it, but the client waits.
  CHECK(!acknowledged.has_value());
  CHECK(VersionOf(fixture, primary) == 1);
  CHECK(VersionOf(fixture, backup) == 0);
  caf::anon_send(relay, int32_t{1});
  fixture.Run();
  REQUIRE(acknowledged.has_value());
  REQUIRE(acknowledged->ok());
  CHECK(VersionOf(fixture, backup) == 1);
  CheckSameState(fixture, primary, backup);
}

// Stands in for the PS node that gives a shard its backup (Note [A lost backup is struck before
// the primary acknowledges alone]): sent (shard, backup, send_state), it gives the shard that
// backup and records backup_atom's answer in `given`; it records the shard's loss reports in
// `lost`.
struct GiverRecords {
  std::vector<absl::StatusOr<int64_t>> given;
  std::vector<std::pair<std::string, caf::actor>> lost;
};

caf::behavior BackupGiver(caf::event_based_actor* self, GiverRecords* records) {
  return {
      [self, records](const shard_actor& shard, const caf::actor& backup, bool send_state) {
        self->request(shard, caf::infinite, backup_atom::value, backup, caf::actor(), send_state)
            .then([records](int64_t version) { records->given.emplace_back(version); },
                  [records](caf::error& err) { records->given.push_back(ErrorToStatus(err)); });
      },
      [records](backup_lost_atom, const std::string& name, const caf::actor& backup) {
        records->lost.emplace_back(name, backup);
      },
  };
}

// Has `giver` give `primary` the backup `backup` (without the state), and checks it did.
void Give(DeterministicSystem& fixture, const caf::actor& giver, const GiverRecords& records,
          const shard_actor& primary, const caf::actor& backup) {
  const size_t before = records.given.size();
  caf::anon_send(giver, primary, backup, false);
  fixture.Run();
  REQUIRE(records.given.size() == before + 1);
  REQUIRE(records.given.back().ok());
}

// Sends `op` to `primary`; `acknowledged` gets its reply, which must not have come yet.
void SendHeld(DeterministicSystem& fixture, const shard_actor& primary, ShardOp op,
              std::optional<absl::StatusOr<ShardOpResult>>& acknowledged) {
  SendUnanswered(fixture, primary, std::move(op), acknowledged);
  fixture.Run();
  CHECK(!acknowledged.has_value());
}

TEST_CASE("a change waiting for a backup that goes down is held, and reported, until struck") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  const shard_actor backup = SpawnTestShard(fixture);
  caf::actor relay = fixture.Track(fixture.system().spawn(HoldingRelay, backup));
  GiverRecords records;
  const caf::actor giver = fixture.Track(fixture.system().spawn(BackupGiver, &records));
  Give(fixture, giver, records, primary, relay);
  std::optional<absl::StatusOr<ShardOpResult>> first;
  SendHeld(fixture, primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 1.0f)}, first);
  // The relay dies holding the change (as a backup whose connection is lost answers nothing):
  // the giver hears of it, and the change stays unacknowledged.
  caf::anon_send_exit(relay, caf::exit_reason::kill);
  fixture.Run();
  CHECK(!first.has_value());
  REQUIRE(records.lost.size() == 1);
  CHECK(records.lost[0].first == "emb/part_1");
  CHECK(records.lost[0].second == relay);
  // Changes after the loss are applied, and held too; reads are answered at once.
  std::optional<absl::StatusOr<ShardOpResult>> second;
  SendUnanswered(fixture, primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 2.0f)}, second);
  std::vector<ShardOp> batch;
  batch.push_back(GatherOp{Ids{0}});
  batch.push_back(ApplySparseGradientOp{IndexedSlices{Ids{3}, Iota(Shape{1, 4}, 0.5f)}});
  std::optional<absl::StatusOr<std::vector<ShardReply>>> third;
  fixture.system().spawn(
      [&third, primary, batch](caf::event_based_actor* self, int) {
        self->request(primary, caf::infinite, batch)
            .then([&third](std::vector<ShardReply>& r) { third = std::move(r); },
                  [&third](caf::error& e) { third = ErrorToStatus(e); });
      },
      0);
  fixture.Run();
  CHECK(!second.has_value());
  CHECK(!third.has_value());
  CHECK(VersionOf(fixture, primary) == 3);
  CHECK(fixture.AskOp(primary, GatherOp{Ids{2}}).ok());
  CHECK(records.lost.size() == 1);  // reported once
  // The coordinator struck the backup and says go on without one: all acknowledged, in order.
  REQUIRE(SetBackup(fixture, primary, caf::actor(), false).ok());
  REQUIRE(first.has_value());
  REQUIRE(second.has_value());
  REQUIRE(third.has_value());
  CHECK(ResultOf<ApplyDenseGradientOp>(**first)->version == 1);
  CHECK(ResultOf<ApplyDenseGradientOp>(**second)->version == 2);
  REQUIRE(third->ok());
  REQUIRE((*third)->size() == 2);
  CHECK(!(**third)[1].error);
  auto next = fixture.AskOp(primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 3.0f)});
  REQUIRE(next.ok());
  CHECK(*next == 4);
}

TEST_CASE("a backup that dies is warned of, and one stopped in order (its node shut down) is not") {
  for (const caf::exit_reason reason : {caf::exit_reason::kill, caf::exit_reason::user_shutdown}) {
    CAPTURE(caf::to_string(reason));
    testing::CapturedLog log;
    DeterministicSystem fixture;
    const shard_actor primary = SpawnTestShard(fixture);
    const shard_actor backup = SpawnTestShard(fixture);
    caf::actor relay = fixture.Track(fixture.system().spawn(HoldingRelay, backup));
    GiverRecords records;
    const caf::actor giver = fixture.Track(fixture.system().spawn(BackupGiver, &records));
    Give(fixture, giver, records, primary, relay);
    caf::anon_send_exit(relay, reason);
    fixture.Run();
    REQUIRE(records.lost.size() == 1);  // either way a loss, reported to be struck
    const std::string text = log.text();
    CHECK_MESSAGE(text.find("shard emb/part_1 lost its backup") != std::string::npos, text);
    if (reason == caf::exit_reason::kill) {
      CHECK_MESSAGE(text.find("[warning] shard emb/part_1 lost its backup (it went down") !=
                        std::string::npos,
                    text);
    } else {
      CHECK_MESSAGE(text.find("[info] shard emb/part_1 lost its backup (it was shut down") !=
                        std::string::npos,
                    text);
      CHECK(text.find("[warning]") == std::string::npos);
    }
  }
}

TEST_CASE("a new backup takes the primary's state first, then every change after it") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  REQUIRE(fixture.AskOp(primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, -1.0f)}).ok());
  REQUIRE(fixture.AskOp(primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 0.25f)}).ok());
  const shard_actor backup = SpawnTestShard(fixture);
  auto version = SetBackup(fixture, primary, caf::actor_cast<caf::actor>(backup), true);
  REQUIRE(version.ok());
  CHECK(*version == 2);
  CheckSameState(fixture, primary, backup);
  REQUIRE(
      fixture.AskOp(primary, ApplySparseGradientOp{IndexedSlices{Ids{3}, Iota(Shape{1, 4}, 0.75f)}})
          .ok());
  CheckSameState(fixture, primary, backup);
}

TEST_CASE("a new backup of a shard larger than a message part takes its state in parts") {
  // 1.2M rows of 8 floats with an Adagrad accumulator: 77 MB, three parts of at most 32 MiB.
  DeterministicSystem fixture;
  const ShardSpec spec = TestShardSpec(0, 1, 1200000, 8, Adagrad());
  const auto spawn = [&] {
    auto state = ShardState::Create(spec);
    REQUIRE(state.ok());
    return fixture.Track(SpawnShard(fixture.system(), std::move(state).value()));
  };
  const shard_actor primary = spawn();
  const ApplySparseGradientOp early{IndexedSlices{Ids{5, 1199999}, Iota(Shape{2, 8}, 0.5f)},
                                    Named(3)};
  REQUIRE(fixture.AskOp(primary, early).ok());
  const shard_actor backup = spawn();
  auto version = SetBackup(fixture, primary, caf::actor_cast<caf::actor>(backup), true);
  REQUIRE(version.ok());
  auto info = fixture.AskOp(backup, InfoOp{});
  REQUIRE(info.ok());
  CHECK(info->version == 3);  // three restores, one per part
  CheckSameState(fixture, primary, backup);
  // The changes after the rebuild follow the parts; the early update stays applied once.
  REQUIRE(fixture
              .AskOp(primary,
                     ApplySparseGradientOp{IndexedSlices{Ids{700000}, Iota(Shape{1, 8}, -1.0f)}})
              .ok());
  REQUIRE(fixture.AskOp(backup, early).ok());
  CheckSameState(fixture, primary, backup);
}

TEST_CASE("a backup rebuilt part by part while updates keep coming ends identical to its primary") {
  // 1.2M rows of 8 floats with Adam's two slots: 115 MB, four parts of at most 32 MiB, each
  // copied once the one before it was applied. Updates sent right behind the request that gives
  // the backup are forwarded between the parts: dense ones change every row, restored or not yet,
  // and step the optimizer, whose count each part carries.
  DeterministicSystem fixture;
  const ShardSpec spec = TestShardSpec(0, 1, 1200000, 8, OptimizerSpec{"adam", {}});
  const auto spawn = [&] {
    auto state = ShardState::Create(spec);
    REQUIRE(state.ok());
    return fixture.Track(SpawnShard(fixture.system(), std::move(state).value()));
  };
  const shard_actor primary = spawn();
  REQUIRE(fixture.AskOp(primary, ApplyDenseGradientOp{Iota(Shape{1200000, 8}, 1e-7f)}).ok());
  const shard_actor backup = spawn();
  std::optional<absl::StatusOr<int64_t>> backed_up;
  int updates_acknowledged = 0;
  // (An argument, unused: CAF 0.17 dereferences a null argument tuple when there is none.)
  fixture.system().spawn(
      [&](caf::event_based_actor* self, int) {
        self->request(primary, caf::infinite, backup_atom::value,
                      caf::actor_cast<caf::actor>(backup), caf::actor(), true)
            .then([&](int64_t version) { backed_up = version; },
                  [&](caf::error& err) { backed_up = ErrorToStatus(err); });
        for (int k = 0; k < 3; ++k) {
          ShardOp dense =
              ApplyDenseGradientOp{Iota(Shape{1200000, 8}, 1e-6f * (k + 1)), Named(k + 1)};
          ShardOp sparse = ApplySparseGradientOp{
              IndexedSlices{Ids{3, 600000 + k, 1199999}, Iota(Shape{3, 8}, -0.5f)}, Named(10 + k)};
          for (ShardOp& op : {std::ref(dense), std::ref(sparse)}) {
            self->request(primary, caf::infinite, std::move(op))
                .then([&](ShardOpResult&) { ++updates_acknowledged; }, [](caf::error&) {});
          }
        }
      },
      0);
  fixture.Run();
  REQUIRE(backed_up.has_value());
  REQUIRE(backed_up->ok());
  CHECK(updates_acknowledged == 6);
  auto info = fixture.AskOp(backup, InfoOp{});
  REQUIRE(info.ok());
  CHECK(info->step == 7);  // the first gradient, then six forwarded: in lockstep
  CheckSameState(fixture, primary, backup);
  // The ledger came with the last part: a re-run of a forwarded update is dropped there too.
  auto again = fixture.AskOp(
      backup, ApplySparseGradientOp{
                  IndexedSlices{Ids{3, 600000, 1199999}, Iota(Shape{3, 8}, -0.5f)}, Named(10)});
  REQUIRE(again.ok());
  CHECK(fixture.AskOp(backup, InfoOp{})->duplicate_updates == 1);
}

TEST_CASE("a forwarded update keeps its id, so a promoted backup does not apply it twice") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  const shard_actor backup = SpawnTestShard(fixture);
  REQUIRE(SetBackup(fixture, primary, caf::actor_cast<caf::actor>(backup), false).ok());
  const ApplyDenseGradientOp update{Iota(Shape{11, 4}, 1.0f), Named(5)};
  REQUIRE(fixture.AskOp(primary, update).ok());
  // The closure runs again after its primary was lost: its update reaches the backup itself.
  auto again = fixture.AskOp(backup, update);
  REQUIRE(again.ok());
  CHECK(*again == 1);
  CheckSameState(fixture, primary, backup);
}

TEST_CASE("a rebuilt backup takes the primary's ledger, so promoted it drops a re-run update") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  const ApplyDenseGradientOp update{Iota(Shape{11, 4}, 1.0f), Named(5)};
  REQUIRE(fixture.AskOp(primary, update).ok());  // applied before the backup existed
  const shard_actor rebuilt = SpawnTestShard(fixture);
  REQUIRE(SetBackup(fixture, primary, caf::actor_cast<caf::actor>(rebuilt), true).ok());
  // The closure runs again after the primary was lost and the rebuilt backup promoted.
  auto again = fixture.AskOp(rebuilt, update);
  REQUIRE(again.ok());
  CHECK(*again == 1);  // the version the restore gave it: nothing applied since
  auto info = fixture.AskOp(rebuilt, InfoOp{});
  REQUIRE(info.ok());
  CHECK(info->step == 1);
  CHECK(info->duplicate_updates == 1);
  CheckSameState(fixture, primary, rebuilt);
}

TEST_CASE("a shard whose backup is gone or fails acknowledges only once given its next backup") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  GiverRecords records;
  const caf::actor giver = fixture.Track(fixture.system().spawn(BackupGiver, &records));
  caf::actor failed;
  SUBCASE("the backup exited") {
    const shard_actor backup = SpawnTestShard(fixture);
    failed = caf::actor_cast<caf::actor>(backup);
    Give(fixture, giver, records, primary, failed);
    caf::anon_send_exit(backup, caf::exit_reason::kill);
    fixture.Run();
  }
  SUBCASE("the backup cannot apply the change (a shard of another shape)") {
    auto other = ShardState::Create(TestShardSpec(0, 1, 5, 4, Adagrad()));
    REQUIRE(other.ok());
    const shard_actor backup = fixture.Track(SpawnShard(fixture.system(), std::move(*other)));
    failed = caf::actor_cast<caf::actor>(backup);
    Give(fixture, giver, records, primary, failed);
  }
  std::optional<absl::StatusOr<ShardOpResult>> first;
  SendHeld(fixture, primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 1.0f)}, first);
  REQUIRE(records.lost.size() == 1);
  CHECK(records.lost[0].second == failed);
  // A new backup (here: none) releases it; the shard then goes on without a backup.
  caf::anon_send(giver, primary, caf::actor(), false);
  fixture.Run();
  REQUIRE(first.has_value());
  CHECK(first->ok());
  auto second = fixture.AskOp(primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 2.0f)});
  REQUIRE(second.ok());
  CHECK(*second == 2);
}

TEST_CASE("a rebuild whose new backup fails is an error at once, while changes are held") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  REQUIRE(fixture.AskOp(primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, -1.0f)}).ok());
  const shard_actor backup = SpawnTestShard(fixture);
  caf::actor relay = fixture.Track(fixture.system().spawn(HoldingRelay, backup));
  GiverRecords records;
  const caf::actor giver = fixture.Track(fixture.system().spawn(BackupGiver, &records));
  caf::anon_send(giver, primary, relay, true);  // the state goes first, held by the relay
  fixture.Run();
  CHECK(records.given.empty());
  std::optional<absl::StatusOr<ShardOpResult>> change;
  SendHeld(fixture, primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 1.0f)}, change);
  caf::anon_send_exit(relay, caf::exit_reason::kill);
  fixture.Run();
  REQUIRE(records.given.size() == 1);
  CHECK(records.given[0].status().code() == absl::StatusCode::kUnavailable);
  CHECK(records.lost.size() == 1);
  CHECK(!change.has_value());
  caf::anon_send(giver, primary, caf::actor(), false);
  fixture.Run();
  REQUIRE(change.has_value());
  CHECK(change->ok());
}

TEST_CASE("a shard cannot be its own backup, and a null backup ends its backing up") {
  DeterministicSystem fixture;
  const shard_actor primary = SpawnTestShard(fixture);
  CHECK(SetBackup(fixture, primary, caf::actor_cast<caf::actor>(primary), false).status().code() ==
        absl::StatusCode::kInvalidArgument);
  const shard_actor backup = SpawnTestShard(fixture);
  REQUIRE(SetBackup(fixture, primary, caf::actor_cast<caf::actor>(backup), false).ok());
  REQUIRE(SetBackup(fixture, primary, caf::actor(), false).ok());
  REQUIRE(fixture.AskOp(primary, ApplyDenseGradientOp{Iota(Shape{11, 4}, 1.0f)}).ok());
  CHECK(VersionOf(fixture, backup) == 0);
}

}  // namespace
}  // namespace tessera
