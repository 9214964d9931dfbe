#include "core/variables/scatter.h"

#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace tessera {
namespace {

// A block of `rows` x `width` with distinct, nonzero values.
Tensor MakeBlock(int64_t rows, int64_t width) {
  Tensor t(Shape{rows, width});
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = 1.0f + 0.5f * static_cast<float>(i % 7);
  return t;
}

Tensor MakeRows(int64_t n, int64_t width, float base) {
  Tensor t(Shape{n, width});
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = base + 0.25f * static_cast<float>(i);
  return t;
}

// The plain-loop reference: one element at a time, in the order given, with the scalar
// operation written out independently of the implementation.
Tensor ReferenceScatter(ScatterOp op, const Tensor& block, const Ids& ids, const Tensor& rows) {
  Tensor out = block;
  const int64_t width = block.row_size();
  for (size_t k = 0; k < ids.size(); ++k) {
    for (int64_t j = 0; j < width; ++j) {
      float& x = out.values()[ids[k] * width + j];
      const float y = rows.values()[k * width + j];
      switch (op) {
        case ScatterOp::kAdd:
          x = x + y;
          break;
        case ScatterOp::kSub:
          x = x - y;
          break;
        case ScatterOp::kMul:
          x = x * y;
          break;
        case ScatterOp::kDiv:
          x = x / y;
          break;
        case ScatterOp::kMin:
          x = std::fmin(x, y);
          break;  // no NaNs in this table
        case ScatterOp::kMax:
          x = std::fmax(x, y);
          break;
        case ScatterOp::kUpdate:
          x = y;
          break;
      }
    }
  }
  return out;
}

bool SameValues(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  for (int64_t i = 0; i < a.size(); ++i) {
    const float x = a.values()[i], y = b.values()[i];
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) return false;
  }
  return true;
}

const ScatterOp kOps[] = {ScatterOp::kAdd, ScatterOp::kSub, ScatterOp::kMul,   ScatterOp::kDiv,
                          ScatterOp::kMin, ScatterOp::kMax, ScatterOp::kUpdate};

TEST_CASE("every scatter op matches the plain-loop reference, with and without duplicates") {
  struct Case {
    const char* what;
    Ids ids;
  };
  const Case cases[] = {
      {"no ids", {}},
      {"one id", {3}},
      {"distinct ids out of order", {4, 0, 2}},
      {"duplicates", {1, 3, 1, 1, 0}},
      {"every row", {0, 1, 2, 3, 4}},
  };
  for (ScatterOp op : kOps) {
    for (const Case& c : cases) {
      CAPTURE(ScatterOpName(op));
      CAPTURE(c.what);
      Tensor block = MakeBlock(5, 3);
      const Tensor rows = MakeRows(static_cast<int64_t>(c.ids.size()), 3, -1.0f);
      const Tensor want = ReferenceScatter(op, block, c.ids, rows);
      REQUIRE(ScatterRows(op, block.view(), c.ids, rows).ok());
      CHECK(SameValues(block, want));
    }
  }
}

TEST_CASE("scatter ops work on blocks of rank 1 and rank 3") {
  Tensor vec = MakeBlock(4, 1);
  REQUIRE(vec.Reshape(Shape{4}).ok());
  Tensor vec_rows(Shape{2}, 10.0f);
  REQUIRE(ScatterRows(ScatterOp::kAdd, vec.view(), Ids{2, 2}, vec_rows).ok());
  CHECK(vec.values()[2] == MakeBlock(4, 1).values()[2] + 20.0f);

  Tensor cube(Shape{3, 2, 2}, 1.0f);
  Tensor cube_rows(Shape{1, 2, 2}, 4.0f);
  REQUIRE(ScatterRows(ScatterOp::kMul, cube.view(), Ids{1}, cube_rows).ok());
  for (int64_t i = 0; i < cube.size(); ++i) CHECK(cube.values()[i] == (i / 4 == 1 ? 4.0f : 1.0f));
}

TEST_CASE("scatter_update with duplicate ids keeps the last row") {
  Tensor block(Shape{3, 2}, 0.0f);
  auto rows = Tensor::FromVector(Shape{3, 2}, {1, 1, 2, 2, 3, 3});
  REQUIRE(rows.ok());
  REQUIRE(ScatterRows(ScatterOp::kUpdate, block.view(), Ids{1, 1, 1}, *rows).ok());
  CHECK(block.row(1)[0] == 3.0f);
  CHECK(block.row(1)[1] == 3.0f);
  CHECK(block.row(0)[0] == 0.0f);
}

TEST_CASE("scatter_div by zero follows IEEE: inf for nonzero numerators and NaN for zero") {
  auto block = Tensor::FromVector(Shape{1, 3}, {2.0f, -2.0f, 0.0f});
  REQUIRE(block.ok());
  REQUIRE(ScatterRows(ScatterOp::kDiv, block->view(), Ids{0}, Tensor(Shape{1, 3}, 0.0f)).ok());
  CHECK(block->values()[0] == std::numeric_limits<float>::infinity());
  CHECK(block->values()[1] == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(block->values()[2]));
}

TEST_CASE("scatter_min and scatter_max propagate NaN from either side") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (ScatterOp op : {ScatterOp::kMin, ScatterOp::kMax}) {
    CAPTURE(ScatterOpName(op));
    auto block = Tensor::FromVector(Shape{1, 3}, {nan, 1.0f, 5.0f});
    auto rows = Tensor::FromVector(Shape{1, 3}, {0.0f, nan, 2.0f});
    REQUIRE(block.ok());
    REQUIRE(rows.ok());
    REQUIRE(ScatterRows(op, block->view(), Ids{0}, *rows).ok());
    CHECK(std::isnan(block->values()[0]));
    CHECK(std::isnan(block->values()[1]));
    CHECK(block->values()[2] == (op == ScatterOp::kMin ? 2.0f : 5.0f));
  }
}

TEST_CASE("bad scatter input is rejected with a clear message and leaves the block unchanged") {
  struct Case {
    const char* what;
    Ids ids;
    Shape rows_shape;
    const char* message;
  };
  const Case cases[] = {
      {"id past the end",
       {0, 5},
       Shape{2, 3},
       "scatter_add: id 5 at position 1 is out of range [0, 5)"},
      {"negative id", {-1}, Shape{1, 3}, "scatter_add: id -1 at position 0 is out of range [0, 5)"},
      {"wrong width",
       {0},
       Shape{1, 4},
       "scatter_add: rows of shape [1, 4] do not match the block's rows [1, 3] (block shape [5, "
       "3])"},
      {"wrong trailing rank",
       {0},
       Shape{1, 3, 1},
       "scatter_add: rows of shape [1, 3, 1] do not match the block's rows [1, 3] (block shape "
       "[5, 3])"},
      {"too few rows",
       {0, 1},
       Shape{1, 3},
       "scatter_add: expected one row per id (2 ids), got rows of shape [1, 3]"},
      {"scalar rows",
       {0},
       Shape{},
       "scatter_add: expected one row per id (1 ids), got rows of shape []"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Tensor block = MakeBlock(5, 3);
    const Tensor before = block;
    const absl::Status st =
        ScatterRows(ScatterOp::kAdd, block.view(), c.ids, Tensor(c.rows_shape, 1.0f));
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st.message() == c.message);
    CHECK(SameValues(block, before));
  }
}

TEST_CASE("an invalid id after valid ones still leaves the block untouched") {
  for (ScatterOp op : kOps) {
    CAPTURE(ScatterOpName(op));
    Tensor block = MakeBlock(5, 3);
    const Tensor before = block;
    CHECK_FALSE(ScatterRows(op, block.view(), Ids{0, 1, 2, 7}, MakeRows(4, 3, 9.0f)).ok());
    CHECK(SameValues(block, before));
  }
}

TEST_CASE("scatter rejects an op outside the enum and a scalar block") {
  Tensor block = MakeBlock(2, 2);
  const absl::Status bad_op =
      ScatterRows(static_cast<ScatterOp>(42), block.view(), Ids{0}, Tensor(Shape{1, 2}));
  CHECK(bad_op.code() == absl::StatusCode::kInvalidArgument);
  CHECK(bad_op.message() == "scatter: unknown op 42 (expected 0..6)");
  Tensor scalar(Shape{}, 1.0f);
  CHECK(ScatterRows(ScatterOp::kAdd, scalar.view(), Ids{0}, Tensor(Shape{1})).code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(scalar.values()[0] == 1.0f);
}

TEST_CASE("scatter op names round-trip through ParseScatterOp") {
  for (ScatterOp op : kOps) {
    auto parsed = ParseScatterOp(ScatterOpName(op));
    REQUIRE(parsed.ok());
    CHECK(*parsed == op);
  }
  CHECK(ParseScatterOp("scatter_pow").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("whole-block assign, assign_add and assign_sub match the plain loop") {
  struct Case {
    AssignKind kind;
    float (*reference)(float, float);
  };
  const Case cases[] = {
      {AssignKind::kAssign, [](float, float y) { return y; }},
      {AssignKind::kAdd, [](float x, float y) { return x + y; }},
      {AssignKind::kSub, [](float x, float y) { return x - y; }},
  };
  for (const Case& c : cases) {
    CAPTURE(AssignKindName(c.kind));
    Tensor block = MakeBlock(4, 3);
    const Tensor value = MakeRows(4, 3, 2.0f);
    Tensor want = block;
    for (int64_t i = 0; i < want.size(); ++i) {
      want.values()[i] = c.reference(want.values()[i], value.values()[i]);
    }
    REQUIRE(AssignBlock(c.kind, block.view(), value).ok());
    CHECK(SameValues(block, want));
  }
}

TEST_CASE("assign with a shape mismatch names both shapes and leaves the block unchanged") {
  for (AssignKind kind : {AssignKind::kAssign, AssignKind::kAdd, AssignKind::kSub}) {
    Tensor block = MakeBlock(4, 3);
    const Tensor before = block;
    const absl::Status st = AssignBlock(kind, block.view(), Tensor(Shape{3, 4}, 1.0f));
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st.message() ==
          std::string(AssignKindName(kind)) + ": shape [3, 4] does not match expected [4, 3]");
    CHECK(SameValues(block, before));
  }
  Tensor block = MakeBlock(1, 1);
  CHECK(AssignBlock(static_cast<AssignKind>(-1), block.view(), Tensor(Shape{1, 1})).code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("gather returns the rows in the order asked, repeating duplicates") {
  const Tensor block = MakeBlock(5, 3);
  const Ids ids = {4, 0, 4, 2};
  auto got = GatherRows(block, ids);
  REQUIRE(got.ok());
  CHECK(got->shape() == Shape{4, 3});
  for (size_t k = 0; k < ids.size(); ++k) {
    for (int64_t j = 0; j < 3; ++j) CHECK(got->row(k)[j] == block.row(ids[k])[j]);
  }
  auto empty = GatherRows(block, Ids{});
  REQUIRE(empty.ok());
  CHECK(empty->shape() == Shape{0, 3});
  CHECK(GatherRows(block, Ids{1, 5}).status().message() ==
        "gather: id 5 at position 1 is out of range [0, 5)");
}

}  // namespace
}  // namespace tessera
