#include "actors/base/messages.h"

#include <doctest/doctest.h>

#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <caf/deep_to_string.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/mirrored/mirrored_replica_actor.h"
#include "tests/actors/actor_test_util.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using testing::SameTensor;
using testing::ValueOrDie;

template <class T>
std::vector<char> Save(const T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  T copy = x;
  const caf::error err = sink(copy);
  REQUIRE(!err);
  return buf;
}

template <class T>
absl::Status Load(const std::vector<char>& buf, T& x) {
  caf::binary_deserializer source{nullptr, buf};
  return ErrorToStatus(source(x));
}

template <class T>
T RoundTrip(const T& x) {
  T out{};
  const absl::Status st = Load(Save(x), out);
  REQUIRE(st.ok());
  return out;
}

// A hand-written wire prefix: rank, then the dims as CAF writes int64s (big-endian).
void PutShape(caf::binary_serializer& sink, std::vector<int64_t> dims) {
  size_t rank = dims.size();
  REQUIRE(!sink.begin_sequence(rank));
  for (int64_t& d : dims) REQUIRE(!sink.apply(d));
  REQUIRE(!sink.end_sequence());
}

TEST_CASE("a tensor round-trips with its shape and bit-exact values, inf and NaN included") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char* what;
    Shape shape;
    std::vector<float> values;
  };
  const Case cases[] = {
      {"matrix", Shape{2, 3}, {1.5f, -2.25f, inf, -inf, 0.0f, -0.0f}},
      {"nan", Shape{1}, {nan}},
      {"empty", Shape{0, 4}, {}},
      {"scalar", Shape{}, {42.0f}},
      {"rank 3", Shape{2, 1, 2}, {1, 2, 3, 4}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    auto t = Tensor::FromVector(c.shape, c.values);
    REQUIRE(t.ok());
    const Tensor back = RoundTrip(*t);
    CHECK(back.shape() == t->shape());
    REQUIRE(back.size() == t->size());
    if (t->size() > 0) {  // an empty tensor's data() may be null, which memcmp must not see
      CHECK(std::memcmp(back.data(), t->data(), t->size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("tensor values travel as one raw little-endian block after the shape") {
  Tensor t(Shape{3, 5});
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = 0.1f * static_cast<float>(i) - 1.0f;
  const std::vector<char> buf = Save(t);
  const size_t header = 1 + 2 * sizeof(int64_t);  // varbyte rank, two int64 dims
  REQUIRE(buf.size() == header + t.size() * sizeof(float));
  // CAF's element-wise float encoding is big-endian; matching the host's bytes shows the values
  // went through apply_raw in bulk.
  CHECK(std::memcmp(buf.data() + header, t.data(), t.size() * sizeof(float)) == 0);
}

TEST_CASE("every truncation of a serialized tensor or id list is a DataLoss error") {
  const std::vector<char> tensor_buf = Save(Tensor(Shape{4, 3}, 2.0f));
  for (size_t n = 0; n < tensor_buf.size(); ++n) {
    CAPTURE(n);
    Tensor out;
    const absl::Status st =
        Load(std::vector<char>(tensor_buf.begin(), tensor_buf.begin() + n), out);
    CHECK(st.code() == absl::StatusCode::kDataLoss);
  }
  const std::vector<char> ids_buf = Save(GatherOp{Ids{1, 2, 3, 4, 5}});
  for (size_t n = 0; n < ids_buf.size(); ++n) {
    CAPTURE(n);
    GatherOp out;
    CHECK(Load(std::vector<char>(ids_buf.begin(), ids_buf.begin() + n), out).code() ==
          absl::StatusCode::kDataLoss);
  }
}

TEST_CASE("forged tensor headers are rejected before anything large is allocated") {
  struct Case {
    const char* what;
    std::vector<int64_t> dims;
    const char* message_part;
  };
  const Case cases[] = {
      {"negative dim", {3, -1}, "has a negative dimension or too many elements"},
      {"overflowing dims",
       {int64_t{1} << 40, int64_t{1} << 40},
       "has a negative dimension or too many elements"},
      {"huge but countable", {int64_t{1} << 20, int64_t{1} << 20}, "elements"},
      {"plausible size, missing bytes", {1000, 1000}, "needs 4000000 bytes but only 8 remain"},
      {"rank too high", std::vector<int64_t>(9, 1), "shape of rank 9 (at most 8)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    std::vector<char> buf;
    caf::binary_serializer sink{nullptr, buf};
    PutShape(sink, c.dims);
    double filler = 1.0;  // a few stray bytes where the values should be
    REQUIRE(!sink.apply(filler));
    Tensor out;
    const absl::Status st = Load(buf, out);
    CHECK(st.code() == absl::StatusCode::kDataLoss);
    CHECK(st.message().find(c.message_part) != absl::string_view::npos);
    CHECK(out.size() == 0);
  }
}

TEST_CASE("a forged id count is rejected without allocating it") {
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  size_t count = 0xFFFFFFFF;
  REQUIRE(!sink.begin_sequence(count));
  int64_t one_id = 7;
  REQUIRE(!sink.apply(one_id));
  GatherOp out;
  const absl::Status st = Load(buf, out);
  CHECK(st.code() == absl::StatusCode::kDataLoss);
  CHECK(st.message() ==
        "malformed message: id list of 4294967295 ids needs 34359738360 bytes but only 8 remain");
}

// Note [A step's gradient is split without a copy] (core/variables/indexed_slices.h).
TEST_CASE("a sparse gradient sharing its rows travels as an IndexedSlices of them") {
  auto source = std::make_shared<const Tensor>(
      ValueOrDie(Tensor::FromVector(Shape{4, 2}, {1, 2, 3, 4, 5, 6, 7, 8})));
  const ApplySparseGradientOp shared{SparseRows::Share(Ids{0, 9}, source, /*begin=*/1),
                                     UpdateId{5, 6, 7, 8}};
  const ApplySparseGradientOp own{
      IndexedSlices{Ids{0, 9}, ValueOrDie(Tensor::FromVector(Shape{2, 2}, {3, 4, 5, 6}))},
      UpdateId{5, 6, 7, 8}};
  CHECK(Save(shared) == Save(own));  // the same bytes on the wire
  const ApplySparseGradientOp back = RoundTrip(shared);
  CHECK(back.grad.indices() == Ids{0, 9});
  CHECK(SameTensor(Tensor::Copy(back.grad.values()), Tensor::Copy(own.grad.values())));
  CHECK(back.grad.values().data() != source->data() + 2);  // the loaded one owns its rows
  CHECK(back.update.closure == 6);
  CHECK(caf::deep_to_string(shared) ==
        "tessera::ApplySparseGradientOp(tessera::SparseRows([0, 9], [2, 2]), "
        "tessera::UpdateId(5, 6, 7, 8))");
}

TEST_CASE("every message type round-trips through the binary serializer") {
  auto values = Tensor::FromVector(Shape{2, 2}, {1, 2, 3, 4});
  REQUIRE(values.ok());

  const IndexedSlices slices{Ids{5, -1}, *values};  // structure only: ids are checked by shards
  const IndexedSlices slices_back = RoundTrip(slices);
  CHECK(slices_back.indices == slices.indices);
  CHECK(SameTensor(slices_back.values, slices.values));

  CHECK(RoundTrip(GatherOp{Ids{3, 1, 3}}).ids == Ids{3, 1, 3});
  CHECK(RoundTrip(GatherOp{}).ids.empty());

  for (const bool with_optimizer : {false, true}) {
    CAPTURE(with_optimizer);
    ShardSpec spec = testing::TestShardSpec(1, 3, 10, 4);
    spec.dtype = DType::kInt64;
    if (with_optimizer)
      spec.optimizer = OptimizerSpec{"adam", {{"beta_1", 0.8}, {"epsilon", 1e-7}}};
    const ShardSpec back = RoundTrip(spec);
    CHECK(back.variable == spec.variable);
    CHECK(back.shard_index == 1);
    CHECK(back.num_shards == 3);
    CHECK(back.full_shape == spec.full_shape);
    CHECK(back.row_offset == spec.row_offset);
    CHECK(back.rows == spec.rows);
    CHECK(back.dtype == DType::kInt64);
    CHECK(back.initializer.name == spec.initializer.name);
    CHECK(back.initializer.params == spec.initializer.params);
    CHECK(back.initializer.seed == spec.initializer.seed);
    REQUIRE(back.optimizer.has_value() == with_optimizer);
    if (with_optimizer) {
      CHECK(back.optimizer->name == "adam");
      CHECK(back.optimizer->params == spec.optimizer->params);
    }
  }

  TensorSlice snapshot;
  snapshot.variable = "emb";
  snapshot.full_shape = Shape{6, 2};
  snapshot.row_offset = 4;
  snapshot.value = *values;
  snapshot.slot_names = {"m", "v"};
  snapshot.slots = {Tensor(Shape{2, 2}, 0.5f), Tensor(Shape{2, 2}, 0.25f)};
  snapshot.step = 17;
  snapshot.checkpoint = {RunId{0x0123456789abcdefULL, 0xfedcba9876543210ULL}, 400};
  const TensorSlice snapshot_back = RoundTrip(snapshot);
  CHECK(snapshot_back.variable == "emb");
  CHECK(snapshot_back.full_shape == Shape{6, 2});
  CHECK(snapshot_back.row_offset == 4);
  CHECK(SameTensor(snapshot_back.value, snapshot.value));
  CHECK(snapshot_back.slot_names == snapshot.slot_names);
  REQUIRE(snapshot_back.slots.size() == 2);
  CHECK(SameTensor(snapshot_back.slots[1], snapshot.slots[1]));
  CHECK(snapshot_back.step == 17);
  CHECK(snapshot_back.checkpoint == snapshot.checkpoint);

  ShardInfo info{"emb/part_2", Shape{10, 4}, 7, Shape{3, 4}, DType::kFloat32, "adagrad", 9, 96,
                 8, 2, {HotRow{8, 5}, HotRow{7, 3}}};
  PsNodeStats stats{3, 1, 96, {info}};
  const PsNodeStats stats_back = RoundTrip(stats);
  CHECK(stats_back.task == 3);
  CHECK(stats_back.num_shards == 1);
  CHECK(stats_back.bytes == 96);
  REQUIRE(stats_back.shards.size() == 1);
  const ShardInfo& info_back = stats_back.shards[0];
  CHECK(info_back.name == info.name);
  CHECK(info_back.full_shape == info.full_shape);
  CHECK(info_back.row_offset == 7);
  CHECK(info_back.block_shape == info.block_shape);
  CHECK(info_back.optimizer == "adagrad");
  CHECK(info_back.version == 9);
  CHECK(info_back.bytes == 96);
  CHECK(info_back.updates == 8);
  CHECK(info_back.rows_touched == 2);
  REQUIRE(info_back.hottest_rows.size() == 2);
  CHECK(info_back.hottest_rows[0].row == 8);
  CHECK(info_back.hottest_rows[0].updates == 5);
  CHECK(info_back.hottest_rows[1].row == 7);
  CHECK(info_back.hottest_rows[1].updates == 3);

  const ShardValue value_back = RoundTrip(ShardValue{*values, 12});
  CHECK(SameTensor(value_back.value, *values));
  CHECK(value_back.version == 12);

  for (const bool with_optimizer : {false, true}) {
    CAPTURE(with_optimizer);
    CheckpointVariable variable;
    variable.name = "emb";
    variable.shape = Shape{10, 4};
    variable.slot_names = {"accumulator"};
    variable.step = 5;
    variable.slices = {SliceFileRef{"a.slice", 0, 6}, SliceFileRef{"b.slice", 6, 4}};
    if (with_optimizer) variable.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}};
    variable.checkpoint = {RunId{7, 9}, 1200};
    const CheckpointVariable back = RoundTrip(variable);
    CHECK(back.name == "emb");
    CHECK(back.shape == variable.shape);
    CHECK(back.slot_names == variable.slot_names);
    CHECK(back.step == 5);
    REQUIRE(back.slices.size() == 2);
    CHECK(back.slices[1].file == "b.slice");
    CHECK(back.slices[1].row_offset == 6);
    CHECK(back.slices[1].rows == 4);
    CHECK(back.checkpoint == variable.checkpoint);
    REQUIRE(back.optimizer.has_value() == with_optimizer);
    if (with_optimizer) CHECK(back.optimizer->params == variable.optimizer->params);

    SavedSlice saved{SliceFileRef{"c.slice", 3, 2}, {"m", "v"}, 9, variable.optimizer};
    const SavedSlice saved_back = RoundTrip(saved);
    CHECK(saved_back.ref.file == "c.slice");
    CHECK(saved_back.slot_names == saved.slot_names);
    CHECK(saved_back.step == 9);
    CHECK(saved_back.optimizer.has_value() == with_optimizer);
  }
}

TEST_CASE("every shard op round-trips, addressed in a call, and keeps its kind") {
  TensorSlice snapshot;
  snapshot.value = Tensor(Shape{2, 3}, 0.5f);
  snapshot.slot_names = {"accumulator"};
  snapshot.slots = {Tensor(Shape{2, 3}, 0.25f)};
  snapshot.step = 4;
  CheckpointVariable variable;
  variable.name = "emb";
  variable.shape = Shape{10, 3};
  variable.slices = {SliceFileRef{"a.slice", 0, 10}};
  const std::vector<ShardOp> ops = {
      InfoOp{},
      ReadOp{},
      GatherOp{Ids{4, 1, 4}},
      AssignOp{AssignKind::kSub, Tensor(Shape{2, 3}, 1.5f)},
      ScatterRowsOp{ScatterOp::kMax, IndexedSlices{Ids{4, 1}, Tensor(Shape{2, 3}, 1.5f)},
                    UpdateId{0xabcdef0123456789, 12, 3, 9}},
      ApplyDenseGradientOp{Tensor(Shape{2, 3}, -2.0f)},
      ApplySparseGradientOp{IndexedSlices{Ids{0}, Tensor(Shape{1, 3}, 3.0f)}},
      SetOptimizerOp{OptimizerSpec{"adam", {{"beta_1", 0.8}}}},
      SnapshotOp{},
      RestoreOp{snapshot, {RememberedQueue{0xfeed, 3, {{3, 0}, {5, 2}}}}},
      SaveOp{"/ckpt/ckpt-7", "v0.emb.part-0-of-1.slice", CheckpointId{RunId{3, 4}, 7}},
      LoadOp{"/ckpt/ckpt-7", variable},
  };
  REQUIRE(ops.size() == std::variant_size_v<ShardOp>);  // every kind is in the table
  for (const ShardOp& op : ops) {
    CAPTURE(ShardOpName(op));
    const ShardCall back = RoundTrip(ShardCall{42, op});
    CHECK(back.shard == 42);
    REQUIRE(back.op.index() == op.index());
    CHECK(ShardOpName(back.op) == ShardOpName(op));
  }
  const ShardCall scatter = RoundTrip(ShardCall{7, ops[4]});
  const auto& rows = std::get<ScatterRowsOp>(scatter.op);
  CHECK(rows.op == ScatterOp::kMax);
  CHECK(rows.rows.indices == Ids{4, 1});
  CHECK(SameTensor(rows.rows.values, Tensor(Shape{2, 3}, 1.5f)));
  CHECK(rows.update.queue == 0xabcdef0123456789);
  CHECK(rows.update.closure == 12);
  CHECK(rows.update.sequence == 3);
  CHECK(rows.update.resolved_below == 9);
  const ShardOp restore_back = RoundTrip(ops[9]);
  const auto& restore = std::get<RestoreOp>(restore_back);
  CHECK(SameTensor(restore.slice.slots.at(0), snapshot.slots[0]));
  CHECK(restore.slice.step == 4);
  REQUIRE(restore.ledger.size() == 1);
  CHECK(restore.ledger[0].queue == 0xfeed);
  CHECK(restore.ledger[0].resolved_below == 3);
  CHECK(restore.ledger[0].applied == std::vector<std::pair<int64_t, int64_t>>{{3, 0}, {5, 2}});
  const ShardOp save_back = RoundTrip(ops[10]);
  CHECK(std::get<SaveOp>(save_back).checkpoint == CheckpointId{RunId{3, 4}, 7});
  const ShardOp load_back = RoundTrip(ops[11]);
  const auto& load = std::get<LoadOp>(load_back);
  CHECK(load.variable.slices.at(0).file == "a.slice");
  CHECK(RoundTrip(ops).size() == ops.size());
}

TEST_CASE("a shard reply round-trips with its error or its result") {
  // The error's message travels as a caf::message: it needs the system's serializer.
  testing::DeterministicSystem fixture;
  ShardReply failed;
  failed.error = StatusToError(absl::UnavailableError("gone"));
  std::vector<char> buf;
  caf::binary_serializer sink{fixture.system(), buf};
  REQUIRE(!sink(failed));
  ShardReply failed_back;
  caf::binary_deserializer source{fixture.system(), buf};
  REQUIRE(!source(failed_back));
  CHECK(ErrorToStatus(failed_back.error) == absl::UnavailableError("gone"));

  ShardReply rows;
  rows.result = ShardValue{Tensor(Shape{1, 2}, 3.0f), 7};
  const ShardReply rows_back = RoundTrip(rows);
  CHECK(!rows_back.error);
  const auto* value = std::get_if<ShardValue>(&rows_back.result);
  REQUIRE(value != nullptr);
  CHECK(SameTensor(value->value, Tensor(Shape{1, 2}, 3.0f)));
  CHECK(value->version == 7);
  ShardReply version;
  version.result = ShardVersion{12};
  CHECK(std::get<ShardVersion>(RoundTrip(version).result).version == 12);
}

TEST_CASE("a shard op or result of an unknown kind is DataLoss") {
  for (const int32_t kind : {-1, static_cast<int32_t>(std::variant_size_v<ShardOp>)}) {
    CAPTURE(kind);
    std::vector<char> buf;
    caf::binary_serializer sink{nullptr, buf};
    ShardCall forged;
    REQUIRE(!sink(forged));
    // The op's kind follows the 8-byte shard id: overwrite it (CAF writes int32s big-endian).
    const uint32_t bits = static_cast<uint32_t>(kind);
    for (int b = 0; b < 4; ++b) buf[8 + b] = static_cast<char>(bits >> (8 * (3 - b)));
    ShardCall out;
    const absl::Status loaded = Load(buf, out);
    CHECK(loaded.code() == absl::StatusCode::kDataLoss);
    CHECK(absl::StrContains(loaded.message(), "a shard op of unknown kind"));
  }
  std::vector<char> buf;
  caf::binary_serializer sink{nullptr, buf};
  ShardOpResult forged;
  REQUIRE(!sink(forged));
  const uint32_t bits = 99;
  for (int b = 0; b < 4; ++b) buf[b] = static_cast<char>(bits >> (8 * (3 - b)));
  ShardOpResult out;
  const absl::Status loaded = Load(buf, out);
  CHECK(loaded.code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StrContains(loaded.message(), "a shard op result of unknown kind 99"));
}

TEST_CASE("closure values round-trip with their names and types, and print without values") {
  ClosureValues values;
  values.Set("batch", int64_t{-7})
      .Set("loss", 0.1)
      .Set("function", std::string("train_step\0x", 12))
      .Set("grad", Tensor(Shape{2, 2}, 0.5f))
      .Set("", int64_t{0});
  const ClosureValues back = RoundTrip(values);
  CHECK(back.size() == 5);
  CHECK(*back.Get<int64_t>("batch") == -7);
  CHECK(*back.Get<double>("loss") == 0.1);
  CHECK(*back.Get<std::string>("function") == std::string("train_step\0x", 12));
  CHECK(SameTensor(*back.Get<Tensor>("grad"), Tensor(Shape{2, 2}, 0.5f)));
  CHECK(*back.Get<int64_t>("") == 0);
  CHECK(RoundTrip(ClosureValues()).empty());

  Closure closure{9, "train_step", values, /*step=*/8, /*queue=*/0x1234567890abcdef,
                  /*resolved_below=*/5};
  const Closure closure_back = RoundTrip(closure);
  CHECK(closure_back.id == 9);
  CHECK(closure_back.step == 8);
  CHECK(closure_back.queue == 0x1234567890abcdef);
  CHECK(closure_back.resolved_below == 5);
  CHECK(closure_back.function == "train_step");
  CHECK(*closure_back.args.Get<int64_t>("batch") == -7);

  CHECK(caf::deep_to_string(ClosureValues().Set("batch", int64_t{3}).Set("w", Tensor(Shape{9}))) ==
        R"(tessera::ClosureValues(["batch: int64", "w: tensor"]))");
}

TEST_CASE("hostile closure values are errors: a forged type tag, a name twice, any truncation") {
  // One value named "x": the count (one varbyte), the name's length (one varbyte) and byte, then
  // the type tag.
  const std::vector<char> buf = Save(ClosureValues().Set("x", int64_t{5}));
  constexpr size_t kTag = 3;
  REQUIRE(buf.size() == kTag + 1 + sizeof(int64_t));
  REQUIRE(buf[kTag] == static_cast<char>(ClosureValueType::kInt64));
  for (const int tag : {kNumClosureValueTypes, 0x7f, 0xff}) {
    CAPTURE(tag);
    std::vector<char> forged = buf;
    forged[kTag] = static_cast<char>(tag);
    ClosureValues out;
    const absl::Status loaded = Load(forged, out);
    CHECK(loaded.code() == absl::StatusCode::kDataLoss);
    CHECK(absl::StrContains(loaded.message(), absl::StrCat("\"x\" has type tag ", tag)));
  }

  // A tensor value with a forged shape (rank 9: more than a message may carry).
  std::vector<char> tensor = Save(ClosureValues().Set("t", Tensor(Shape{2}, 1.0f)));
  REQUIRE(tensor[kTag] == static_cast<char>(ClosureValueType::kTensor));
  tensor[kTag + 1] = 9;  // the shape's rank follows the tag
  ClosureValues out;
  const absl::Status bad_shape = Load(tensor, out);
  CHECK(bad_shape.code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StrContains(bad_shape.message(), "rank 9"));

  // The same name twice (a count of 2 followed by the entry twice).
  std::vector<char> twice = buf;
  twice[0] = 2;
  twice.insert(twice.end(), buf.begin() + 1, buf.end());
  const absl::Status duplicate = Load(twice, out);
  CHECK(duplicate.code() == absl::StatusCode::kDataLoss);
  CHECK(absl::StrContains(duplicate.message(), "\"x\" appears twice"));

  // A forged count or string length with nothing behind it, and every truncation.
  const std::vector<char> all = Save(
      ClosureValues().Set("b", int64_t{1}).Set("s", "text").Set("t", Tensor(Shape{3}, 2.0f)));
  for (size_t n = 0; n < all.size(); ++n) {
    CAPTURE(n);
    CHECK_FALSE(Load(std::vector<char>(all.begin(), all.begin() + n), out).ok());
  }
  std::vector<char> long_name = buf;
  long_name[1] = 0x7f;  // a 127-byte name in a 12-byte buffer
  CHECK_FALSE(Load(long_name, out).ok());
  std::vector<char> many = {static_cast<char>(0xff), static_cast<char>(0xff),
                            static_cast<char>(0xff), static_cast<char>(0xff), 0x0f};
  CHECK_FALSE(Load(many, out).ok());  // 2^32 - 1 values announced, none there
}

TEST_CASE("a whole message of registered types survives the system's serializer") {
  testing::DeterministicSystem fixture;
  caf::actor_system& sys = fixture.system();
  auto values = Tensor::FromVector(Shape{2, 2}, {1, 2, 3, 4});
  REQUIRE(values.ok());
  caf::message msg = caf::make_message(
      ShardOp(ScatterRowsOp{ScatterOp::kMax, IndexedSlices{Ids{1, 0}, *values}}),
      testing::TestShardSpec(0, 2, 5, 2));
  std::vector<char> buf;
  caf::binary_serializer sink{sys, buf};
  REQUIRE(!sink(msg));
  caf::message back;
  caf::binary_deserializer source{sys, buf};
  REQUIRE(!source(back));
  REQUIRE(back.match_elements<ShardOp, ShardSpec>());
  const auto& op = std::get<ScatterRowsOp>(back.get_as<ShardOp>(0));
  CHECK(op.op == ScatterOp::kMax);
  CHECK(op.rows.indices == Ids{1, 0});
  CHECK(SameTensor(op.rows.values, *values));
  CHECK(back.get_as<ShardSpec>(1).rows == 3);
}

TEST_CASE("messages print tensors by shape, never by value") {
  CHECK(caf::deep_to_string(Tensor(Shape{1000, 64})) == "tessera::Tensor([1000, 64])");
  CHECK(caf::deep_to_string(ScatterOp::kDiv) == "scatter_div");
  CHECK(caf::deep_to_string(GatherOp{Ids{1, 2}}) == "tessera::GatherOp(tessera::Ids([1, 2]))");
  // A ShardOp prints its kind's index, then the op.
  CHECK(caf::deep_to_string(ShardOp(ApplyDenseGradientOp{Tensor(Shape{500, 8})})) ==
        "5, tessera::ApplyDenseGradientOp(tessera::Tensor([500, 8]), "
        "tessera::UpdateId(0, 0, 0, 0))");
}

TEST_CASE("the worker pool's status round-trips with its slots") {
  WorkerPoolStatus pool;
  pool.live_slots = {1};
  pool.worker_failures = 2;
  pool.slots = {WorkerSlotStatus{0, false, 0, 5, 1, 2, 3, 17, "train_step", 41},
                WorkerSlotStatus{1, true, 2, 9, 0, 0, 1, 18, "eval_step", -1}};
  const WorkerPoolStatus back = RoundTrip(pool);
  CHECK(back.live_slots == pool.live_slots);
  CHECK(back.worker_failures == 2);
  REQUIRE(back.slots.size() == 2);
  CHECK(back.slots[0].completed == 5);
  CHECK(back.slots[0].errors == 1);
  CHECK(back.slots[0].failures == 2);
  CHECK(back.slots[0].starts == 3);
  CHECK(back.slots[0].last_closure == 17);
  CHECK(back.slots[0].last_function == "train_step");
  CHECK(back.slots[0].last_step == 41);
  CHECK(back.slots[1].last_function == "eval_step");
  CHECK(back.slots[1].live);
  CHECK(back.slots[1].running == 2);
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST_CASE("a ring message round-trips: a segment shared in place arrives as values of its own") {
  auto buffer = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5});
  const RingChunk sent{3, 1, RingValues::Share(buffer, {1, 4}), /*in_place=*/true};
  const std::vector<char> bytes = Save(sent);
  RingChunk back;
  REQUIRE(Load(bytes, back).ok());
  CHECK(back.chunk == 3);
  CHECK(back.step == 1);
  // Written in place holds only in the sender's process: the receiver copies what arrived.
  CHECK(!back.in_place);
  CHECK(back.values.shared_segment() == nullptr);
  REQUIRE(back.values.size() == 3);
  CHECK(std::vector<float>(back.values.span().begin(), back.values.span().end()) ==
        std::vector<float>{2, 3, 4});
  // Every truncation is DataLoss.
  for (size_t keep = 0; keep < bytes.size(); ++keep) {
    RingChunk truncated;
    CHECK(
        absl::IsDataLoss(Load(std::vector<char>(bytes.begin(), bytes.begin() + keep), truncated)));
  }
  // Values that are not a vector: DataLoss, nothing taken in.
  std::vector<char> forged;
  caf::binary_serializer sink{nullptr, forged};
  int64_t chunk = 0;
  int32_t step = 0;
  REQUIRE(!sink(chunk, step));
  REQUIRE(!sink(Tensor(Shape{1, 2}, 1.0f)));
  RingChunk matrix;
  CHECK(absl::IsDataLoss(Load(forged, matrix)));
  CHECK(matrix.values.size() == 0);
}

}  // namespace
}  // namespace tessera
