#include "actors/ps/shard_actor.h"

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "tests/actors/actor_test_util.h"

namespace tessera {
namespace {

using testing::Adagrad;
using testing::DeterministicSystem;
using testing::Iota;
using testing::SameTensor;
using testing::TestShardSpec;

// Shard 1 of 3 of a 32 x 4 variable: 11 rows starting at 11.
shard_actor SpawnTestShard(DeterministicSystem& fixture,
                           std::optional<OptimizerSpec> optimizer = std::nullopt) {
  auto state = ShardState::Create(TestShardSpec(1, 3, 32, 4, std::move(optimizer)));
  REQUIRE(state.ok());
  return fixture.Track(SpawnShard(fixture.system(), std::move(state).value()));
}

Tensor ReadShard(DeterministicSystem& fixture, const shard_actor& shard) {
  auto value = fixture.AskOp(shard, ReadOp{});
  REQUIRE(value.ok());
  return value->value;
}

TEST_CASE("a shard actor reports its name, layout and version without its values") {
  DeterministicSystem fixture;
  const shard_actor shard = SpawnTestShard(fixture, Adagrad());
  auto info = fixture.AskOp(shard, InfoOp{});
  REQUIRE(info.ok());
  CHECK(info->name == "emb/part_1");
  CHECK(info->full_shape == Shape{32, 4});
  CHECK(info->row_offset == 11);
  CHECK(info->block_shape == Shape{11, 4});
  CHECK(info->optimizer == "adagrad");
  CHECK(info->version == 0);
  CHECK(info->bytes > 11 * 4 * 4);  // the block plus the accumulator
}

TEST_CASE("every shard op through the actor matches a plain-tensor reference") {
  DeterministicSystem fixture;
  const shard_actor shard = SpawnTestShard(fixture);
  const ShardSpec spec = TestShardSpec(1, 3, 32, 4);
  auto initial = MakeInitializedBlock(spec.initializer, spec.full_shape, 11, 11);
  REQUIRE(initial.ok());
  Tensor reference = *initial;
  CHECK(SameTensor(ReadShard(fixture, shard), reference));
  int64_t version = 0;

  const Ids gather_ids = {10, 0, 10, 3};
  auto gathered = fixture.AskOp(shard, GatherOp{gather_ids});
  REQUIRE(gathered.ok());
  CHECK(SameTensor(gathered->value, *GatherRows(reference, gather_ids)));
  CHECK(gathered->version == version);

  for (AssignKind kind : {AssignKind::kAssign, AssignKind::kAdd, AssignKind::kSub}) {
    CAPTURE(AssignKindName(kind));
    const Tensor value = Iota(Shape{11, 4}, 0.5f);
    auto reply = fixture.AskOp(shard, AssignOp{kind, value});
    REQUIRE(reply.ok());
    REQUIRE(AssignBlock(kind, reference.view(), value).ok());
    CHECK(*reply == ++version);
    CHECK(SameTensor(ReadShard(fixture, shard), reference));
  }
  for (ScatterOp op : {ScatterOp::kAdd, ScatterOp::kSub, ScatterOp::kMul, ScatterOp::kDiv,
                       ScatterOp::kMin, ScatterOp::kMax, ScatterOp::kUpdate}) {
    CAPTURE(ScatterOpName(op));
    const IndexedSlices rows{Ids{7, 2, 7}, Iota(Shape{3, 4}, -0.75f)};
    auto reply = fixture.AskOp(shard, ScatterRowsOp{op, rows});
    REQUIRE(reply.ok());
    REQUIRE(ScatterRows(op, reference.view(), rows.indices, rows.values).ok());
    CHECK(*reply == ++version);
    CHECK(SameTensor(ReadShard(fixture, shard), reference));
  }
  auto read = fixture.AskOp(shard, ReadOp{});
  REQUIRE(read.ok());
  CHECK(read->version == version);
}

TEST_CASE("gradients through the actor match the shard's rule applied to a plain tensor") {
  DeterministicSystem fixture;
  const shard_actor shard = SpawnTestShard(fixture, Adagrad());
  Tensor reference = ReadShard(fixture, shard);
  auto rule = MakeOptimizer(Adagrad());
  REQUIRE(rule.ok());
  OptimizerSlots slots = (*rule)->CreateSlots(reference.shape());

  const Tensor dense = Iota(Shape{11, 4}, -1.0f);
  auto v1 = fixture.AskOp(shard, ApplyDenseGradientOp{dense});
  REQUIRE(v1.ok());
  CHECK(*v1 == 1);
  REQUIRE((*rule)->ApplyDense(reference.view(), slots, dense).ok());

  const IndexedSlices sparse{Ids{4, 9, 4}, Iota(Shape{3, 4}, 0.3f)};
  auto v2 = fixture.AskOp(shard, ApplySparseGradientOp{sparse});
  REQUIRE(v2.ok());
  CHECK(*v2 == 2);
  REQUIRE((*rule)->ApplySparse(reference.view(), slots, sparse.indices, sparse.values).ok());

  CHECK(SameTensor(ReadShard(fixture, shard), reference));
  auto snapshot = fixture.AskOp(shard, SnapshotOp{});
  REQUIRE(snapshot.ok());
  REQUIRE(snapshot->slots.size() == slots.tensors.size());
  for (size_t i = 0; i < slots.tensors.size(); ++i) {
    CHECK(SameTensor(snapshot->slots[i], slots.tensors[i]));
  }
}

TEST_CASE("bad input gets an error reply with a clear message and leaves the shard unchanged") {
  struct Case {
    const char* what;
    std::function<absl::Status(DeterministicSystem&, const shard_actor&)> send;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"gather id out of range",
       [](DeterministicSystem& f, const shard_actor& s) {
         return f.AskOp(s, GatherOp{Ids{0, 11}}).status();
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: gather: id 11 at position 1 is out of range [0, 11)"},
      {"assign shape mismatch",
       [](DeterministicSystem& f, const shard_actor& s) {
         return f.AskOp(s, AssignOp{AssignKind::kAssign, Tensor(Shape{32, 4})})
             .status();
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: assign: shape [32, 4] does not match expected [11, 4]"},
      {"scatter id out of range",
       [](DeterministicSystem& f, const shard_actor& s) {
         return f
             .AskOp(s, ScatterRowsOp{ScatterOp::kAdd, IndexedSlices{Ids{3, -1}, Tensor(Shape{2, 4}, 1.0f)}})
             .status();
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: scatter_add: id -1 at position 1 is out of range [0, 11)"},
      {"scatter rows of the wrong width",
       [](DeterministicSystem& f, const shard_actor& s) {
         return f
             .AskOp(s, ScatterRowsOp{ScatterOp::kUpdate, IndexedSlices{Ids{3}, Tensor(Shape{1, 5}, 1.0f)}})
             .status();
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: scatter_update: rows of shape [1, 5] do not match the block's rows [1, 4] "
       "(block shape [11, 4])"},
      {"scatter op outside the enum",
       [](DeterministicSystem& f, const shard_actor& s) {
         return f
             .AskOp(s, ScatterRowsOp{static_cast<ScatterOp>(77), IndexedSlices{Ids{3}, Tensor(Shape{1, 4}, 1.0f)}})
             .status();
       },
       absl::StatusCode::kInvalidArgument, "emb/part_1: scatter: unknown op 77 (expected 0..6)"},
      {"dense gradient shape mismatch",
       [](DeterministicSystem& f, const shard_actor& s) {
         return f.AskOp(s, ApplyDenseGradientOp{Tensor(Shape{11, 3}, 1.0f)}).status();
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: apply_dense_gradient: shape [11, 3] does not match expected [11, 4]"},
      {"sparse gradient id out of range",
       [](DeterministicSystem& f, const shard_actor& s) {
         return f
             .AskOp(s, ApplySparseGradientOp{IndexedSlices{Ids{20}, Tensor(Shape{1, 4}, 1.0f)}})
             .status();
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: apply_sparse_gradient: id 20 at position 0 is out of range [0, 11)"},
      {"unknown optimizer",
       [](DeterministicSystem& f, const shard_actor& s) {
         return f.AskOp(s, SetOptimizerOp{OptimizerSpec{"rmsprop_plus", {}}}).status();
       },
       absl::StatusCode::kInvalidArgument, ""},
      {"restore of the wrong shape",
       [](DeterministicSystem& f, const shard_actor& s) {
         TensorSlice bad;
         bad.value = Tensor(Shape{10, 4});
         return f.AskOp(s, RestoreOp{bad}).status();
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: restore: value: shape [10, 4] does not match expected [11, 4]"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    DeterministicSystem fixture;
    const shard_actor shard = SpawnTestShard(fixture, Adagrad());
    REQUIRE(fixture.AskOp(shard, ApplyDenseGradientOp{Tensor(Shape{11, 4}, 1.0f)}).ok());
    auto before = fixture.AskOp(shard, SnapshotOp{});
    REQUIRE(before.ok());
    const int64_t version_before = fixture.AskOp(shard, InfoOp{})->version;

    const absl::Status st = c.send(fixture, shard);
    CHECK(st.code() == c.code);
    if (!c.message.empty()) {
      CHECK(st.message() == c.message);
    } else {
      CHECK(absl::string_view(st.message()).substr(0, 12) == "emb/part_1: ");
    }

    auto after = fixture.AskOp(shard, SnapshotOp{});
    REQUIRE(after.ok());
    CHECK(SameTensor(after->value, before->value));
    REQUIRE(after->slots.size() == before->slots.size());
    for (size_t i = 0; i < after->slots.size(); ++i) {
      CHECK(SameTensor(after->slots[i], before->slots[i]));
    }
    CHECK(after->step == before->step);
    CHECK(fixture.AskOp(shard, InfoOp{})->version == version_before);
  }
}

TEST_CASE("a gradient sent to a shard without an optimizer is a failed precondition") {
  DeterministicSystem fixture;
  const shard_actor shard = SpawnTestShard(fixture);
  auto reply = fixture.AskOp(shard, ApplyDenseGradientOp{Tensor(Shape{11, 4})});
  CHECK(reply.status().code() == absl::StatusCode::kFailedPrecondition);
  auto set = fixture.AskOp(shard, SetOptimizerOp{OptimizerSpec{"sgd", {}}});
  REQUIRE(set.ok());
  CHECK(*set == 1);
  auto applied = fixture.AskOp(shard, ApplyDenseGradientOp{Tensor(Shape{11, 4}, 1.0f)});
  REQUIRE(applied.ok());
  CHECK(*applied == 2);
}

TEST_CASE("a snapshot restored into a fresh shard reproduces it, and the version moves on") {
  DeterministicSystem fixture;
  const shard_actor source = SpawnTestShard(fixture, Adagrad());
  REQUIRE(fixture.AskOp(source, ApplyDenseGradientOp{Iota(Shape{11, 4}, 0.2f)}).ok());
  REQUIRE(fixture
              .AskOp(source, ScatterRowsOp{ScatterOp::kAdd, IndexedSlices{Ids{1}, Tensor(Shape{1, 4}, 3.0f)}})
              .ok());
  auto snapshot = fixture.AskOp(source, SnapshotOp{});
  REQUIRE(snapshot.ok());
  CHECK(fixture.AskOp(source, InfoOp{})->version == 2);

  ShardSpec other = TestShardSpec(1, 3, 32, 4, Adagrad());
  other.initializer.seed = 12345;
  auto state = ShardState::Create(other);
  REQUIRE(state.ok());
  const shard_actor target = fixture.Track(SpawnShard(fixture.system(), std::move(state).value()));
  auto version = fixture.AskOp(target, RestoreOp{*snapshot});
  REQUIRE(version.ok());
  CHECK(*version == 1);  // a restore is one more update of the target

  auto restored = fixture.AskOp(target, SnapshotOp{});
  REQUIRE(restored.ok());
  CHECK(SameTensor(restored->value, snapshot->value));
  REQUIRE(restored->slots.size() == snapshot->slots.size());
  for (size_t i = 0; i < snapshot->slots.size(); ++i) {
    CHECK(SameTensor(restored->slots[i], snapshot->slots[i]));
  }
  CHECK(restored->step == snapshot->step);
}

TEST_CASE("an exited shard answers requests with an Unavailable error") {
  DeterministicSystem fixture;
  const shard_actor shard = SpawnTestShard(fixture);
  caf::anon_send_exit(shard, caf::exit_reason::user_shutdown);
  fixture.Run();
  auto reply = fixture.AskOp(shard, ReadOp{});
  CHECK(reply.status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera
