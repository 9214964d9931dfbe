// Exactly-once updates (core/ps/update_ledger.h): the ledger a shard keeps, the names a closure's
// attempts give their updates, and ApplyShardOp dropping a repeat (core/ps/shard_op.h).
#include "core/ps/update_ledger.h"

#include <doctest/doctest.h>

#include <optional>
#include <utility>
#include <vector>

#include "core/ps/shard_op.h"
#include "core/ps/shard_state.h"
#include "core/variables/indexed_slices.h"

namespace tessera {
namespace {

constexpr uint64_t kQueue = 0xfeed;

UpdateId Id(int64_t closure, int64_t sequence = 0, int64_t resolved_below = 1,
            uint64_t queue = kQueue) {
  return UpdateId{queue, closure, sequence, resolved_below};
}

TEST_CASE("a ledger knows the updates it recorded, by queue, closure and sequence") {
  UpdateLedger ledger;
  CHECK_FALSE(ledger.Applied(Id(3)));
  ledger.Record(Id(3));
  CHECK(ledger.Applied(Id(3)));
  CHECK_FALSE(ledger.Applied(Id(3, /*sequence=*/1)));    // the closure's next update
  CHECK_FALSE(ledger.Applied(Id(4)));                    // another closure
  CHECK_FALSE(ledger.Applied(Id(3, 0, 1, kQueue + 1)));  // another queue's closure 3
  CHECK(ledger.size() == 1);
  ledger.Clear();
  CHECK_FALSE(ledger.Applied(Id(3)));
  CHECK(ledger.size() == 0);
}

TEST_CASE("an untagged update is never a repeat and is not remembered") {
  UpdateLedger ledger;
  ledger.Record(UpdateId{});
  CHECK_FALSE(ledger.Applied(UpdateId{}));
  CHECK(ledger.size() == 0);
}

TEST_CASE("a newer resolved mark forgets the closures below it, and only those") {
  UpdateLedger ledger;
  for (int64_t c = 1; c <= 10; ++c) {
    ledger.Record(Id(c, 0));
    ledger.Record(Id(c, 1));
  }
  CHECK(ledger.size() == 20);
  // Closures 1..6 were resolved when closure 12 was dispatched.
  CHECK_FALSE(ledger.Applied(Id(12, 0, /*resolved_below=*/7)));
  CHECK(ledger.size() == 8);
  CHECK(ledger.Applied(Id(7, 1, /*resolved_below=*/1)));  // an older mark changes nothing
  CHECK(ledger.Applied(Id(10, 0, 1)));
  CHECK(ledger.size() == 8);
  // An update of a resolved closure is not remembered (nothing asks about it again).
  ledger.Record(Id(3, 5, 7));
  CHECK(ledger.size() == 8);
  // Marks are per queue.
  ledger.Record(Id(2, 0, 1, kQueue + 1));
  CHECK(ledger.Applied(Id(2, 0, 1, kQueue + 1)));
  CHECK_FALSE(ledger.Applied(Id(2, 0, 1)));
}

TEST_CASE("the ledger is bounded: the least recent queue and the oldest ids go first") {
  UpdateLedger ledger;
  for (int q = 0; q < UpdateLedger::kMaxRememberedQueues; ++q) ledger.Record(Id(1, 0, 1, 100 + q));
  CHECK(ledger.Applied(Id(1, 0, 1, 100)));  // queue 100 is now the most recently used
  ledger.Record(Id(1, 0, 1, 999));          // evicts queue 101
  CHECK(ledger.evicted() == 1);
  CHECK(ledger.Applied(Id(1, 0, 1, 100)));
  CHECK_FALSE(ledger.Applied(Id(1, 0, 1, 101)));
  CHECK(ledger.Applied(Id(1, 0, 1, 999)));

  UpdateLedger one;
  for (int64_t k = 0; k <= UpdateLedger::kMaxRememberedUpdates; ++k) one.Record(Id(1, k));
  CHECK(one.size() == UpdateLedger::kMaxRememberedUpdates);
  CHECK(one.evicted() == 1);
  CHECK_FALSE(one.Applied(Id(1, 0)));  // the oldest went
  CHECK(one.Applied(Id(1, UpdateLedger::kMaxRememberedUpdates)));
}

TEST_CASE("a ledger handed to another keeps what it vouches for, within the limits") {
  UpdateLedger from;
  for (int64_t c = 1; c <= 4; ++c) from.Record(Id(c, 0, 1));
  from.Record(Id(2, 0, 1, kQueue + 1));
  CHECK_FALSE(from.Applied(Id(9, 0, 1)));  // kQueue used last (a question marks its use too)
  const std::vector<RememberedQueue> remembered = from.Remembered();
  REQUIRE(remembered.size() == 2);
  CHECK(remembered[0].queue == kQueue + 1);  // least recently used first
  CHECK(remembered[1].applied ==
        std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {2, 0}, {3, 0}, {4, 0}});

  UpdateLedger to;
  to.Record(Id(7, 0, 1, 0xbad));  // replaced, not merged
  to.Replace(remembered);
  CHECK(to.size() == 5);
  CHECK(to.Applied(Id(3, 0, 1)));
  CHECK(to.Applied(Id(2, 0, 1, kQueue + 1)));
  CHECK_FALSE(to.Applied(Id(7, 0, 1, 0xbad)));
  CHECK(to.Applied(Id(4, 0, /*resolved_below=*/4)));  // the marks go on working
  CHECK_FALSE(to.Applied(Id(3, 0, 4)));

  // Forged or oversized input: ids below their mark are dropped; queues past the limit and ids
  // past the limit are left out, counted as evicted; an empty list clears.
  std::vector<RememberedQueue> forged(UpdateLedger::kMaxRememberedQueues + 2);
  for (size_t q = 0; q < forged.size(); ++q) {
    forged[q].queue = 500 + q;
    forged[q].resolved_below = 10;
    forged[q].applied = {{3, 0}, {11, 0}};
  }
  UpdateLedger bounded;
  bounded.Replace(forged);
  CHECK(bounded.size() == UpdateLedger::kMaxRememberedQueues);
  CHECK(bounded.evicted() == 4);
  CHECK(bounded.Applied(Id(11, 0, 1, 502)));
  CHECK_FALSE(bounded.Applied(Id(3, 0, 1, 502)));   // below its mark
  CHECK_FALSE(bounded.Applied(Id(11, 0, 1, 500)));  // among the first two queues: left out
  bounded.Replace({});
  CHECK(bounded.size() == 0);
}

TEST_CASE("a closure's attempts name their updates alike: per shard, in the order sent") {
  auto names = [] {
    UpdateNamer namer(kQueue, /*closure=*/9, /*resolved_below=*/4);
    return std::vector<UpdateId>{namer.Next("emb", 0), namer.Next("emb", 1), namer.Next("emb", 0),
                                 namer.Next("bias", 0)};
  };
  const std::vector<UpdateId> first = names(), second = names();
  REQUIRE(first.size() == second.size());
  for (size_t k = 0; k < first.size(); ++k) {
    CHECK(first[k].queue == kQueue);
    CHECK(first[k].closure == 9);
    CHECK(first[k].resolved_below == 4);
    CHECK(first[k].sequence == second[k].sequence);
  }
  CHECK(first[0].sequence == 0);
  CHECK(first[1].sequence == 0);  // another shard counts on its own
  CHECK(first[2].sequence == 1);
  CHECK(first[3].sequence == 0);
}

std::vector<float> Values(const Tensor& t) { return {t.values().begin(), t.values().end()}; }

ShardState AdagradShard() {
  ShardSpec spec;
  spec.variable = "emb";
  spec.full_shape = Shape{4, 2};
  spec.rows = 4;
  spec.initializer = InitializerSpec{"ones", {}, 0};
  spec.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}};
  absl::StatusOr<ShardState> shard = ShardState::Create(spec);
  REQUIRE(shard.ok());
  return *std::move(shard);
}

ShardOp Sparse(int64_t row, float g, UpdateId id) {
  return ApplySparseGradientOp{IndexedSlices{Ids{row}, Tensor(Shape{1, 2}, g)}, id};
}

TEST_CASE("a shard applies a named update once and answers its repeat with its version") {
  ShardState shard = AdagradShard();
  REQUIRE(ApplyShardOp(shard, Sparse(1, 1.0f, Id(5)), nullptr).ok());
  const std::vector<float> once = Values(shard.Read());
  const int64_t version = shard.version();
  absl::StatusOr<ShardOpResult> repeat = ApplyShardOp(shard, Sparse(1, 7.0f, Id(5)), nullptr);
  REQUIRE(repeat.ok());
  CHECK(std::get<ShardVersion>(*repeat).version == version);
  CHECK(Values(shard.Read()) == once);
  CHECK(shard.version() == version);
  ShardInfo info = shard.Info();
  CHECK(info.step == 1);
  CHECK(info.duplicate_updates == 1);

  // The closure's next update to this shard, and untagged updates, apply.
  REQUIRE(ApplyShardOp(shard, Sparse(1, 1.0f, Id(5, 1)), nullptr).ok());
  REQUIRE(ApplyShardOp(shard, Sparse(1, 1.0f, UpdateId{}), nullptr).ok());
  REQUIRE(ApplyShardOp(shard, Sparse(1, 1.0f, UpdateId{}), nullptr).ok());
  info = shard.Info();
  CHECK(info.step == 4);
  CHECK(info.duplicate_updates == 1);
}

TEST_CASE("every row update is named: assign, scatter and dense gradients repeat as nothing") {
  ShardState shard = AdagradShard();
  const std::vector<ShardOp> updates = {
      AssignOp{AssignKind::kAdd, Tensor(Shape{4, 2}, 1.0f), Id(1)},
      ScatterRowsOp{ScatterOp::kAdd, IndexedSlices{Ids{0}, Tensor(Shape{1, 2}, 1.0f)}, Id(2)},
      ApplyDenseGradientOp{Tensor(Shape{4, 2}, 1.0f), Id(3)},
  };
  for (const ShardOp& op : updates) REQUIRE(ApplyShardOp(shard, op, nullptr).ok());
  const std::vector<float> value = Values(shard.Read());
  for (const ShardOp& op : updates) REQUIRE(ApplyShardOp(shard, op, nullptr).ok());
  CHECK(Values(shard.Read()) == value);
  CHECK(shard.Info().duplicate_updates == 3);
  CHECK(shard.Info().step == 1);
}

// Every part of the shard's state, as a rebuild sends them (RestorePart from row 0 up).
std::vector<RestoreOp> RestoreOpsFor(const ShardState& shard, int64_t max_bytes) {
  std::vector<RestoreOp> parts;
  const int64_t rows_per_part = RestorePartRows(shard, max_bytes);
  for (int64_t begin = 0; begin < shard.spec().rows; begin += rows_per_part) {
    parts.push_back(RestorePart(shard, begin, rows_per_part));
  }
  return parts;
}

TEST_CASE("a shard's state goes out in parts that fit a message, the last with its ledger") {
  ShardState primary = AdagradShard();  // 4 rows of 2 floats and an accumulator: 16 bytes a row
  REQUIRE(ApplyShardOp(primary, Sparse(1, 1.0f, Id(5)), nullptr).ok());
  REQUIRE(ApplyShardOp(primary, Sparse(3, -2.0f, Id(6)), nullptr).ok());
  CHECK(RestoreOpsFor(primary, 1 << 20).size() == 1);  // it all fits
  CHECK(RestoreOpsFor(primary, 1).size() == 4);        // at least a row a part

  std::vector<RestoreOp> parts = RestoreOpsFor(primary, 40);  // two rows a part
  REQUIRE(parts.size() == 2);
  CHECK(parts[0].slice.value.shape() == Shape{2, 2});
  CHECK(parts[1].slice.row_offset == 2);
  CHECK(parts[0].ledger.empty());
  CHECK(parts[1].ledger.size() == 1);
  ShardState backup = AdagradShard();
  for (RestoreOp& part : parts) REQUIRE(ApplyShardOp(backup, std::move(part), nullptr).ok());
  const TensorSlice want = primary.Snapshot();
  const TensorSlice got = backup.Snapshot();
  CHECK(Values(got.value) == Values(want.value));
  CHECK(Values(got.slots.at(0)) == Values(want.slots.at(0)));
  CHECK(got.step == 2);
  // Both re-run updates are dropped by the copy, as by the primary.
  REQUIRE(ApplyShardOp(backup, Sparse(1, 1.0f, Id(5)), nullptr).ok());
  REQUIRE(ApplyShardOp(backup, Sparse(3, -2.0f, Id(6)), nullptr).ok());
  CHECK(backup.Info().duplicate_updates == 2);
  CHECK(Values(backup.Read()) == Values(primary.Read()));
}

TEST_CASE("a failed update is not remembered, and a restore forgets the applied ones") {
  ShardState shard = AdagradShard();
  CHECK_FALSE(ApplyShardOp(shard, Sparse(9, 1.0f, Id(5)), nullptr).ok());  // row out of range
  REQUIRE(ApplyShardOp(shard, Sparse(1, 1.0f, Id(5)), nullptr).ok());
  CHECK(shard.Info().step == 1);
  CHECK(shard.Info().duplicate_updates == 0);

  REQUIRE(shard.Restore(shard.Snapshot()).ok());
  REQUIRE(ApplyShardOp(shard, Sparse(1, 1.0f, Id(5)), nullptr).ok());  // applies again
  CHECK(shard.Info().step == 2);
  CHECK(shard.Info().duplicate_updates == 0);

  // A restore carrying a ledger (a backup seeded by its primary) takes it instead.
  ShardState backup = AdagradShard();
  REQUIRE(
      ApplyShardOp(backup, RestoreOp{shard.Snapshot(), shard.RememberedUpdates()}, nullptr).ok());
  CHECK(backup.Info().step == 2);
  REQUIRE(ApplyShardOp(backup, Sparse(1, 1.0f, Id(5)), nullptr).ok());
  CHECK(backup.Info().step == 2);
  CHECK(backup.Info().duplicate_updates == 1);
}

}  // namespace
}  // namespace tessera
