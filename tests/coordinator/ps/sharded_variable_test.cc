// ShardedVariable on the real in-process cluster: every operation against a plain-tensor
// reference, on uneven layouts (32 rows over 3 shards: 11, 11, 10; 13 rows over 5 shards:
// 3, 3, 3, 2, 2 with trailing dims [2, 3]).
#include "coordinator/ps/sharded_variable.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/ps/shard_client.h"
#include "actors/ps/variable_ops.h"
#include "cluster/base/cluster.h"
#include "cluster/base/testing.h"
#include "coordinator/ps/internal/await.h"
#include "coordinator/ps/strategy.h"
#include "core/model/model.h"
#include "tessera/model.h"
#include "tessera/partitioner.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::FromVector;
using testing::ValueOrDie;

struct LayoutCase {
  std::string label;
  Shape shape;
  int64_t num_shards;
  std::vector<int64_t> shard_rows;
  std::vector<int64_t> offsets;
  std::vector<int32_t> ps_tasks;  // round-robin over 2 PS, the strategy's first variable
};

std::vector<LayoutCase> Layouts() {
  return {
      {"32 rows over 3 shards", Shape{32, 3}, 3, {11, 11, 10}, {0, 11, 22}, {0, 1, 0}},
      {"13 rows of [2, 3] over 5 shards",
       Shape{13, 2, 3},
       5,
       {3, 3, 3, 2, 2},
       {0, 3, 6, 9, 11},
       {0, 1, 0, 1, 0}},
  };
}

const InitializerSpec kInit{"random_uniform", {{"minval", -1.0}, {"maxval", 1.0}}, 7};

// A cluster, a strategy and one variable laid out as `layout`, with the reference value it
// should hold. Members are destroyed in reverse order: the variable, the strategy, the cluster.
struct Fixture {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ParameterServerStrategy> strategy;
  ShardedVariable v;
  Tensor reference;
};

Fixture MakeFixture(const LayoutCase& layout, const InitializerSpec& init = kInit) {
  Fixture f;
  f.cluster = testing::StartCluster(/*num_ps=*/2, /*num_workers=*/1);
  f.strategy = std::make_unique<ParameterServerStrategy>(
      *f.cluster, ValueOrDie(FixedShardsPartitioner(layout.num_shards)));
  VariableOptions options;
  options.name = "v";
  options.shape = layout.shape;
  options.initializer = init;
  f.v = ValueOrDie(f.strategy->CreateVariable(options), "CreateVariable");
  REQUIRE(f.v.num_shards() == layout.num_shards);
  f.reference =
      ValueOrDie(MakeInitializedBlock(init, layout.shape, 0, layout.shape.rows()), "reference");
  return f;
}

int64_t Rows(const Tensor& t) { return t.shape().rows(); }

// The reference's rows `ids`, in order.
Tensor RefRows(const Tensor& ref, const std::vector<int64_t>& ids) {
  Tensor out(ref.shape().WithRows(static_cast<int64_t>(ids.size())));
  for (size_t k = 0; k < ids.size(); ++k) {
    std::copy(ref.row(ids[k]).begin(), ref.row(ids[k]).end(), out.row(k).begin());
  }
  return out;
}

// The rows numpy's a[start:stop:step] selects from `n` rows (Python's slice.indices).
std::vector<int64_t> NumpySliceRows(int64_t n, std::optional<int64_t> start,
                                    std::optional<int64_t> stop, int64_t step) {
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? n : n - 1;
  auto adjust = [&](int64_t x) {
    if (x < 0) {
      x += n;
      return std::max(x, lower);
    }
    return std::min(x, upper);
  };
  const int64_t s = start.has_value() ? adjust(*start) : (step > 0 ? lower : upper);
  const int64_t e = stop.has_value() ? adjust(*stop) : (step > 0 ? upper : lower);
  std::vector<int64_t> rows;
  for (int64_t i = s; step > 0 ? i < e : i > e; i += step) rows.push_back(i);
  return rows;
}

std::string SliceText(std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  auto part = [](std::optional<int64_t> x) { return x ? absl::StrCat(*x) : std::string(); };
  return absl::StrCat("[", part(start), ":", part(stop), ":", step, "]");
}

// Rows for a scatter of `ids` into a variable shaped like `ref`: distinct nonzero values in
// [0.5, 2.25], exactly representable.
Tensor ScatterRowsFor(const Tensor& ref, size_t num_ids, int salt) {
  Tensor rows(ref.shape().WithRows(static_cast<int64_t>(num_ids)));
  for (int64_t i = 0; i < rows.size(); ++i) {
    rows.values()[i] = 0.5f + 0.25f * static_cast<float>((i * 7 + salt * 3) % 8);
  }
  return rows;
}

// Applies scatter `op` to `ref` as ShardedVariable documents it: rows in the order given
// (duplicates accumulate for add / sub, compose for mul / div / min / max, last wins for update).
void ReferenceScatter(ScatterOp op, Tensor& ref, const std::vector<int64_t>& ids,
                      const Tensor& rows) {
  for (size_t k = 0; k < ids.size(); ++k) {
    auto dst = ref.row(ids[k]);
    auto src = rows.row(static_cast<int64_t>(k));
    for (size_t j = 0; j < dst.size(); ++j) {
      float& x = dst[j];
      const float r = src[j];
      switch (op) {
        case ScatterOp::kAdd:
          x += r;
          break;
        case ScatterOp::kSub:
          x -= r;
          break;
        case ScatterOp::kMul:
          x *= r;
          break;
        case ScatterOp::kDiv:
          x /= r;
          break;
        case ScatterOp::kMin:
          x = std::min(x, r);
          break;
        case ScatterOp::kMax:
          x = std::max(x, r);
          break;
        case ScatterOp::kUpdate:
          x = r;
          break;
      }
    }
  }
}

TEST_CASE("Read of a sharded variable returns the initial value on uneven layouts") {
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    CHECK(f.v.name() == "v");
    CHECK(f.v.shape() == layout.shape);
    CHECK_FALSE(f.v.is_on_read());
    const Tensor value = ValueOrDie(f.v.Read(), "Read");
    CHECK_TENSOR(value, f.reference);
    // Not all zeros: the initializer really ran on the shards.
    CHECK(std::any_of(value.values().begin(), value.values().end(),
                      [](float x) { return x != 0.0f; }));
  }
}

TEST_CASE("Variables lists each shard's name, offset, shape and PS task") {
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    const std::vector<VariableShard> shards = f.v.Variables();
    REQUIRE(shards.size() == static_cast<size_t>(layout.num_shards));
    for (size_t s = 0; s < shards.size(); ++s) {
      CAPTURE(s);
      CHECK(shards[s].name == absl::StrCat("v/part_", s));
      CHECK(shards[s].offset == layout.offsets[s]);
      CHECK(shards[s].shape == layout.shape.WithRows(layout.shard_rows[s]));
      CHECK(shards[s].ps_task == layout.ps_tasks[s]);
    }
  }
}

TEST_CASE("Gather returns the rows of the given ids in order, duplicates included, under div") {
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    const int64_t n = Rows(f.reference);
    // Every shard's first and last row, out of order, with duplicates across and within shards.
    std::vector<int64_t> ids;
    for (size_t s = layout.offsets.size(); s-- > 0;) {
      ids.push_back(layout.offsets[s] + layout.shard_rows[s] - 1);
      ids.push_back(layout.offsets[s]);
    }
    ids.insert(ids.end(), {0, n - 1, 0, layout.offsets[1], n / 2, n / 2});
    CAPTURE(absl::StrJoin(ids, ","));
    CHECK_TENSOR(ValueOrDie(f.v.Gather(ids), "Gather"), RefRows(f.reference, ids));
    CHECK_TENSOR(ValueOrDie(f.v.Gather({n - 1}), "Gather one"), RefRows(f.reference, {n - 1}));

    const Tensor none = ValueOrDie(f.v.Gather({}), "Gather of no ids");
    CHECK(none.shape() == layout.shape.WithRows(0));
  }
}

TEST_CASE("Gather of sorted unique ids (a train step's) appends the shards' replies in order") {
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    const int64_t n = Rows(f.reference);
    // Every shard's first and last row, ascending: one run per shard.
    std::vector<int64_t> ids;
    for (size_t s = 0; s < layout.offsets.size(); ++s) {
      ids.push_back(layout.offsets[s]);
      const int64_t last = layout.offsets[s] + layout.shard_rows[s] - 1;
      if (last != ids.back()) ids.push_back(last);
    }
    CAPTURE(absl::StrJoin(ids, ","));
    CHECK_TENSOR(ValueOrDie(f.v.Gather(ids), "Gather sorted"), RefRows(f.reference, ids));
    // One shard's rows only, and one id.
    const std::vector<int64_t> first_shard = {0, layout.shard_rows[0] - 1};
    const std::vector<int64_t> one_shard =
        first_shard[0] == first_shard[1] ? std::vector<int64_t>{0} : first_shard;
    CHECK_TENSOR(ValueOrDie(f.v.Gather(one_shard), "Gather in one shard"),
                 RefRows(f.reference, one_shard));
    CHECK_TENSOR(ValueOrDie(f.v.Gather({n - 1}), "Gather last"), RefRows(f.reference, {n - 1}));
  }
}

TEST_CASE("Gather under mod reads id from shard id % n at local row id / n") {
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    const int64_t n = Rows(f.reference);
    const int64_t shards = layout.num_shards;
    std::vector<int64_t> ids;
    for (int64_t id = n - 1; id >= 0; id -= 2) ids.push_back(id);
    ids.insert(ids.end(), {0, 1, 1, n - 1, shards, shards});
    std::vector<int64_t> storage_rows;
    for (int64_t id : ids) storage_rows.push_back(layout.offsets[id % shards] + id / shards);
    CAPTURE(absl::StrJoin(ids, ","));
    CHECK_TENSOR(ValueOrDie(f.v.Gather(ids, ShardingStrategy::kMod), "Gather mod"),
                 RefRows(f.reference, storage_rows));
  }
}

// What a worker does for an embedding bag: gather the bag's unique ids from the shards, then
// combine them in the model. Under div (training's) and mod lookups alike, the bags equal those of
// the whole table each lookup describes (under mod: id i is storage row offsets[i % n] + i / n).
TEST_CASE("embedding bags over rows gathered by div and by mod lookups equal the whole table's") {
  const LayoutCase layout = Layouts()[0];  // 32 rows over 3 shards
  Fixture f = MakeFixture(layout);
  ModelBuilder b("bags");
  const ModelBuilder::Value bag =
      b.Embedding(b.IdListInput("tags"), b.EmbeddingTable("v", 32, 3), "sqrtn", "bag");
  b.Output("bag", bag);
  b.Loss("mean_squared_error", b.Dot(bag, bag));
  const Model model = ValueOrDie(Model::Create(ValueOrDie(b.Build(), "Build")), "Model");
  Batch batch;
  batch.size = 3;
  IdList& tags = batch.id_lists["tags"];
  tags.ids = {31, 4, 4, 17, 0, 29, 30, 2};
  tags.row_splits = {0, 3, 3, 8};  // the middle example's bag is empty
  tags.weights = {1, 0.5f, 2, 1, 1, 3, 1, 0.25f};
  batch.labels = Tensor(Shape{3, 1});
  const std::map<std::string, SortedIds> needed = ValueOrDie(model.RowsNeeded(batch), "needed");
  const Ids& ids = needed.at("v").ids();

  Tensor mod_table(Shape{32, 3});
  for (int64_t id = 0; id < 32; ++id) {
    mod_table.matrix().row(id) = f.reference.matrix().row(layout.offsets[id % 3] + id / 3);
  }
  for (const auto& [strategy, table] : {std::pair{ShardingStrategy::kDiv, &f.reference},
                                        std::pair{ShardingStrategy::kMod, &mod_table}}) {
    CAPTURE(ShardingStrategyName(strategy));
    const Tensor rows = ValueOrDie(f.v.Gather(ids, strategy), "Gather");
    StepParams gathered;
    gathered.gathered.emplace("v", EmbeddingRows{ids, {rows.view()}});
    StepParams whole;
    whole.full.emplace("v", table->view());
    const ForwardResult from_shards = ValueOrDie(model.Forward(batch, gathered), "gathered");
    const ForwardResult from_table = ValueOrDie(model.Forward(batch, whole), "whole");
    CHECK_TENSOR(from_shards.outputs.at("bag"), from_table.outputs.at("bag"));
    CHECK(from_table.outputs.at("bag").matrix().row(1).isZero());
  }
}

TEST_CASE("Slice follows numpy, including negative steps and out-of-range bounds") {
  using S = std::optional<int64_t>;
  struct SliceCase {
    S start, stop;
    int64_t step;
  };
  const std::vector<SliceCase> slices = {
      {{}, {}, 1},     {{}, {}, -1}, {{}, {}, 2},  {{}, {}, -3},  {{}, {}, 7},   {{}, {}, -11},
      {0, 1, 1},       {3, 29, 4},   {-5, {}, 1},  {{}, -30, -1}, {30, 2, -3},   {100, -100, -1},
      {-100, 100, 2},  {11, 22, 1},  {10, 12, 1},  {21, 10, -1},  {22, 23, 1},   {9, 11, 1},
      {5, 5, 1},       {20, 5, 1},   {5, 20, -1},  {31, {}, -10}, {-1, -33, -1}, {-1, {}, -1},
      {12, {}, -2},    {2, 12, 3},   {{}, 3, -1},  {-3, -1, 1},   {1000, {}, 1}, {{}, -1000, 1},
      {-1000, {}, -1}, {6, 7, -1},   {11, 0, -11}, {12, 12, -1},  {3, 100, 100},
  };
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    const int64_t n = Rows(f.reference);
    for (const SliceCase& c : slices) {
      const std::string text = SliceText(c.start, c.stop, c.step);
      CAPTURE(text);
      absl::StatusOr<Tensor> got = f.v.Slice(c.start, c.stop, c.step);
      REQUIRE_MESSAGE(got.ok(), got.status().ToString());
      CHECK_TENSOR(*got, RefRows(f.reference, NumpySliceRows(n, c.start, c.stop, c.step)));
    }
  }
}

TEST_CASE("Index reads every shard's first row and counts negative indices from the end") {
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    const int64_t n = Rows(f.reference);
    std::vector<int64_t> dims(layout.shape.dims().begin() + 1, layout.shape.dims().end());
    const Shape row_shape(dims);
    auto expect_row = [&](int64_t index, int64_t row) {
      CAPTURE(index);
      Tensor want = RefRows(f.reference, {row});
      REQUIRE(want.Reshape(row_shape).ok());
      CHECK_TENSOR(ValueOrDie(f.v.Index(index), "Index"), want);
    };
    for (size_t s = 0; s < layout.offsets.size(); ++s) {
      expect_row(layout.offsets[s], layout.offsets[s]);         // first row of shard s
      expect_row(layout.offsets[s] - n, layout.offsets[s]);     // the same, negative
      expect_row(layout.offsets[s] + layout.shard_rows[s] - 1,  // last row of shard s
                 layout.offsets[s] + layout.shard_rows[s] - 1);
    }
    expect_row(-1, n - 1);
    expect_row(-n, 0);
    expect_row(n - 1, n - 1);
  }
}

TEST_CASE("Assign, AssignAdd and AssignSub update every shard") {
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    Tensor value(layout.shape);
    for (int64_t i = 0; i < value.size(); ++i) value.values()[i] = static_cast<float>(i) - 20.0f;
    REQUIRE(f.v.Assign(value).ok());
    CHECK_TENSOR(ValueOrDie(f.v.Read()), value);

    Tensor delta(layout.shape);
    for (int64_t i = 0; i < delta.size(); ++i) delta.values()[i] = static_cast<float>(i % 5);
    REQUIRE(f.v.AssignAdd(delta).ok());
    Tensor want = value;
    for (int64_t i = 0; i < want.size(); ++i) want.values()[i] += delta.values()[i];
    CHECK_TENSOR(ValueOrDie(f.v.Read()), want);

    REQUIRE(f.v.AssignSub(delta).ok());
    REQUIRE(f.v.AssignSub(delta).ok());
    for (int64_t i = 0; i < want.size(); ++i) want.values()[i] -= 2 * delta.values()[i];
    CHECK_TENSOR(ValueOrDie(f.v.Read()), want);
    // The last row of the last shard and the first row of shard 1 took part.
    CHECK_TENSOR(ValueOrDie(f.v.Gather({Rows(want) - 1, layout.offsets[1]})),
                 RefRows(want, {Rows(want) - 1, layout.offsets[1]}));
  }
}

TEST_CASE("each of the seven scatter ops with global ids matches the reference") {
  const std::vector<ScatterOp> ops = {ScatterOp::kAdd,   ScatterOp::kSub, ScatterOp::kMul,
                                      ScatterOp::kDiv,   ScatterOp::kMin, ScatterOp::kMax,
                                      ScatterOp::kUpdate};
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    const int64_t n = Rows(f.reference);
    // Unsorted, spanning every shard boundary, with duplicates within and across shards.
    std::vector<int64_t> ids = {
        n - 1, 0,     layout.offsets[1], layout.offsets[1] - 1, 0, layout.offsets[2],
        n - 1, n / 2, layout.offsets[1]};
    Tensor reference = f.reference;
    int salt = 0;
    for (ScatterOp op : ops) {
      CAPTURE(ScatterOpName(op));
      const Tensor rows = ScatterRowsFor(reference, ids.size(), ++salt);
      const absl::Status status = f.v.Scatter(op, ids, rows);
      REQUIRE_MESSAGE(status.ok(), status.ToString());
      ReferenceScatter(op, reference, ids, rows);
      CHECK_TENSOR_NEAR(ValueOrDie(f.v.Read()), reference, 1e-5f);
    }
    // The convenience forms.
    const Tensor rows = ScatterRowsFor(reference, 2, 99);
    REQUIRE(f.v.ScatterAdd({n - 1, 1}, rows).ok());
    ReferenceScatter(ScatterOp::kAdd, reference, {n - 1, 1}, rows);
    REQUIRE(f.v.ScatterUpdate({2, 2}, rows).ok());
    ReferenceScatter(ScatterOp::kUpdate, reference, {2, 2}, rows);
    CHECK_TENSOR_NEAR(ValueOrDie(f.v.Read()), reference, 1e-5f);
    // Update with a duplicate: the last row wins.
    CHECK_TENSOR(ValueOrDie(f.v.Gather({2})), RefRows(rows, {1}));
  }
}

TEST_CASE("bad input is InvalidArgument and leaves every shard unchanged") {
  for (const LayoutCase& layout : Layouts()) {
    CAPTURE(layout.label);
    Fixture f = MakeFixture(layout);
    const int64_t n = Rows(f.reference);
    const Shape& shape = layout.shape;
    std::vector<int64_t> wider = shape.dims();
    wider.back() += 1;
    std::vector<int64_t> transposed(shape.dims().begin(), shape.dims().end());
    std::reverse(transposed.begin() + 1, transposed.end());
    if (transposed == shape.dims()) transposed.push_back(1);
    const Tensor two_rows(shape.WithRows(2), 1.0f);

    struct BadCall {
      std::string what;
      std::function<absl::Status()> call;
    };
    const std::vector<BadCall> calls = {
        {"gather id == rows",
         [&] {
           return f.v.Gather({0, n}).status();
         }},
        {"gather id -1", [&] { return f.v.Gather({-1}).status(); }},
        {"gather mod id == rows", [&] { return f.v.Gather({n}, ShardingStrategy::kMod).status(); }},
        // A valid id on shard 0 next to a bad one: shard 0 must not apply its part.
        {"scatter_add id == rows",
         [&] {
           return f.v.ScatterAdd({0, n}, two_rows);
         }},
        {"scatter_update id -1",
         [&] {
           return f.v.ScatterUpdate({n - 1, -1}, two_rows);
         }},
        {"scatter_mul id far out",
         [&] {
           return f.v.Scatter(ScatterOp::kMul, {layout.offsets[1], 1000}, two_rows);
         }},
        {"scatter wrong row width",
         [&] {
           Tensor rows(Shape(wider).WithRows(2), 1.0f);
           return f.v.ScatterAdd({0, n - 1}, rows);
         }},
        {"scatter wrong trailing shape (same width)",
         [&] {
           Tensor rows(Shape(transposed).WithRows(2), 1.0f);
           return f.v.ScatterAdd({0, n - 1}, rows);
         }},
        {"scatter fewer rows than ids",
         [&] {
           return f.v.Scatter(ScatterOp::kUpdate, {0, 1, n - 1}, two_rows);
         }},
        {"scatter more rows than ids", [&] { return f.v.ScatterAdd({n - 1}, two_rows); }},
        {"scatter rank-1 rows",
         [&] {
           return f.v.ScatterAdd({0, 1}, Tensor(Shape{2}, 1.0f));
         }},
        {"assign one row short", [&] { return f.v.Assign(Tensor(shape.WithRows(n - 1))); }},
        {"assign one row long", [&] { return f.v.Assign(Tensor(shape.WithRows(n + 1))); }},
        {"assign wrong width", [&] { return f.v.Assign(Tensor(Shape(wider))); }},
        {"assign a scalar", [&] { return f.v.Assign(Tensor(Shape{}, 1.0f)); }},
        {"assign_add wrong shape", [&] { return f.v.AssignAdd(Tensor(Shape(transposed))); }},
        {"assign_sub wrong shape", [&] { return f.v.AssignSub(Tensor(Shape{n}, 1.0f)); }},
        {"slice step 0", [&] { return f.v.Slice(0, n, 0).status(); }},
        {"index == rows", [&] { return f.v.Index(n).status(); }},
        {"index == -rows - 1", [&] { return f.v.Index(-n - 1).status(); }},
        {"update from replicas without an aggregation",
         [&] {
           const std::vector<Tensor> values = {Tensor(shape, 1.0f), Tensor(shape, 2.0f)};
           return f.v.UpdateFromReplicas(AssignKind::kAdd, values);
         }},
    };
    for (const BadCall& bad : calls) {
      CAPTURE(bad.what);
      const absl::Status status = bad.call();
      CHECK_MESSAGE(absl::IsInvalidArgument(status), status.ToString());
      CHECK_TENSOR(ValueOrDie(f.v.Read(), "Read after bad input"), f.reference);
    }
  }
}

TEST_CASE("error messages name the variable and the offending id") {
  Fixture f = MakeFixture(Layouts()[0]);
  const absl::Status gather = f.v.Gather({3, 32}).status();
  CHECK(absl::IsInvalidArgument(gather));
  CHECK_MESSAGE(gather.message().find("v") != absl::string_view::npos, gather.ToString());
  CHECK_MESSAGE(gather.message().find("32") != absl::string_view::npos, gather.ToString());
  const absl::Status scatter = f.v.ScatterAdd({40}, Tensor(Shape{1, 3}, 1.0f));
  CHECK_MESSAGE(scatter.message().find("40") != absl::string_view::npos, scatter.ToString());
}

TEST_CASE("concurrent ScatterAdds from several threads sum exactly") {
  const std::vector<LayoutCase> layouts = Layouts();
  const LayoutCase& layout = layouts[0];  // 32 rows over 3 shards
  Fixture f = MakeFixture(layout, InitializerSpec{"zeros", {}, 0});
  constexpr int kThreads = 4, kUpdates = 25;
  std::vector<absl::Status> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Thread t adds (t + 1) to rows t, 31, 15 and 15 again (15 twice per update).
      const std::vector<int64_t> ids = {t, 31, 15, 15};
      const Tensor rows(Shape{4, 3}, static_cast<float>(t + 1));
      for (int u = 0; u < kUpdates; ++u) {
        absl::Status s = f.v.ScatterAdd(ids, rows);
        if (!s.ok()) {
          errors[t] = s;
          return;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& s : errors) CHECK_MESSAGE(s.ok(), s.ToString());

  Tensor want(layout.shape);
  for (int t = 0; t < kThreads; ++t) {
    const float w = static_cast<float>((t + 1) * kUpdates);
    for (int64_t row : {int64_t{t}, int64_t{31}, int64_t{15}, int64_t{15}}) {
      for (float& x : want.row(row)) x += w;
    }
  }
  CHECK_TENSOR(ValueOrDie(f.v.Read()), want);
}

TEST_CASE("an unpartitioned variable and a scalar live in one shard named after the variable") {
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster);  // the default partitioner: none
  VariableOptions options;
  options.name = "u";
  options.shape = Shape{5, 2};
  options.initializer = {"constant", {{"value", 3.0}}, 0};
  const ShardedVariable u = ValueOrDie(strategy.CreateVariable(options));
  CHECK(u.num_shards() == 1);
  const std::vector<VariableShard> shards = u.Variables();
  REQUIRE(shards.size() == 1);
  CHECK(shards[0].name == "u");
  CHECK(shards[0].offset == 0);
  CHECK(shards[0].shape == Shape{5, 2});
  CHECK(shards[0].ps_task == 0);
  CHECK_TENSOR(ValueOrDie(u.Read()), Tensor(Shape{5, 2}, 3.0f));
  REQUIRE(u.ScatterAdd({4, 0, 4}, Tensor(Shape{3, 2}, 1.0f)).ok());
  CHECK_TENSOR(ValueOrDie(u.Read()), FromVector(Shape{5, 2}, {4, 4, 3, 3, 3, 3, 3, 3, 5, 5}));
  CHECK_TENSOR(ValueOrDie(u.Slice(std::nullopt, std::nullopt, -2)),
               FromVector(Shape{3, 2}, {5, 5, 3, 3, 4, 4}));

  options.name = "s";
  options.shape = Shape{};
  const ShardedVariable s = ValueOrDie(strategy.CreateVariable(options));
  CHECK(s.num_shards() == 1);
  REQUIRE(s.Variables().size() == 1);
  CHECK(s.Variables()[0].ps_task == 1);  // round-robin continues: u took ps 0
  CHECK_TENSOR(ValueOrDie(s.Read()), Tensor(Shape{}, 3.0f));
  REQUIRE(s.AssignAdd(Tensor(Shape{}, 2.0f)).ok());
  REQUIRE(s.AssignSub(Tensor(Shape{}, 0.5f)).ok());
  CHECK_TENSOR(ValueOrDie(s.Read()), Tensor(Shape{}, 4.5f));
  CHECK(absl::IsInvalidArgument(s.ScatterAdd({0}, Tensor(Shape{1}, 1.0f))));
  CHECK(absl::IsInvalidArgument(s.Assign(Tensor(Shape{1}, 1.0f))));
  CHECK_TENSOR(ValueOrDie(s.Read()), Tensor(Shape{}, 4.5f));
}


// An adagrad-trained [32, 3] table named `name`, in 3 shards (the strategy's partitioner).
VariableOptions AdagradTable(const std::string& name) {
  VariableOptions options;
  options.name = name;
  options.shape = Shape{32, 3};
  options.initializer = kInit;
  options.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}};
  return options;
}

// Note [One request per PS node] (actors/ps/shard_client.h): a networked worker's step sends its
// reads, gathers and gradients through a ShardBatch; each call must do what it does sent alone.
TEST_CASE("calls batched per PS node give what the same calls sent alone give") {
  std::unique_ptr<Cluster> cluster = testing::StartCluster(/*num_ps=*/2, /*num_workers=*/1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
  const ShardedVariable batched = ValueOrDie(strategy.CreateVariable(AdagradTable("batched")));
  const ShardedVariable alone = ValueOrDie(strategy.CreateVariable(AdagradTable("alone")));
  VariableOptions options = AdagradTable("bias");
  options.shape = Shape{3};
  options.partitioner = Partitioner();
  const ShardedVariable bias = ValueOrDie(strategy.CreateVariable(options));
  options.name = "bias_alone";
  const ShardedVariable bias_alone = ValueOrDie(strategy.CreateVariable(options));
  const std::vector<ps_node_actor> nodes = cluster->actors().ps_nodes();
  caf::actor_system& system = cluster->actors().system();

  // A step's fetch: gathers of sorted unique ids (every shard) and a dense read, one batch.
  const std::vector<int64_t> ids = {0, 5, 11, 12, 21, 22, 31};
  struct Fetched {
    Tensor rows, bias;
  };
  absl::StatusOr<Fetched> fetched = internal::Await<Fetched>(
      system, [&](caf::event_based_actor* self, Done<Fetched> done) {
        auto out = std::make_shared<Fetched>();
        auto pending = std::make_shared<int>(2);
        auto arrived = [out, pending, done](Tensor Fetched::*field) {
          return [out, pending, done, field](absl::StatusOr<Tensor> value) {
            if (!value.ok()) return done(value.status());
            (*out).*field = *std::move(value);
            if (--*pending == 0) done(*out);
          };
        };
        ShardClient batch(self, nodes);
        GatherAsync(batch, batched.handle(), ids, ShardingStrategy::kDiv, arrived(&Fetched::rows));
        ReadAsync(batch, bias.handle(), arrived(&Fetched::bias));
      });
  REQUIRE(fetched.ok());
  CHECK_TENSOR(fetched->rows, ValueOrDie(alone.Gather(ids)));
  CHECK_TENSOR(fetched->bias, ValueOrDie(bias.Read()));

  // The gradients, twice (adagrad's slots accumulate), batched on one variable, alone on the
  // other: the two end equal.
  IndexedSlices grad{Ids{31, 0, 12, 0}, Tensor(Shape{4, 3}, 0.25f)};
  for (int round = 0; round < 2; ++round) {
    CAPTURE(round);
    REQUIRE(internal::AwaitStatus(system, [&](caf::event_based_actor* self, DoneStatus done) {
              ShardClient batch(self, nodes);
              ApplySparseGradientAsync(batch, batched.handle(), grad, done);
            }).ok());
    REQUIRE(internal::AwaitStatus(system, [&](caf::event_based_actor* self, DoneStatus done) {
              ShardClient direct(self);
              ApplySparseGradientAsync(direct, alone.handle(), grad, done);
            }).ok());
    REQUIRE(internal::AwaitStatus(system, [&](caf::event_based_actor* self, DoneStatus done) {
              ShardClient batch(self, nodes);
              ApplyDenseGradientAsync(batch, bias.handle(), Tensor(Shape{3}, 1.0f), done);
            }).ok());
    REQUIRE(internal::AwaitStatus(system, [&](caf::event_based_actor* self, DoneStatus done) {
              ShardClient direct(self);
              ApplyDenseGradientAsync(direct, bias_alone.handle(), Tensor(Shape{3}, 1.0f), done);
            }).ok());
  }
  CHECK_TENSOR(ValueOrDie(batched.Read()), ValueOrDie(alone.Read()));
  CHECK(!testing::SameTensor(ValueOrDie(batched.Read()),
                             ValueOrDie(MakeInitializedBlock(kInit, Shape{32, 3}, 0, 32))));
  CHECK_TENSOR(ValueOrDie(bias.Read()), ValueOrDie(bias_alone.Read()));
  CHECK(!testing::SameTensor(ValueOrDie(bias.Read()), fetched->bias));
}

// Note [A step's gradient is split without a copy] (core/variables/indexed_slices.h): a step's
// gradient, split along the grouping its gather used, its rows shared by the shards' ops, trains
// as the copying path does.
TEST_CASE("a step's gradient split along its gather's grouping trains as the copying path does") {
  std::unique_ptr<Cluster> cluster = testing::StartCluster(/*num_ps=*/2, /*num_workers=*/1);
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(3)));
  const ShardedVariable shared = ValueOrDie(strategy.CreateVariable(AdagradTable("shared")));
  const ShardedVariable copied = ValueOrDie(strategy.CreateVariable(AdagradTable("copied")));
  const std::vector<ps_node_actor> nodes = cluster->actors().ps_nodes();
  caf::actor_system& system = cluster->actors().system();

  // Ids in the first and last shard only: the middle shard's op has no rows.
  const SortedIds ids = ValueOrDie(SortedIds::Check(Ids{1, 4, 10, 25, 31}));
  std::shared_ptr<const IdGrouping> grouping = ValueOrDie(GroupStepIds(shared.handle(), ids));
  CHECK(grouping->in_shard_order);
  CHECK(grouping->touched_shards == std::vector<int64_t>{0, 2});
  const std::vector<Tensor> blocks = ValueOrDie(internal::Await<std::vector<Tensor>>(
      system, [&](caf::event_based_actor* self, Done<std::vector<Tensor>> done) {
        ShardClient batch(self, nodes);
        GatherBlocksAsync(batch, shared.handle(), grouping, done);
      }));
  REQUIRE(blocks.size() == 2);
  CHECK_TENSOR(blocks[0], ValueOrDie(copied.Gather({1, 4, 10})));
  CHECK_TENSOR(blocks[1], ValueOrDie(copied.Gather({25, 31})));

  for (int round = 0; round < 2; ++round) {  // adagrad's slots accumulate
    CAPTURE(round);
    auto rows = std::make_shared<Tensor>(ValueOrDie(
        Tensor::FromVector(Shape{5, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15})));
    const IndexedSlices grad{ids.ids(), *rows};
    REQUIRE(internal::AwaitStatus(system, [&](caf::event_based_actor* self, DoneStatus done) {
              ShardClient batch(self, nodes);
              ApplyStepGradientAsync(batch, shared.handle(), *grouping, rows, done);
            }).ok());
    REQUIRE(internal::AwaitStatus(system, [&](caf::event_based_actor* self, DoneStatus done) {
              ShardClient direct(self);
              ApplySparseGradientAsync(direct, copied.handle(), grad, done);
            }).ok());
  }
  CHECK_TENSOR(ValueOrDie(shared.Read()), ValueOrDie(copied.Read()));
  CHECK(!testing::SameTensor(ValueOrDie(shared.Read()),
                             ValueOrDie(MakeInitializedBlock(kInit, Shape{32, 3}, 0, 32))));

  // Rows that do not follow the grouping are refused before anything is sent.
  const absl::Status refused =
      internal::AwaitStatus(system, [&](caf::event_based_actor* self, DoneStatus done) {
        ShardClient direct(self);
        ApplyStepGradientAsync(direct, shared.handle(), *grouping,
                               std::make_shared<const Tensor>(Shape{4, 3}), done);
      });
  CHECK(absl::IsInternal(refused));
  CHECK_TENSOR(ValueOrDie(shared.Read()), ValueOrDie(copied.Read()));
}

TEST_CASE("a batched call to a lost PS node is Unavailable naming the shard and its task") {
  // In process even when TESSERA_TEST_PS names PS processes: it kills a PS node.
  std::unique_ptr<Cluster> cluster = ValueOrDie(Cluster::StartInProcess({2, 1, 0}));
  ParameterServerStrategy strategy(*cluster, ValueOrDie(FixedShardsPartitioner(2)));
  VariableOptions options;
  options.name = "v";
  options.shape = Shape{10, 2};
  options.initializer = kInit;
  const ShardedVariable v = ValueOrDie(strategy.CreateVariable(options));
  const std::vector<ps_node_actor> nodes = cluster->actors().ps_nodes();
  REQUIRE(testing::KillPs(*cluster, 1).ok());
  REQUIRE_FALSE(v.Gather({7}).ok());  // its shards are down on return: the first gather fails
  absl::StatusOr<Tensor> rows = internal::Await<Tensor>(
      cluster->actors().system(), [&](caf::event_based_actor* self, Done<Tensor> done) {
        ShardClient batch(self, nodes);
        GatherAsync(batch, v.handle(), {2, 7}, ShardingStrategy::kDiv, done);
      });
  CHECK(absl::IsUnavailable(rows.status()));
  CHECK(absl::StrContains(rows.status().message(), "gather: shard v/part_1 on ps 1 is unavailable"));
}

}  // namespace
}  // namespace tessera
