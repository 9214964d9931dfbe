// ShardOp and ApplyShardOp (core/ps/shard_op.h): each op kind applied to a ShardState, its result
// kind, its errors with the shard left as it was, and the op's name and classification. Exactly-
// once updates and RestorePart have their own cases in update_ledger_test.cc.
#include "core/ps/shard_op.h"

#include <doctest/doctest.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "core/ps/shard_state.h"
#include "core/variables/indexed_slices.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using ::tessera::testing::ValueOrDie;

// An in-memory SliceStore: Write keeps a copy of each slice by path (read chunk by chunk, as a
// slice file writer reads a snapshot); ReadBlock answers the rows asked of the one file named by
// the variable's first slice. `fail_with`, when set, is every call's answer.
class MemSliceStore final : public SliceStore {
 public:
  absl::Status Write(const std::string& path, const TensorSliceView& view) const override {
    ++writes_;
    if (!fail_with.ok()) return fail_with;
    TensorSlice slice;
    slice.variable = view.variable;
    slice.full_shape = view.full_shape;
    slice.dtype = view.dtype;
    slice.row_offset = view.row_offset;
    slice.slot_names = view.slot_names;
    slice.step = view.step;
    slice.checkpoint = view.checkpoint;
    std::vector<ConstTensorView> tensors = {view.value};
    tensors.insert(tensors.end(), view.slots.begin(), view.slots.end());
    for (size_t i = 0; i < tensors.size(); ++i) {
      Tensor t(tensors[i].shape());
      if (view.chunks) {
        const int64_t bytes = t.size() * static_cast<int64_t>(sizeof(float));
        int64_t at = 0;
        for (int64_t chunk = 0; at < bytes; ++chunk) {
          absl::Status st = view.chunks(i, chunk, [&](absl::string_view data) {
            std::memcpy(reinterpret_cast<char*>(t.data()) + at, data.data(), data.size());
            at += static_cast<int64_t>(data.size());
            return absl::OkStatus();
          });
          if (!st.ok()) return st;
        }
      } else {
        t = Tensor::Copy(tensors[i]);
      }
      (i == 0 ? slice.value : slice.slots.emplace_back()) = std::move(t);
    }
    files_[path] = std::move(slice);
    return absl::OkStatus();
  }

  absl::StatusOr<TensorSlice> ReadBlock(const std::string& dir, const CheckpointVariable& variable,
                                        int64_t offset, int64_t rows) const override {
    if (!fail_with.ok()) return fail_with;
    auto it = files_.find(dir + "/" + variable.slices.at(0).file);
    if (it == files_.end()) return absl::NotFoundError("no such slice file");
    TensorSlice block = it->second;
    REQUIRE(block.row_offset == offset);
    REQUIRE(block.value.rows() == rows);
    return block;
  }

  const TensorSlice* File(const std::string& path) const {
    auto it = files_.find(path);
    return it == files_.end() ? nullptr : &it->second;
  }
  int writes() const { return writes_; }

  absl::Status fail_with = absl::OkStatus();

 private:
  mutable std::map<std::string, TensorSlice> files_;
  mutable int writes_ = 0;
};

// Shard 1 of 2 of a [6, 2] variable: rows [3, 6), ones, with Adagrad unless told otherwise.
ShardSpec Spec(std::optional<OptimizerSpec> optimizer =
                   OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}}) {
  ShardSpec spec;
  spec.variable = "emb";
  spec.shard_index = 1;
  spec.num_shards = 2;
  spec.full_shape = Shape{6, 2};
  spec.row_offset = 3;
  spec.rows = 3;
  spec.initializer = InitializerSpec{"ones", {}, 0};
  spec.optimizer = std::move(optimizer);
  return spec;
}

ShardState Shard(std::optional<OptimizerSpec> optimizer =
                     OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}}) {
  return ValueOrDie(ShardState::Create(Spec(std::move(optimizer))), "creating the shard");
}

std::vector<float> Values(const Tensor& t) { return {t.values().begin(), t.values().end()}; }

Tensor Iota(Shape shape, float base) {
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = base + static_cast<float>(i);
  return t;
}

// The manifest entry of a one-file checkpoint of the shard's variable.
CheckpointVariable VariableSavedIn(const std::string& file, const ShardState& shard) {
  CheckpointVariable variable;
  variable.name = shard.spec().variable;
  variable.shape = shard.full_shape();
  variable.dtype = shard.spec().dtype;
  variable.slices = {SliceFileRef{file, shard.row_offset(), shard.spec().rows}};
  return variable;
}

// What a failed op must leave as it was.
struct Observed {
  std::vector<float> value;
  std::vector<std::vector<float>> slots;
  int64_t step = 0;
  int64_t version = 0;
};

Observed Observe(const ShardState& shard) {
  Observed o;
  o.value = Values(shard.value());
  for (const Tensor& slot : shard.slots().tensors) o.slots.push_back(Values(slot));
  o.step = shard.slots().step;
  o.version = shard.version();
  return o;
}

void CheckSame(const Observed& a, const Observed& b) {
  CHECK(a.value == b.value);
  CHECK(a.slots == b.slots);
  CHECK(a.step == b.step);
  CHECK(a.version == b.version);
}

TEST_CASE("every op names itself, and only the ops that change a shard say they do") {
  struct Case {
    ShardOp op;
    const char* name;
    bool changes;
    bool updates_rows;
  };
  const std::vector<Case> cases = {
      {InfoOp{}, "info", false, false},
      {ReadOp{}, "read", false, false},
      {GatherOp{}, "gather", false, false},
      {AssignOp{}, "assign", true, true},
      {ScatterRowsOp{}, "scatter", true, true},
      {ApplyDenseGradientOp{}, "apply_gradient", true, true},
      {ApplySparseGradientOp{}, "apply_sparse_gradient", true, true},
      {SetOptimizerOp{}, "set_optimizer", true, false},
      {SnapshotOp{}, "snapshot", false, false},
      {RestoreOp{}, "restore", true, false},
      {SaveOp{}, "save", false, false},
      {LoadOp{}, "load", true, false},
  };
  REQUIRE(cases.size() == std::variant_size_v<ShardOp>);
  for (Case c : cases) {
    CAPTURE(c.name);
    CHECK(ShardOpName(c.op) == c.name);
    CHECK(ChangesShard(c.op) == c.changes);
    CHECK((UpdateIdOf(c.op) != nullptr) == c.updates_rows);
  }
}

TEST_CASE("UpdateIdOf points at the op's own UpdateId, so a sender can tag it in place") {
  ShardOp op = ApplySparseGradientOp{};
  UpdateId* id = UpdateIdOf(op);
  REQUIRE(id != nullptr);
  *id = UpdateId{7, 3, 1, 2};
  CHECK(std::get<ApplySparseGradientOp>(op).update.closure == 3);
  CHECK(std::get<ApplySparseGradientOp>(op).update.queue == 7);
}

TEST_CASE("ResultOf takes an op's result out, and a result of another kind is data loss") {
  CHECK(ValueOrDie(ResultOf<AssignOp>(ShardVersion{4})).version == 4);
  const absl::StatusOr<ShardValue> wrong = ResultOf<GatherOp>(ShardVersion{4});
  CHECK(wrong.status().code() == absl::StatusCode::kDataLoss);
  CHECK(wrong.status().message() == "a gather was answered with a result of kind 0");
}

TEST_CASE("reads answer the shard's rows and version and change nothing") {
  ShardState shard = Shard();
  REQUIRE(shard.Assign(AssignKind::kAssign, Iota(Shape{3, 2}, 0.0f)).ok());
  const Observed before = Observe(shard);

  const ShardValue read = ValueOrDie(ResultOf<ReadOp>(ValueOrDie(ApplyShardOp(shard, ReadOp{},
                                                                              nullptr))));
  CHECK(Values(read.value) == before.value);
  CHECK(read.version == 1);

  const ShardValue gathered = ValueOrDie(
      ResultOf<GatherOp>(ValueOrDie(ApplyShardOp(shard, GatherOp{Ids{2, 0, 2}}, nullptr))));
  CHECK(gathered.value.shape() == Shape{3, 2});
  CHECK(Values(gathered.value) == std::vector<float>{4, 5, 0, 1, 4, 5});
  CHECK(gathered.version == 1);

  const ShardInfo info = ValueOrDie(
      ResultOf<InfoOp>(ValueOrDie(ApplyShardOp(shard, InfoOp{/*hottest_rows=*/2}, nullptr))));
  CHECK(info.name == "emb/part_1");
  CHECK(info.row_offset == 3);
  CHECK(info.optimizer == "adagrad");
  CHECK(info.version == 1);
  CHECK(info.rows_touched == 3);          // the assign named every row,
  CHECK(info.hottest_rows.empty());       // so no row is hotter than another

  const TensorSlice snapshot = ValueOrDie(
      ResultOf<SnapshotOp>(ValueOrDie(ApplyShardOp(shard, SnapshotOp{}, nullptr))));
  CHECK(snapshot.variable == "emb");
  CHECK(snapshot.row_offset == 3);
  CHECK(Values(snapshot.value) == before.value);
  CHECK(snapshot.slot_names == shard.optimizer()->SlotNames());

  CheckSame(Observe(shard), before);
}

TEST_CASE("each mutating op answers the shard's new version") {
  ShardState shard = Shard();
  auto version_after = [&](ShardOp op) {
    CAPTURE(ShardOpName(op));
    absl::StatusOr<ShardOpResult> result = ApplyShardOp(shard, std::move(op), nullptr);
    REQUIRE_MESSAGE(result.ok(), result.status().ToString());
    REQUIRE(std::holds_alternative<ShardVersion>(*result));
    const int64_t version = std::get<ShardVersion>(*result).version;
    CHECK(version == shard.version());
    return version;
  };

  CHECK(version_after(AssignOp{AssignKind::kAssign, Tensor(Shape{3, 2}, 2.0f), {}}) == 1);
  CHECK(Values(shard.Read()) == std::vector<float>(6, 2.0f));
  CHECK(version_after(AssignOp{AssignKind::kSub, Tensor(Shape{3, 2}, 0.5f), {}}) == 2);
  CHECK(Values(shard.Read()) == std::vector<float>(6, 1.5f));

  CHECK(version_after(ScatterRowsOp{ScatterOp::kAdd,
                                    IndexedSlices{Ids{1}, Tensor(Shape{1, 2}, 1.0f)}, {}}) == 3);
  CHECK(Values(shard.Read()) == std::vector<float>{1.5f, 1.5f, 2.5f, 2.5f, 1.5f, 1.5f});

  CHECK(version_after(ApplyDenseGradientOp{Tensor(Shape{3, 2}, 1.0f), {}}) == 4);
  CHECK(shard.slots().step == 1);
  CHECK(version_after(
            ApplySparseGradientOp{IndexedSlices{Ids{0, 0}, Tensor(Shape{2, 2}, 1.0f)}, {}}) == 5);
  CHECK(shard.slots().step == 2);

  CHECK(version_after(SetOptimizerOp{OptimizerSpec{"sgd", {{"learning_rate", 0.1}}}}) == 6);
  CHECK(shard.optimizer()->spec().name == "sgd");

  const TensorSlice saved = shard.Snapshot();
  REQUIRE(shard.Assign(AssignKind::kAssign, Tensor(Shape{3, 2}, 9.0f)).ok());
  CHECK(version_after(RestoreOp{saved, {}}) == 8);
  CHECK(Values(shard.Read()) == Values(saved.value));
}

TEST_CASE("a failed op answers the shard's error and leaves value, slots and version unchanged") {
  struct Case {
    const char* what;
    ShardOp op;
    absl::StatusCode code;
  };
  const std::vector<Case> cases = {
      {"gather out of range", GatherOp{Ids{3}}, absl::StatusCode::kInvalidArgument},
      {"assign of another shape", AssignOp{AssignKind::kAdd, Tensor(Shape{2, 2}, 1.0f), {}},
       absl::StatusCode::kInvalidArgument},
      {"scatter out of range",
       ScatterRowsOp{ScatterOp::kAdd, IndexedSlices{Ids{0, 5}, Tensor(Shape{2, 2}, 1.0f)}, {}},
       absl::StatusCode::kInvalidArgument},
      {"dense gradient of another shape", ApplyDenseGradientOp{Tensor(Shape{3, 1}, 1.0f), {}},
       absl::StatusCode::kInvalidArgument},
      {"sparse gradient of the wrong width",
       ApplySparseGradientOp{IndexedSlices{Ids{0}, Tensor(Shape{1, 3}, 1.0f)}, {}},
       absl::StatusCode::kInvalidArgument},
      {"unknown optimizer", SetOptimizerOp{OptimizerSpec{"no_such_rule", {}}},
       absl::StatusCode::kInvalidArgument},
      {"restore of another shape", RestoreOp{TensorSlice{"", Shape{}, DType::kFloat32, 0,
                                                         Tensor(Shape{2, 2}, 1.0f)},
                                             {}},
       absl::StatusCode::kInvalidArgument},
      {"save without a store", SaveOp{"dir", "file", {}, false},
       absl::StatusCode::kFailedPrecondition},
      {"load without a store", LoadOp{"dir", {}}, absl::StatusCode::kFailedPrecondition},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    ShardState shard = Shard();
    REQUIRE(shard.ApplyDenseGradient(Iota(Shape{3, 2}, 1.0f)).ok());
    const Observed before = Observe(shard);
    const absl::StatusOr<ShardOpResult> result = ApplyShardOp(shard, c.op, nullptr);
    CHECK(result.status().code() == c.code);
    CHECK(absl::StartsWith(result.status().message(), "emb/part_1"));
    CheckSame(Observe(shard), before);
  }
}

TEST_CASE("a gradient for a shard without an optimizer is a failed precondition") {
  ShardState shard = Shard(std::nullopt);
  const Observed before = Observe(shard);
  CHECK(ApplyShardOp(shard, ApplyDenseGradientOp{Tensor(Shape{3, 2}, 1.0f), {}}, nullptr)
            .status()
            .code() == absl::StatusCode::kFailedPrecondition);
  CHECK(ApplyShardOp(shard, ApplySparseGradientOp{IndexedSlices{Ids{0}, Tensor(Shape{1, 2}, 1.0f)},
                                                  {}},
                     nullptr)
            .status()
            .code() == absl::StatusCode::kFailedPrecondition);
  CheckSame(Observe(shard), before);
}

TEST_CASE("a save writes the shard's block, slots and step and answers the manifest's entry") {
  MemSliceStore store;
  ShardState shard = Shard();
  REQUIRE(shard.ApplyDenseGradient(Iota(Shape{3, 2}, 1.0f)).ok());
  const Observed before = Observe(shard);
  const CheckpointId checkpoint{RunId{}, 40};

  const SavedSlice saved = ValueOrDie(ResultOf<SaveOp>(ValueOrDie(
      ApplyShardOp(shard, SaveOp{"ckpt", "emb-1.slice", checkpoint, false}, &store))));
  CHECK(saved.ref.file == "emb-1.slice");
  CHECK(saved.ref.row_offset == 3);
  CHECK(saved.ref.rows == 3);
  CHECK(saved.slot_names == shard.optimizer()->SlotNames());
  CHECK(saved.step == 1);
  REQUIRE(saved.optimizer.has_value());
  CHECK(saved.optimizer->name == "adagrad");

  const TensorSlice* file = store.File("ckpt/emb-1.slice");
  REQUIRE(file != nullptr);
  CHECK(file->variable == "emb");
  CHECK(file->full_shape == Shape{6, 2});
  CHECK(file->row_offset == 3);
  CHECK(file->checkpoint == checkpoint);
  CHECK(file->step == 1);
  CHECK(Values(file->value) == before.value);
  REQUIRE(file->slots.size() == before.slots.size());
  for (size_t i = 0; i < file->slots.size(); ++i) CHECK(Values(file->slots[i]) == before.slots[i]);
  CheckSame(Observe(shard), before);  // a save changes nothing

  // Without an optimizer: no slots and no spec.
  ShardState plain = Shard(std::nullopt);
  const SavedSlice bare = ValueOrDie(ResultOf<SaveOp>(
      ValueOrDie(ApplyShardOp(plain, SaveOp{"ckpt", "plain.slice", checkpoint, false}, &store))));
  CHECK(bare.slot_names.empty());
  CHECK_FALSE(bare.optimizer.has_value());
}

TEST_CASE("a store's failure to write is the save's error, naming the shard") {
  MemSliceStore store;
  store.fail_with = absl::UnavailableError("disk full");
  ShardState shard = Shard();
  const absl::Status st =
      ApplyShardOp(shard, SaveOp{"ckpt", "f", {}, false}, &store).status();
  CHECK(st.code() == absl::StatusCode::kUnavailable);
  CHECK(absl::StrContains(st.message(), "saving emb/part_1"));
  CHECK(absl::StrContains(st.message(), "disk full"));
}

TEST_CASE("a snapshot written off the shard is the same file and result as an in-place save") {
  MemSliceStore store;
  ShardState shard = Shard();
  REQUIRE(shard.ApplyDenseGradient(Iota(Shape{3, 2}, 1.0f)).ok());
  const CheckpointId checkpoint{RunId{}, 7};
  const SavedSlice in_place = ValueOrDie(ResultOf<SaveOp>(
      ValueOrDie(ApplyShardOp(shard, SaveOp{"ckpt", "a", checkpoint, false}, &store))));
  const Observed at_cut = Observe(shard);

  std::shared_ptr<const ShardSnapshot> snapshot = StartSnapshot(shard);
  // The shard goes on; the snapshot still writes the rows as they were at the cut.
  REQUIRE(shard.Assign(AssignKind::kAssign, Tensor(Shape{3, 2}, -1.0f)).ok());
  const SavedSlice off = ValueOrDie(
      WriteSnapshot(*snapshot, SaveOp{"ckpt", "b", checkpoint, true}, store));
  CHECK(off.ref.file == "b");
  CHECK(off.ref.row_offset == in_place.ref.row_offset);
  CHECK(off.ref.rows == in_place.ref.rows);
  CHECK(off.slot_names == in_place.slot_names);
  CHECK(off.step == in_place.step);
  CHECK(off.optimizer.has_value());

  const TensorSlice* a = store.File("ckpt/a");
  const TensorSlice* b = store.File("ckpt/b");
  REQUIRE(a != nullptr);
  REQUIRE(b != nullptr);
  CHECK(Values(b->value) == at_cut.value);
  CHECK(Values(b->value) == Values(a->value));
  REQUIRE(b->slots.size() == a->slots.size());
  for (size_t i = 0; i < b->slots.size(); ++i) CHECK(Values(b->slots[i]) == Values(a->slots[i]));
  CHECK(b->checkpoint == checkpoint);
  CHECK(Values(shard.Read()) == std::vector<float>(6, -1.0f));
}

TEST_CASE("a load restores the shard's rows from the slices it overlaps") {
  MemSliceStore store;
  ShardState source = Shard();
  REQUIRE(source.ApplyDenseGradient(Iota(Shape{3, 2}, 1.0f)).ok());
  REQUIRE(ApplyShardOp(source, SaveOp{"ckpt", "s", {}, false}, &store).ok());
  const Observed saved = Observe(source);

  ShardState shard = Shard();
  const ShardVersion version = ValueOrDie(ResultOf<LoadOp>(
      ValueOrDie(ApplyShardOp(shard, LoadOp{"ckpt", VariableSavedIn("s", shard)}, &store))));
  CHECK(version.version == 1);
  const Observed loaded = Observe(shard);
  CHECK(loaded.value == saved.value);
  CHECK(loaded.slots == saved.slots);
  CHECK(loaded.step == saved.step);

  // A shard without an optimizer takes the values alone.
  ShardState plain = Shard(std::nullopt);
  REQUIRE(ApplyShardOp(plain, LoadOp{"ckpt", VariableSavedIn("s", plain)}, &store).ok());
  CHECK(Values(plain.Read()) == saved.value);
  CHECK(plain.slots().tensors.empty());
}

TEST_CASE("a load that does not fit the shard is refused and leaves it unchanged") {
  MemSliceStore store;
  ShardState source = Shard();
  REQUIRE(source.ApplyDenseGradient(Iota(Shape{3, 2}, 1.0f)).ok());
  REQUIRE(ApplyShardOp(source, SaveOp{"ckpt", "s", {}, false}, &store).ok());

  struct Case {
    const char* what;
    std::function<void(CheckpointVariable&, MemSliceStore&)> edit;
    std::optional<OptimizerSpec> optimizer;
    absl::StatusCode code;
    const char* message_part;
  };
  const std::vector<Case> cases = {
      {"another shape", [](CheckpointVariable& v, MemSliceStore&) { v.shape = Shape{6, 3}; },
       OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}}, absl::StatusCode::kInvalidArgument,
       "has shape [6, 3] but the variable has [6, 2]"},
      {"another dtype", [](CheckpointVariable& v, MemSliceStore&) { v.dtype = DType::kInt64; },
       OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}}, absl::StatusCode::kInvalidArgument,
       "the checkpoint's dtype is int64"},
      {"another optimizer's slots", [](CheckpointVariable&, MemSliceStore&) {},
       OptimizerSpec{"adam", {}}, absl::StatusCode::kInvalidArgument,
       "the checkpoint has optimizer slots"},
      {"a store that cannot read",
       [](CheckpointVariable&, MemSliceStore& s) { s.fail_with = absl::DataLossError("bad crc"); },
       OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}}, absl::StatusCode::kDataLoss, "bad crc"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    ShardState shard = Shard(c.optimizer);
    REQUIRE(shard.Assign(AssignKind::kAssign, Tensor(Shape{3, 2}, 5.0f)).ok());
    const Observed before = Observe(shard);
    CheckpointVariable variable = VariableSavedIn("s", shard);
    c.edit(variable, store);
    const absl::Status st = ApplyShardOp(shard, LoadOp{"ckpt", variable}, &store).status();
    store.fail_with = absl::OkStatus();
    CHECK(st.code() == c.code);
    CHECK_MESSAGE(absl::StrContains(st.message(), c.message_part), st.message());
    CheckSame(Observe(shard), before);
  }
}

}  // namespace
}  // namespace tessera
