#include "tessera/tensor.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <vector>

#include "core/variables/indexed_slices.h"
#include "tessera/status.h"

namespace tessera {
namespace {

TEST_CASE("a shape knows its rows, row size and element count") {
  const Shape s{13, 4, 2};
  CHECK(s.rank() == 3);
  CHECK(s.rows() == 13);
  CHECK(s.row_size() == 8);
  CHECK(s.num_elements() == 104);
  CHECK(s.ToString() == "[13, 4, 2]");
  CHECK(s.WithRows(5) == Shape{5, 4, 2});
  CHECK(Shape{}.num_elements() == 1);
  CHECK(Shape{}.ToString() == "[]");
  CHECK(Shape{7}.row_size() == 1);
}

TEST_CASE("a negative dimension is rejected by the checked constructor") {
  auto s = Shape::Make({3, -1});
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Shape::Make({3, 0}).ok());
}

TEST_CASE("a shape mismatch names both shapes") {
  const absl::Status st = CheckSameShape(Shape{2, 3}, Shape{2, 4}, "assign");
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(st.message() == "assign: shape [2, 3] does not match expected [2, 4]");
  CHECK(CheckSameShape(Shape{2, 3}, Shape{2, 3}, "x").ok());
}

TEST_CASE("FromVector checks the element count") {
  CHECK_FALSE(Tensor::FromVector(Shape{2, 2}, {1, 2, 3}).ok());
  auto t = Tensor::FromVector(Shape{2, 2}, {1, 2, 3, 4});
  REQUIRE(t.ok());
  CHECK(t->row(1)[0] == 3);
}

TEST_CASE("zeros, fills and copies hold their values, and -0.0 keeps its sign") {
  const Tensor zeros(Shape{3, 1000});
  CHECK(std::all_of(zeros.values().begin(), zeros.values().end(),
                    [](float v) { return v == 0.0f && !std::signbit(v); }));
  const Tensor fill(Shape{2, 3}, 2.5f);
  CHECK(std::all_of(fill.values().begin(), fill.values().end(), [](float v) { return v == 2.5f; }));
  const Tensor negative_zero(Shape{4}, -0.0f);
  CHECK(std::all_of(negative_zero.values().begin(), negative_zero.values().end(),
                    [](float v) { return v == 0.0f && std::signbit(v); }));
  Tensor copy = fill;
  CHECK(copy.shape() == fill.shape());
  CHECK(copy.data() != fill.data());
  copy.values()[0] = 7;
  CHECK(fill.values()[0] == 2.5f);
  const Tensor empty(Shape{0, 5});
  CHECK(empty.size() == 0);
  CHECK(Tensor(empty).size() == 0);
}

TEST_CASE("a large zero tensor costs no memory until it is written") {
  // Note [Tensor storage]: 512 MiB of zeros from calloc are untouched pages, not resident.
  auto resident = [] {
    std::ifstream statm("/proc/self/statm");
    int64_t pages = 0, rss = 0;
    statm >> pages >> rss;
    return rss * sysconf(_SC_PAGESIZE);
  };
  const int64_t before = resident();
  Tensor big(Shape{int64_t{128} << 20});
  const int64_t after = resident();
  CHECK_MESSAGE(after - before < (int64_t{64} << 20), "RSS grew by ", after - before);
  CHECK(big.values()[12345678] == 0.0f);
  big.values()[big.size() - 1] = 3;
  CHECK(big.values()[big.size() - 1] == 3.0f);
}

TEST_CASE("a copy assigned to a tensor of the same size reuses its memory") {
  const Tensor source(Shape{4, 8}, 1.5f);
  Tensor target(Shape{8, 4});
  const float* before = target.data();
  target = source;
  CHECK(target.data() == before);
  CHECK(target.shape() == source.shape());
  CHECK(target.values()[31] == 1.5f);
  // A smaller one fits too; a larger one needs new memory.
  target = Tensor(Shape{2}, 4.0f);
  CHECK(target.size() == 2);
  const Tensor larger(Shape{100}, 5.0f);
  target = larger;
  CHECK(target.size() == 100);
  CHECK(target.values()[99] == 5.0f);
}

TEST_CASE("FromVector adopts the vector's memory, and a move leaves an empty tensor") {
  std::vector<float> values = {1, 2, 3, 4, 5, 6};
  const float* memory = values.data();
  Tensor adopted = *Tensor::FromVector(Shape{2, 3}, std::move(values));
  CHECK(adopted.data() == memory);
  Tensor moved = std::move(adopted);
  CHECK(moved.data() == memory);
  CHECK(moved.values()[5] == 6.0f);
  CHECK(adopted.size() == 0);
  CHECK(adopted.shape() == Shape{0});
}

TEST_CASE("ResizeToZeros gives zeros of the shape, in the same memory while it fits") {
  Tensor t(Shape{10, 4}, 3.0f);
  const float* memory = t.data();
  t.ResizeToZeros(Shape{6, 4});
  CHECK(t.shape() == Shape{6, 4});
  CHECK(t.data() == memory);
  CHECK(std::all_of(t.values().begin(), t.values().end(), [](float v) { return v == 0.0f; }));
  t.values()[0] = 5;
  t.ResizeToZeros(Shape{10, 4});  // back to the capacity: still fits
  CHECK(t.data() == memory);
  CHECK(t.values()[0] == 0.0f);
  t.ResizeToZeros(Shape{20, 4});  // grows
  CHECK(t.size() == 80);
  CHECK(std::all_of(t.values().begin(), t.values().end(), [](float v) { return v == 0.0f; }));
  Tensor adopted = *Tensor::FromVector(Shape{4}, {1, 2, 3, 4});
  const float* vector_memory = adopted.data();
  adopted.ResizeToZeros(Shape{1, 3});
  CHECK(adopted.data() == vector_memory);
  CHECK(adopted.values()[2] == 0.0f);
  Tensor empty;
  empty.ResizeToZeros(Shape{0, 7});
  CHECK(empty.size() == 0);
  CHECK(empty.shape() == Shape{0, 7});
}

TEST_CASE("a row block is a zero-copy view onto the tensor's rows") {
  Tensor t(Shape{5, 3});
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = static_cast<float>(i);
  TensorView block = t.RowBlock(2, 2);
  CHECK(block.shape() == Shape{2, 3});
  CHECK(block.data() == t.data() + 6);
  block.matrix().array() += 100.0f;
  CHECK(t.row(2)[0] == 106.0f);
  CHECK(t.row(3)[2] == 111.0f);
  CHECK(t.row(4)[0] == 12.0f);
  ConstTensorView cv = block;
  CHECK(cv.matrix()(1, 2) == 111.0f);
}

TEST_CASE("Reshape keeps values and checks the element count") {
  Tensor t(Shape{2, 6}, 1.5f);
  CHECK(t.Reshape(Shape{3, 4}).ok());
  CHECK(t.row_size() == 4);
  CHECK(t.Reshape(Shape{5}).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("dtypes parse, print and size") {
  CHECK(DTypeName(DType::kInt64) == "int64");
  CHECK(*ParseDType("float32") == DType::kFloat32);
  CHECK_FALSE(ParseDType("float16").ok());
  CHECK(DTypeSize(DType::kString, 24) == 24);
  CHECK(DTypeSize(DType::kFloat32) == 4);
}

TEST_CASE("SumDuplicates sums repeated rows and sorts the ids") {
  auto values = Tensor::FromVector(Shape{4, 2}, {1, 2, 10, 20, 3, 4, 100, 200});
  REQUIRE(values.ok());
  IndexedSlices s = SumDuplicates(std::vector<int64_t>{5, 1, 5, 0}, *values);
  CHECK(s.indices == Ids{0, 1, 5});
  CHECK(s.values.shape() == Shape{3, 2});
  CHECK(s.values.values()[0] == 100);
  CHECK(s.values.values()[2] == 10);
  CHECK(s.values.values()[4] == 4);
  CHECK(s.values.values()[5] == 6);
}

TEST_CASE("SparseRows own an IndexedSlices' values, or share a row range of a tensor") {
  IndexedSlices slices{Ids{3, 1}, Tensor(Shape{2, 4}, 2.0f)};
  const float* values = slices.values.data();
  const SparseRows own(std::move(slices));
  CHECK(own.indices() == Ids{3, 1});
  CHECK(own.values().shape() == Shape{2, 4});
  CHECK(own.values().data() == values);  // moved, not copied

  auto source = std::make_shared<const Tensor>(Shape{5, 4}, 1.0f);
  const SparseRows shared = SparseRows::Share(Ids{7, 8}, source, /*begin=*/3);
  CHECK(shared.values().shape() == Shape{2, 4});
  CHECK(shared.values().data() == source->data() + 12);  // rows 3 and 4, in place
  const SparseRows copy = shared;
  CHECK(copy.values().data() == shared.values().data());
  CHECK(source.use_count() == 3);  // the source lives while a SparseRows holds it
  const SparseRows none = SparseRows::Share(Ids{}, source, /*begin=*/5);
  CHECK(none.values().shape() == Shape{0, 4});
  CHECK(SparseRows().values().size() == 0);
}

TEST_CASE("IsSortedUnique holds exactly for strictly increasing ids") {
  struct Case {
    Ids ids;
    bool want;
  };
  for (const Case& c : std::vector<Case>{{{}, true},
                                         {{7}, true},
                                         {{-3, 0, 2, 9}, true},
                                         {{0, 1, 1, 2}, false},   // a repeat
                                         {{0, 2, 1}, false},      // out of order
                                         {{5, 5}, false},
                                         {{1, 2, 3, 0}, false}}) {  // only the last pair
    CAPTURE(c.ids.size());
    CHECK(IsSortedUnique(c.ids) == c.want);
  }
}

TEST_CASE("ValidateIndexedRows reports the first bad index, count or width") {
  Tensor rows(Shape{2, 3});
  CHECK(ValidateIndexedRows(std::vector<int64_t>{0, 4}, rows, 5, 3).ok());
  CHECK(ValidateIndexedRows(std::vector<int64_t>{0, 5}, rows, 5, 3).message() ==
        "indexed rows: index 5 at position 1 is out of range [0, 5)");
  CHECK_FALSE(ValidateIndexedRows(std::vector<int64_t>{-1, 0}, rows, 5, 3).ok());
  CHECK_FALSE(ValidateIndexedRows(std::vector<int64_t>{0}, rows, 5, 3).ok());
  CHECK_FALSE(ValidateIndexedRows(std::vector<int64_t>{0, 1}, rows, 5, 4).ok());
}

absl::StatusOr<int> Half(int x) {
  if (x % 2) return absl::InvalidArgumentError("odd");
  return x / 2;
}
absl::StatusOr<int> Quarter(int x) {
  TESSERA_ASSIGN_OR_RETURN(int h, Half(x));
  TESSERA_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}
absl::Status CheckEven(int x) {
  TESSERA_RETURN_IF_ERROR(Half(x).status());
  return absl::OkStatus();
}

TEST_CASE("the status macros return the first error and pass values through") {
  CHECK(*Quarter(12) == 3);
  CHECK(Quarter(6).status().message() == "odd");
  CHECK(CheckEven(4).ok());
  CHECK(CheckEven(3).code() == absl::StatusCode::kInvalidArgument);
  CHECK(Annotate(absl::NotFoundError("x"), "loading").message() == "loading: x");
  CHECK(Annotate(absl::OkStatus(), "loading").ok());
}

}  // namespace
}  // namespace tessera
