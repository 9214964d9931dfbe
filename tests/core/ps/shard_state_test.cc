#include "core/ps/shard_state.h"

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"

namespace tessera {
namespace {

// Shard 1 of 3 of a [10, 4] variable: rows [4, 7).
ShardSpec MakeSpec(std::optional<OptimizerSpec> optimizer = std::nullopt) {
  ShardSpec spec;
  spec.variable = "emb";
  spec.shard_index = 1;
  spec.num_shards = 3;
  spec.full_shape = Shape{10, 4};
  spec.row_offset = 4;
  spec.rows = 3;
  spec.initializer = InitializerSpec{"random_uniform", {{"minval", -1.0}, {"maxval", 1.0}}, 7};
  spec.optimizer = std::move(optimizer);
  return spec;
}

ShardState MakeShard(std::optional<OptimizerSpec> optimizer = std::nullopt) {
  auto shard = ShardState::Create(MakeSpec(std::move(optimizer)));
  REQUIRE(shard.ok());
  return std::move(shard).value();
}

OptimizerSpec Adagrad() { return OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}}; }

Tensor Iota(Shape shape, float base) {
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = base + 0.125f * static_cast<float>(i);
  return t;
}

bool Same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::equal(a.values().begin(), a.values().end(), b.values().begin());
}

TEST_CASE("shard names follow TF: name/part_i when partitioned, the bare name otherwise") {
  CHECK(ShardName("emb", 1, 3) == "emb/part_1");
  CHECK(ShardName("bias", 0, 1) == "bias");
}

TEST_CASE("a shard spec is validated before anything is built") {
  struct Case {
    const char* what;
    std::function<void(ShardSpec&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"empty name", [](ShardSpec& s) { s.variable = ""; },
       "shard spec: the variable name is empty"},
      {"index past the shards", [](ShardSpec& s) { s.shard_index = 3; },
       "shard spec emb/part_3: shard index 3 of 3 shards is out of range"},
      {"rows past the end", [](ShardSpec& s) { s.rows = 7; },
       "shard spec emb/part_1: rows [4, 11) do not lie inside the variable's 10 rows (shape "
       "[10, 4])"},
      {"negative offset", [](ShardSpec& s) { s.row_offset = -1; },
       "shard spec emb/part_1: rows [-1, 2) do not lie inside the variable's 10 rows (shape "
       "[10, 4])"},
      {"negative dim",
       [](ShardSpec& s) {
         s.full_shape = Shape{10, -4};
       },
       "shard spec emb/part_1: shape [10, -4] has a negative dimension at axis 1"},
      {"optimizer on int64",
       [](ShardSpec& s) {
         s.dtype = DType::kInt64;
         s.optimizer = OptimizerSpec{"sgd", {}};
       },
       "shard spec emb/part_1: optimizer 'sgd' needs a floating variable, dtype is int64"},
      {"dtype outside the enum", [](ShardSpec& s) { s.dtype = static_cast<DType>(42); },
       "shard spec emb/part_1: unknown dtype 42"},
      {"partitioned scalar", [](ShardSpec& s) { s.full_shape = Shape{}; },
       "shard spec emb/part_1: a scalar variable is one unpartitioned shard with offset 0 and 1 "
       "row, got 3 shards, offset 4, 3 rows"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    ShardSpec spec = MakeSpec();
    c.edit(spec);
    const absl::Status st = ValidateShardSpec(spec);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st.message() == c.message);
    CHECK(ShardState::Create(spec).status() == st);
  }
  CHECK(ValidateShardSpec(MakeSpec()).ok());
}

TEST_CASE("a shard initializes its own rows exactly as the whole variable would have them") {
  const ShardState shard = MakeShard();
  CHECK(shard.name() == "emb/part_1");
  CHECK(shard.block_shape() == Shape{3, 4});
  CHECK(shard.row_offset() == 4);
  CHECK(shard.version() == 0);
  const ShardSpec spec = MakeSpec();
  auto whole = MakeInitializedBlock(spec.initializer, spec.full_shape, 0, 10);
  REQUIRE(whole.ok());
  CHECK(Same(shard.value(), Tensor::Copy(whole->RowBlock(4, 3))));
}

// Note [Rows initialized on first touch]: whichever operation reaches a row first, the row
// holds its initializer's values before the operation applies.
TEST_CASE("rows untouched until an operation reaches them hold their initializer's values then") {
  const ShardSpec spec = MakeSpec();
  auto whole = MakeInitializedBlock(spec.initializer, spec.full_shape, 4, 3);
  REQUIRE(whole.ok());
  const Tensor& init = *whole;

  SUBCASE("a gather, then a sparse gradient, then a read") {
    ShardState shard = MakeShard(OptimizerSpec{"sgd", {{"learning_rate", 0.5}}});
    auto row1 = shard.Gather(Ids{1});
    REQUIRE(row1.ok());
    CHECK(Same(*row1, Tensor::Copy(init.view().RowBlock(1, 1))));
    REQUIRE(shard.ApplySparseGradient(Ids{2}, Tensor(Shape{1, 4}, 2.0f)).ok());
    const Tensor after = shard.Read();
    for (int64_t j = 0; j < 4; ++j) {
      CHECK(after.row(0)[j] == init.row(0)[j]);
      CHECK(after.row(1)[j] == init.row(1)[j]);
      CHECK(after.row(2)[j] == init.row(2)[j] - 0.5f * 2.0f);
    }
  }
  SUBCASE("a scatter_add adds to the initial values") {
    ShardState shard = MakeShard();
    REQUIRE(shard.Scatter(ScatterOp::kAdd, Ids{0}, Tensor(Shape{1, 4}, 1.0f)).ok());
    const Tensor after = shard.Read();
    for (int64_t j = 0; j < 4; ++j) {
      CHECK(after.row(0)[j] == init.row(0)[j] + 1.0f);
      CHECK(after.row(1)[j] == init.row(1)[j]);
    }
  }
  SUBCASE("a dense gradient and a snapshot see every row initialized") {
    ShardState shard = MakeShard(OptimizerSpec{"sgd", {{"learning_rate", 1.0}}});
    CHECK(Same(shard.Snapshot().value, init));
    ShardState other = MakeShard(OptimizerSpec{"sgd", {{"learning_rate", 1.0}}});
    REQUIRE(other.ApplyDenseGradient(Tensor(Shape{3, 4}, 0.25f)).ok());
    for (int64_t i = 0; i < init.size(); ++i) {
      CHECK(other.Read().values()[i] == init.values()[i] - 0.25f);
    }
  }
  SUBCASE("a restore replaces rows never touched, and a failed gather initializes nothing wrong") {
    ShardState shard = MakeShard();
    CHECK_FALSE(shard.Gather(Ids{1, 7}).ok());  // 7 is outside the block
    CHECK(Same(shard.Read(), init));
    ShardState fresh = MakeShard();
    TensorSlice slice = fresh.Snapshot();
    slice.value = Iota(Shape{3, 4}, 5.0f);
    ShardState restored = MakeShard();
    REQUIRE(restored.Restore(std::move(slice)).ok());
    CHECK(Same(restored.Read(), Iota(Shape{3, 4}, 5.0f)));
    auto gathered = restored.Gather(Ids{2});
    REQUIRE(gathered.ok());
    CHECK(Same(*gathered, Tensor::Copy(Iota(Shape{3, 4}, 5.0f).view().RowBlock(2, 1))));
  }
}

TEST_CASE("a scalar variable is one shard of shape [] that assigns but has no rows to scatter") {
  ShardSpec spec;
  spec.variable = "bias";
  spec.full_shape = Shape{};
  spec.rows = 1;
  spec.initializer = InitializerSpec{"constant", {{"value", 2.5}}, 0};
  auto shard = ShardState::Create(spec);
  REQUIRE(shard.ok());
  CHECK(shard->name() == "bias");
  CHECK(shard->block_shape() == Shape{});
  CHECK(shard->Read().values()[0] == 2.5f);
  REQUIRE(shard->Assign(AssignKind::kAdd, Tensor(Shape{}, 1.0f)).ok());
  CHECK(shard->Read().values()[0] == 3.5f);
  CHECK(shard->Scatter(ScatterOp::kAdd, Ids{0}, Tensor(Shape{1}, 1.0f)).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(shard->version() == 1);
}

TEST_CASE("an unknown optimizer or initializer fails creation with InvalidArgument") {
  auto bad_opt = ShardState::Create(MakeSpec(OptimizerSpec{"adamax_pro", {}}));
  CHECK(bad_opt.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(bad_opt.status().message(), "emb/part_1: "));
  ShardSpec spec = MakeSpec();
  spec.initializer.name = "fibonacci";
  auto bad_init = ShardState::Create(spec);
  CHECK(bad_init.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StartsWith(bad_init.status().message(), "emb/part_1: "));
}

TEST_CASE("read, gather, assign and scatter match a plain tensor and bump the version") {
  ShardState shard = MakeShard();
  Tensor reference = shard.Read();
  int64_t version = 0;

  auto gathered = shard.Gather(Ids{2, 0, 2});
  REQUIRE(gathered.ok());
  auto want = GatherRows(reference, Ids{2, 0, 2});
  REQUIRE(want.ok());
  CHECK(Same(*gathered, *want));
  CHECK(shard.version() == version);  // reads do not bump

  const Tensor value = Iota(Shape{3, 4}, 1.0f);
  for (AssignKind kind : {AssignKind::kAssign, AssignKind::kAdd, AssignKind::kSub}) {
    CAPTURE(AssignKindName(kind));
    REQUIRE(shard.Assign(kind, value).ok());
    REQUIRE(AssignBlock(kind, reference.view(), value).ok());
    CHECK(Same(shard.Read(), reference));
    CHECK(shard.version() == ++version);
  }
  for (ScatterOp op : {ScatterOp::kAdd, ScatterOp::kSub, ScatterOp::kMul, ScatterOp::kDiv,
                       ScatterOp::kMin, ScatterOp::kMax, ScatterOp::kUpdate}) {
    CAPTURE(ScatterOpName(op));
    const Ids ids = {2, 0, 2};
    const Tensor rows = Iota(Shape{3, 4}, 0.5f);
    REQUIRE(shard.Scatter(op, ids, rows).ok());
    REQUIRE(ScatterRows(op, reference.view(), ids, rows).ok());
    CHECK(Same(shard.Read(), reference));
    CHECK(shard.version() == ++version);
  }
}

TEST_CASE("a failed operation leaves the value, the slots and the version unchanged") {
  struct Case {
    const char* what;
    std::function<absl::Status(ShardState&)> op;
    absl::StatusCode code;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"gather out of range", [](ShardState& s) { return s.Gather(Ids{3}).status(); },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: gather: id 3 at position 0 is out of range [0, 3)"},
      {"assign shape mismatch",
       [](ShardState& s) {
         return s.Assign(AssignKind::kAdd, Tensor(Shape{10, 4}));
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: assign_add: shape [10, 4] does not match expected [3, 4]"},
      {"scatter id out of range",
       [](ShardState& s) {
         return s.Scatter(ScatterOp::kAdd, Ids{0, 4}, Tensor(Shape{2, 4}));
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: scatter_add: id 4 at position 1 is out of range [0, 3)"},
      {"scatter wrong width",
       [](ShardState& s) {
         return s.Scatter(ScatterOp::kUpdate, Ids{0}, Tensor(Shape{1, 5}));
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: scatter_update: rows of shape [1, 5] do not match the block's rows [1, 4] "
       "(block shape [3, 4])"},
      {"dense gradient shape mismatch",
       [](ShardState& s) {
         return s.ApplyDenseGradient(Tensor(Shape{3, 5}, 1.0f));
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: apply_dense_gradient: shape [3, 5] does not match expected [3, 4]"},
      {"sparse gradient id out of range",
       [](ShardState& s) {
         return s.ApplySparseGradient(Ids{1, -2}, Tensor(Shape{2, 4}, 1.0f));
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: apply_sparse_gradient: id -2 at position 1 is out of range [0, 3)"},
      {"sparse gradient wrong width",
       [](ShardState& s) {
         return s.ApplySparseGradient(Ids{1}, Tensor(Shape{1, 3}, 1.0f));
       },
       absl::StatusCode::kInvalidArgument,
       "emb/part_1: apply_sparse_gradient: rows of shape [1, 3] do not match the block's rows "
       "[1, 4] (block shape [3, 4])"},
      {"unknown optimizer",
       [](ShardState& s) {
         return s.SetOptimizer(OptimizerSpec{"nesterov_plus", {}});
       },
       absl::StatusCode::kInvalidArgument, nullptr},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    ShardState shard = MakeShard(Adagrad());
    REQUIRE(shard.Scatter(ScatterOp::kAdd, Ids{1}, Tensor(Shape{1, 4}, 1.0f)).ok());
    const TensorSlice before = shard.Snapshot();
    const int64_t version_before = shard.version();
    const absl::Status st = c.op(shard);
    CHECK(st.code() == c.code);
    if (c.message != nullptr) CHECK(st.message() == c.message);
    const TensorSlice after = shard.Snapshot();
    CHECK(Same(after.value, before.value));
    REQUIRE(after.slots.size() == before.slots.size());
    for (size_t i = 0; i < after.slots.size(); ++i) CHECK(Same(after.slots[i], before.slots[i]));
    CHECK(after.step == before.step);
    CHECK(shard.version() == version_before);
  }
}

TEST_CASE("gradients run the shard's optimizer rule on its block and slots") {
  ShardState shard = MakeShard(Adagrad());
  auto rule = MakeOptimizer(Adagrad());
  REQUIRE(rule.ok());
  Tensor value = shard.Read();
  OptimizerSlots slots = (*rule)->CreateSlots(value.shape());

  const Tensor dense = Iota(Shape{3, 4}, -0.5f);
  REQUIRE(shard.ApplyDenseGradient(dense).ok());
  REQUIRE((*rule)->ApplyDense(value.view(), slots, dense).ok());
  CHECK(Same(shard.Read(), value));
  CHECK(shard.version() == 1);

  const Ids ids = {2, 0, 2};  // the duplicate is summed by the rule
  const Tensor rows = Iota(Shape{3, 4}, 0.25f);
  REQUIRE(shard.ApplySparseGradient(ids, rows).ok());
  REQUIRE((*rule)->ApplySparse(value.view(), slots, ids, rows).ok());
  CHECK(Same(shard.Read(), value));
  REQUIRE(shard.slots().tensors.size() == slots.tensors.size());
  for (size_t i = 0; i < slots.tensors.size(); ++i) {
    CHECK(Same(shard.slots().tensors[i], slots.tensors[i]));
  }
  CHECK(shard.slots().step == slots.step);
  CHECK(shard.version() == 2);
}

TEST_CASE("plain SGD on a shard moves the touched rows by -lr * summed gradient") {
  ShardState shard = MakeShard(OptimizerSpec{"sgd", {{"learning_rate", 0.5}}});
  const Tensor before = shard.Read();
  REQUIRE(shard.ApplySparseGradient(Ids{1, 1}, Tensor(Shape{2, 4}, 2.0f)).ok());
  for (int64_t r = 0; r < 3; ++r) {
    for (int64_t j = 0; j < 4; ++j) {
      const float want = r == 1 ? before.row(r)[j] - 0.5f * 4.0f : before.row(r)[j];
      CHECK(shard.Read().row(r)[j] == doctest::Approx(want));
    }
  }
}

TEST_CASE("a gradient for a shard without an optimizer is a failed precondition") {
  ShardState shard = MakeShard();
  const absl::Status st = shard.ApplyDenseGradient(Tensor(Shape{3, 4}));
  CHECK(st.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(st.message() == "emb/part_1: apply_dense_gradient: the shard has no optimizer");
  CHECK(shard.ApplySparseGradient(Ids{0}, Tensor(Shape{1, 4})).code() ==
        absl::StatusCode::kFailedPrecondition);
  CHECK(shard.version() == 0);
}

TEST_CASE("SetOptimizer installs fresh slots, and setting the same rule again keeps them") {
  ShardState shard = MakeShard();
  REQUIRE(shard.SetOptimizer(Adagrad()).ok());
  CHECK(shard.version() == 1);
  REQUIRE(shard.optimizer() != nullptr);
  CHECK(shard.optimizer()->spec().name == "adagrad");
  REQUIRE(shard.ApplyDenseGradient(Tensor(Shape{3, 4}, 1.0f)).ok());
  const std::vector<Tensor> trained = shard.slots().tensors;
  REQUIRE(shard.SetOptimizer(Adagrad()).ok());
  CHECK(shard.version() == 2);  // unchanged: the same rule is a no-op
  for (size_t i = 0; i < trained.size(); ++i) CHECK(Same(shard.slots().tensors[i], trained[i]));
  REQUIRE(shard.SetOptimizer(OptimizerSpec{"sgd", {}}).ok());
  CHECK(shard.version() == 3);
  CHECK(shard.slots().step == 0);
}

TEST_CASE("snapshot and restore round-trip value, slots and step and the version moves forward") {
  ShardState source = MakeShard(Adagrad());
  REQUIRE(source.ApplyDenseGradient(Iota(Shape{3, 4}, 0.1f)).ok());
  REQUIRE(source.ApplySparseGradient(Ids{0}, Iota(Shape{1, 4}, -0.3f)).ok());
  const TensorSlice snapshot = source.Snapshot();
  CHECK(source.version() == 2);
  CHECK(snapshot.variable == "emb");
  CHECK(snapshot.full_shape == Shape{10, 4});
  CHECK(snapshot.row_offset == 4);
  REQUIRE(snapshot.slot_names == source.optimizer()->SlotNames());

  ShardSpec other_spec = MakeSpec(Adagrad());
  other_spec.initializer.seed = 99;  // starts from different values
  auto target = ShardState::Create(other_spec);
  REQUIRE(target.ok());
  REQUIRE(target->Restore(snapshot).ok());
  const TensorSlice restored = target->Snapshot();
  CHECK(Same(restored.value, snapshot.value));
  REQUIRE(restored.slots.size() == snapshot.slots.size());
  for (size_t i = 0; i < snapshot.slots.size(); ++i) {
    CHECK(Same(restored.slots[i], snapshot.slots[i]));
  }
  CHECK(restored.step == snapshot.step);
  CHECK(target->version() == 1);  // a restore is one more update

  // Training continues identically from the restored state.
  const Tensor grad = Iota(Shape{3, 4}, 0.7f);
  REQUIRE(source.ApplyDenseGradient(grad).ok());
  REQUIRE(target->ApplyDenseGradient(grad).ok());
  CHECK(Same(source.Read(), target->Read()));
}

TEST_CASE("a shard restored row run by row run, in any order, matches the whole snapshot") {
  ShardState source = MakeShard(Adagrad());
  REQUIRE(source.ApplyDenseGradient(Iota(Shape{3, 4}, 0.1f)).ok());
  REQUIRE(source.ApplySparseGradient(Ids{2}, Iota(Shape{1, 4}, -0.3f)).ok());
  const TensorSlice whole = source.Snapshot();
  const TensorSlice tail = source.SnapshotRows(1, 2);
  CHECK(tail.row_offset == 5);
  CHECK(tail.value.shape() == Shape{2, 4});
  CHECK(tail.step == 2);

  ShardSpec other_spec = MakeSpec(Adagrad());
  other_spec.initializer.seed = 99;  // starts from other values, initialized on first touch
  auto target = ShardState::Create(other_spec);
  REQUIRE(target.ok());
  REQUIRE(target->Restore(tail).ok());
  // Row 0 is still the target's own (its initializer's), rows 1..2 the source's.
  const TensorSlice halfway = target->Snapshot();
  CHECK_FALSE(
      Same(Tensor::Copy(halfway.value.RowBlock(0, 1)), Tensor::Copy(whole.value.RowBlock(0, 1))));
  CHECK(Same(Tensor::Copy(halfway.value.RowBlock(1, 2)), tail.value));
  REQUIRE(target->Restore(source.SnapshotRows(0, 1)).ok());
  const TensorSlice restored = target->Snapshot();
  CHECK(Same(restored.value, whole.value));
  REQUIRE(restored.slots.size() == 1);
  CHECK(Same(restored.slots[0], whole.slots[0]));
  CHECK(restored.step == whole.step);
  CHECK(target->version() == 2);  // one per part
}

TEST_CASE("a snapshot without slots restores the value and gives the optimizer fresh slots") {
  ShardState shard = MakeShard(Adagrad());
  REQUIRE(shard.ApplyDenseGradient(Tensor(Shape{3, 4}, 1.0f)).ok());
  TensorSlice value_only;  // names no variable: only its shapes are checked
  value_only.value = Iota(Shape{3, 4}, 2.0f);
  REQUIRE(shard.Restore(value_only).ok());
  CHECK(Same(shard.Read(), value_only.value));
  const OptimizerSlots fresh = shard.optimizer()->CreateSlots(Shape{3, 4});
  for (size_t i = 0; i < fresh.tensors.size(); ++i) {
    CHECK(Same(shard.slots().tensors[i], fresh.tensors[i]));
  }
  CHECK(shard.version() == 2);
}

TEST_CASE("restore rejects a wrong shape or wrong slots and leaves the shard unchanged") {
  struct Case {
    const char* what;
    std::function<void(TensorSlice&)> edit;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"value shape",
       [](TensorSlice& s) {
         s.value = Tensor(Shape{4, 4});
       },
       "emb/part_1: restore: value: shape [4, 4] does not match expected [3, 4]"},
      {"slot names",
       [](TensorSlice& s) {
         s.slot_names = {"m", "v"};
       },
       nullptr},
      {"slot count",
       [](TensorSlice& s) {
         s.slots.push_back(Tensor(Shape{3, 4}));
       },
       nullptr},
      {"slot shape",
       [](TensorSlice& s) {
         s.slots[0] = Tensor(Shape{3, 1});
       },
       nullptr},
      {"negative step", [](TensorSlice& s) { s.step = -1; },
       "emb/part_1: restore: negative step -1"},
      {"another shard's rows", [](TensorSlice& s) { s.row_offset = 0; },
       "emb/part_1: restore: the slice holds rows from 0 of emb, the shard rows from 4"},
      {"some rows, not all the shard's",
       [](TensorSlice& s) {
         s.row_offset = 6;
         s.value = Tensor(Shape{2, 4});
         s.slots[0] = Tensor(Shape{2, 4});
       },
       "emb/part_1: restore: the slice's rows 6..8 are not all the shard's (4..7)"},
      {"some rows without their slots",
       [](TensorSlice& s) {
         s.value = Tensor(Shape{2, 4});
         s.slot_names.clear();
         s.slots.clear();
       },
       "emb/part_1: restore: a slice of some of the shard's rows must carry their slots "
       "[accumulator]"},
      {"some rows, another row size",
       [](TensorSlice& s) {
         s.value = Tensor(Shape{2, 3});
         s.slots[0] = Tensor(Shape{2, 3});
       },
       "emb/part_1: restore: value: shape [2, 3] does not match expected [3, 4]"},
      {"another variable", [](TensorSlice& s) { s.variable = "other"; }, nullptr},
      {"another full shape",
       [](TensorSlice& s) {
         s.full_shape = Shape{11, 4};
       },
       nullptr},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    ShardState shard = MakeShard(Adagrad());
    REQUIRE(shard.ApplyDenseGradient(Tensor(Shape{3, 4}, 1.0f)).ok());
    REQUIRE(shard.ApplyDenseGradient(Tensor(Shape{3, 4}, 0.5f)).ok());
    const TensorSlice before = shard.Snapshot();
    const int64_t version_before = shard.version();
    TensorSlice bad = before;
    bad.value = Iota(Shape{3, 4}, 5.0f);
    c.edit(bad);
    const absl::Status st = shard.Restore(bad);
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    if (c.message != nullptr) CHECK(st.message() == c.message);
    CHECK(Same(shard.Read(), before.value));
    for (size_t i = 0; i < before.slots.size(); ++i) {
      CHECK(Same(shard.slots().tensors[i], before.slots[i]));
    }
    CHECK(shard.version() == version_before);
  }
  ShardState plain = MakeShard();
  TensorSlice with_slots = MakeShard(Adagrad()).Snapshot();
  const absl::Status st = plain.Restore(with_slots);
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(st.message(), "(the shard has no optimizer)"));
}

TEST_CASE("a shard reports its bytes and description") {
  const ShardState shard = MakeShard(Adagrad());
  const ShardInfo info = shard.Info();
  CHECK(info.name == "emb/part_1");
  CHECK(info.full_shape == Shape{10, 4});
  CHECK(info.block_shape == Shape{3, 4});
  CHECK(info.row_offset == 4);
  CHECK(info.optimizer == "adagrad");
  const int64_t slots = static_cast<int64_t>(shard.optimizer()->SlotNames().size());
  CHECK(info.bytes == 3 * 4 * 4 * (1 + slots));
  CHECK(MakeShard().bytes() == 3 * 4 * 4);
}

TEST_CASE("a shard counts the updates that name each row and reports the hottest") {
  ShardState shard = MakeShard(Adagrad());  // rows [4, 7) of emb
  ShardInfo info = shard.Info(5);
  CHECK(info.updates == 0);
  CHECK(info.rows_touched == 0);
  CHECK(info.hottest_rows.empty());

  // Local row 2 three times (once repeated within one gradient), row 0 once; a gather counts
  // nothing.
  REQUIRE(shard.ApplySparseGradient(Ids{2, 2}, Iota(Shape{2, 4}, 0.5f)).ok());
  REQUIRE(shard.Scatter(ScatterOp::kAdd, Ids{0, 2}, Iota(Shape{2, 4}, 1.0f)).ok());
  REQUIRE(shard.Gather(Ids{1, 1, 1}).ok());
  CHECK(shard.RowUpdates(2) == 3);
  CHECK(shard.RowUpdates(0) == 1);
  CHECK(shard.RowUpdates(1) == 0);
  CHECK(shard.RowUpdates(3) == 0);  // outside the block
  info = shard.Info(5);
  CHECK(info.updates == 2);
  CHECK(info.version == 2);
  CHECK(info.rows_touched == 2);
  REQUIRE(info.hottest_rows.size() == 2);  // rows never updated are left out
  CHECK(info.hottest_rows[0].row == 6);    // global: offset 4 + local 2
  CHECK(info.hottest_rows[0].updates == 3);
  CHECK(info.hottest_rows[1].row == 4);
  CHECK(info.hottest_rows[1].updates == 1);
  CHECK(shard.Info(1).hottest_rows.size() == 1);
  CHECK(shard.Info().hottest_rows.empty());  // not asked for
  CHECK(shard.Info(-3).hottest_rows.empty());

  // A failed update counts nothing; an optimizer change and a restore are versions, not updates.
  CHECK(!shard.ApplySparseGradient(Ids{1, 9}, Iota(Shape{2, 4}, 0.5f)).ok());
  CHECK(shard.RowUpdates(1) == 0);
  REQUIRE(shard.SetOptimizer(OptimizerSpec{"sgd", {{"learning_rate", 0.1}}}).ok());
  REQUIRE(shard.Restore(shard.Snapshot()).ok());
  info = shard.Info(5);
  CHECK(info.version == 4);
  CHECK(info.updates == 2);
  CHECK(shard.RowUpdates(2) == 3);  // counts outlive a restore; a checkpoint does not hold them

  // A dense update counts every row once: all touched, the order unchanged, ties by lower row.
  REQUIRE(shard.ApplyDenseGradient(Iota(Shape{3, 4}, 0.0f)).ok());
  info = shard.Info(5);
  CHECK(info.updates == 3);
  CHECK(info.rows_touched == 3);
  REQUIRE(info.hottest_rows.size() == 3);
  CHECK(info.hottest_rows[0].row == 6);
  CHECK(info.hottest_rows[0].updates == 4);
  CHECK(info.hottest_rows[1].row == 4);
  CHECK(info.hottest_rows[1].updates == 2);
  CHECK(info.hottest_rows[2].row == 5);
  CHECK(info.hottest_rows[2].updates == 1);
}

TEST_CASE("a shard only ever updated densely has no hottest rows, every row touched") {
  ShardState shard = MakeShard(Adagrad());  // rows [4, 7) of emb
  REQUIRE(shard.ApplyDenseGradient(Iota(Shape{3, 4}, 0.0f)).ok());
  REQUIRE(shard.ApplyDenseGradient(Iota(Shape{3, 4}, 0.0f)).ok());
  const ShardInfo info = shard.Info(5);
  CHECK(info.updates == 2);
  CHECK(info.rows_touched == 3);
  CHECK(shard.RowUpdates(1) == 2);
  CHECK(info.hottest_rows.empty());
  // Once an update names rows, they are ranked, the dense updates counted in.
  REQUIRE(shard.Scatter(ScatterOp::kAdd, Ids{1}, Iota(Shape{1, 4}, 1.0f)).ok());
  const ShardInfo mixed = shard.Info(5);
  REQUIRE(mixed.hottest_rows.size() == 3);
  CHECK(mixed.hottest_rows[0].row == 5);
  CHECK(mixed.hottest_rows[0].updates == 3);
}

TEST_CASE("the hottest rows are the K largest counts, ties to the lower row, K clamped") {
  ShardSpec spec = MakeSpec(OptimizerSpec{"sgd", {{"learning_rate", 0.1}}});
  spec.num_shards = 1;
  spec.shard_index = 0;
  spec.full_shape = Shape{1000, 2};
  spec.row_offset = 0;
  spec.rows = 1000;
  auto created = ShardState::Create(spec);
  REQUIRE(created.ok());
  ShardState shard = std::move(created).value();
  // Row r is named (r % 37) times; the hottest counts are 36 (rows 36, 73, 110, ...), then 35.
  Ids ids;
  for (int64_t r = 0; r < 1000; ++r) {
    for (int64_t k = 0; k < r % 37; ++k) ids.push_back(r);
  }
  REQUIRE(shard.Scatter(ScatterOp::kAdd, ids, Tensor(Shape{static_cast<int64_t>(ids.size()), 2}, 0.0f)).ok());
  const std::vector<HotRow> hot = shard.HottestRows(30);
  // 27 rows count 36 (36 + 37j <= 999: j = 0..26), then rows with 35 from row 35 on.
  REQUIRE(hot.size() == 30);
  for (int j = 0; j < 27; ++j) {
    CHECK(hot[j].row == 36 + 37 * j);
    CHECK(hot[j].updates == 36);
  }
  CHECK(hot[27].row == 35);
  CHECK(hot[27].updates == 35);
  CHECK(hot[29].row == 35 + 2 * 37);
  CHECK(shard.rows_touched() == 1000 - 28);  // rows 0, 37, ..., 999 are never named
  CHECK(shard.HottestRows(100000).size() == static_cast<size_t>(kMaxHottestRows));
}

}  // namespace
}  // namespace tessera
