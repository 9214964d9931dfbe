#include "tessera/model.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "absl/types/span.h"
#include "core/base/random.h"

namespace tessera {
namespace {

// The "div" layout (docs/design.md §3), computed here rather than taken from the layout module so this
// test checks the initializers on their own: the first rows % n shards get one extra row.
std::vector<int64_t> DivOffsets(int64_t rows, int64_t shards) {
  std::vector<int64_t> offsets = {0};
  for (int64_t i = 0; i < shards; ++i) {
    offsets.push_back(offsets.back() + rows / shards + (i < rows % shards ? 1 : 0));
  }
  return offsets;
}

// The full variable built shard by shard, each shard filled on its own tensor and copied into
// place, as a PS node would hold it.
Tensor InitializeSharded(const InitializerSpec& spec, const Shape& shape, int64_t shards) {
  Tensor full(shape, std::numeric_limits<float>::quiet_NaN());
  const std::vector<int64_t> offsets = DivOffsets(shape.rows(), shards);
  for (int64_t i = 0; i < shards; ++i) {
    const int64_t rows = offsets[i + 1] - offsets[i];
    auto block = MakeInitializedBlock(spec, shape, offsets[i], rows);
    REQUIRE(block.ok());
    REQUIRE(block->shape() == shape.WithRows(rows));
    std::copy(block->values().begin(), block->values().end(),
              full.values().begin() + offsets[i] * shape.row_size());
  }
  return full;
}

bool BitwiseEqual(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::equal(a.values().begin(), a.values().end(), b.values().begin(),
                    [](float x, float y) { return std::memcmp(&x, &y, sizeof(float)) == 0; });
}

struct Moments {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

Moments MomentsOf(absl::Span<const float> values) {
  double sum = 0, sum2 = 0;
  Moments m{0, 0, values[0], values[0]};
  for (float v : values) {
    sum += v;
    sum2 += static_cast<double>(v) * v;
    m.min = std::min<double>(m.min, v);
    m.max = std::max<double>(m.max, v);
  }
  const double n = static_cast<double>(values.size());
  m.mean = sum / n;
  m.stddev = std::sqrt(sum2 / n - m.mean * m.mean);
  return m;
}

const InitializerSpec kEveryInitializer[] = {
    {"zeros", {}, 3},
    {"ones", {}, 3},
    {"constant", {{"value", 0.25}}, 3},
    {"random_uniform", {{"minval", -1}, {"maxval", 2}}, 11},
    {"random_normal", {{"mean", 0.5}, {"stddev", 1.5}}, 0},
    {"truncated_normal", {{"mean", -1}, {"stddev", 2}}, 0xDEADBEEFCAFEF00Dull},
    {"glorot_uniform", {}, 42},
};

TEST_CASE("the same seed gives the identical variable for 1, 2, 3 and 7 shards") {
  const Shape shapes[] = {{29}, {13, 4}, {7, 3, 5}, {50, 2, 3, 2}};
  for (const InitializerSpec& spec : kEveryInitializer) {
    for (const Shape& shape : shapes) {
      CAPTURE(spec.name);
      CAPTURE(shape.ToString());
      auto whole = MakeInitializedBlock(spec, shape, 0, shape.rows());
      REQUIRE(whole.ok());
      CHECK(std::none_of(whole->values().begin(), whole->values().end(),
                         [](float v) { return std::isnan(v); }));
      for (int64_t shards : {1, 2, 3, 7}) {
        CAPTURE(shards);
        CHECK(BitwiseEqual(InitializeSharded(spec, shape, shards), *whole));
      }
    }
  }
}

// FNV-1a over the values' bits.
uint64_t HashBits(const Tensor& t) {
  uint64_t h = 1469598103934665603ull;
  for (float v : t.values()) {
    uint32_t bits;
    std::memcpy(&bits, &v, sizeof(bits));
    for (int i = 0; i < 4; ++i) {
      h ^= (bits >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  }
  return h;
}

// Note [Kernels per instruction set]: the hashes were computed from the baseline kernels (a
// clang build, which has no AVX-512 clones); a CPU that runs the AVX-512 clones, or a build with
// -march=native, must give the same bits. They also pin what a seed means.
TEST_CASE("initial values are the same bits on every instruction set") {
  struct Pinned {
    InitializerSpec spec;
    uint64_t whole;     // rows [0, 1000) of [1000, 33]
    uint64_t rows_377;  // rows [377, 382)
  };
  const Pinned pinned[] = {
      {{"random_uniform", {{"minval", -1}, {"maxval", 2}}, 11}, 0x1da4bd4da11dc8b9ull,
       0xf0437dbb34a1bc56ull},
      {{"random_normal", {{"mean", 0.5}, {"stddev", 1.5}}, 0}, 0x967f4cd840232790ull,
       0x06cdb22513051e8bull},
      {{"truncated_normal", {{"mean", -1}, {"stddev", 2}}, 0xDEADBEEFCAFEF00Dull},
       0x62aa221ce9c260fcull, 0x50379835c0eca355ull},
      {{"glorot_uniform", {}, 42}, 0xbd7ee663b56babd2ull, 0x17422148d04b23afull},
  };
  const Shape shape{1000, 33};
  for (const Pinned& p : pinned) {
    CAPTURE(p.spec.name);
    CHECK(HashBits(*MakeInitializedBlock(p.spec, shape, 0, 1000)) == p.whole);
    CHECK(HashBits(*MakeInitializedBlock(p.spec, shape, 377, 5)) == p.rows_377);
  }
}

TEST_CASE("the same seed gives the identical variable at shard counts up to 16, split anywhere") {
  // Blocks that start and end inside a 16-element batch, in a variable of ~66k elements.
  const Shape shape{2011, 33};
  for (const InitializerSpec& spec : kEveryInitializer) {
    CAPTURE(spec.name);
    auto whole = MakeInitializedBlock(spec, shape, 0, shape.rows());
    REQUIRE(whole.ok());
    for (int64_t shards : {4, 5, 9, 16}) {
      CAPTURE(shards);
      CHECK(BitwiseEqual(InitializeSharded(spec, shape, shards), *whole));
    }
  }
}

TEST_CASE("a block filled in place through a view equals the same rows made on their own") {
  const Shape shape{20, 6};
  for (const InitializerSpec& spec : kEveryInitializer) {
    CAPTURE(spec.name);
    Tensor full(shape, -7.0f);
    // Fill rows [5, 12) in place; the rows around them must stay untouched.
    REQUIRE(InitializeBlock(spec, shape, 5, full.RowBlock(5, 7)).ok());
    auto rows = MakeInitializedBlock(spec, shape, 5, 7);
    REQUIRE(rows.ok());
    CHECK(BitwiseEqual(Tensor::Copy(full.RowBlock(5, 7)), *rows));
    CHECK(full.row(4)[5] == -7.0f);
    CHECK(full.row(12)[0] == -7.0f);
  }
}

// The streams of Note [Initializer streams] in core/variables/initializer.cc. They are part of what
// a seed means for a saved model spec, so this test pins them.
constexpr uint64_t kRandomUniformStream = 1;
constexpr uint64_t kRandomNormalStream = 2;
constexpr uint64_t kTruncatedNormalStream = 3;
constexpr uint64_t kGlorotUniformStream = 4;

// Within a float rounding step of `want` (the fill's Box-Muller replaces libm's log and cos).
bool CloseToFloat(float got, double want) {
  return std::abs(got - want) <= 1.2e-7 * std::abs(want) + 1e-12;
}

TEST_CASE("values are CounterRandom's at the element's global index, also past 2^32") {
  const uint64_t seed = 0x0123456789ABCDEFull;
  // Two blocks: the start of a variable, and rows whose flat indices cross 2^32.
  struct Block {
    Shape full;
    int64_t row_offset, rows;
  };
  const Block blocks[] = {{{2000, 50}, 0, 2000}, {{int64_t{1} << 31, 3}, 1431655745, 20}};
  for (const Block& block : blocks) {
    CAPTURE(block.row_offset);
    const uint64_t first = static_cast<uint64_t>(block.row_offset) * block.full.row_size();
    auto uniform = MakeInitializedBlock({"random_uniform", {{"minval", 0}, {"maxval", 1}}, seed},
                                        block.full, block.row_offset, block.rows);
    auto normal = MakeInitializedBlock({"random_normal", {{"stddev", 1}}, seed}, block.full,
                                       block.row_offset, block.rows);
    auto truncated = MakeInitializedBlock({"truncated_normal", {{"stddev", 1}}, seed}, block.full,
                                          block.row_offset, block.rows);
    const double limit = std::sqrt(6.0 / (block.full.dim(0) + block.full.dim(1)));
    auto glorot = MakeInitializedBlock({"glorot_uniform", {}, seed}, block.full, block.row_offset,
                                       block.rows);
    REQUIRE(uniform.ok());
    REQUIRE(normal.ok());
    REQUIRE(truncated.ok());
    REQUIRE(glorot.ok());
    const CounterRandom uniform_rng(seed, kRandomUniformStream);
    const CounterRandom normal_rng(seed, kRandomNormalStream);
    const CounterRandom truncated_rng(seed, kTruncatedNormalStream);
    const CounterRandom redraw_rng(seed, kTruncatedNormalStream | uint64_t{1} << 32);
    const CounterRandom glorot_rng(seed, kGlorotUniformStream);
    int64_t uniform_bad = 0, normal_bad = 0, truncated_bad = 0, glorot_bad = 0, redrawn = 0;
    for (int64_t i = 0; i < uniform->size(); ++i) {
      const uint64_t g = first + i;
      uniform_bad += uniform->values()[i] != uniform_rng.Uniform(g);
      normal_bad += !CloseToFloat(normal->values()[i], normal_rng.Normal(g));
      const double want_glorot = -limit + 2 * limit * glorot_rng.Uniform(g);
      glorot_bad += std::abs(glorot->values()[i] - want_glorot) > 1e-6 * limit;
      // truncated_normal: the first draw when it is within 2 stddev, else the second draw
      // (third and later draws are too rare to meet here).
      const float first_draw = truncated_rng.Normal(g);
      const float got = truncated->values()[i];
      if (std::abs(first_draw) < 1.999f) {
        truncated_bad += !CloseToFloat(got, first_draw);
      } else if (std::abs(first_draw) > 2.001f) {
        ++redrawn;
        const float second_draw = redraw_rng.Normal(g);
        truncated_bad += std::abs(got) > 2.0f ||
                         (std::abs(second_draw) < 1.999f && !CloseToFloat(got, second_draw));
      }
    }
    CHECK(uniform_bad == 0);
    CHECK(normal_bad == 0);
    CHECK(glorot_bad == 0);
    CHECK(truncated_bad == 0);
    if (uniform->size() > 10000) CHECK(redrawn > 0);
  }
}

TEST_CASE("different seeds give different values for every random initializer") {
  const Shape shape{100, 10};
  for (const char* name :
       {"random_uniform", "random_normal", "truncated_normal", "glorot_uniform"}) {
    CAPTURE(name);
    auto a = MakeInitializedBlock({name, {}, 1}, shape, 0, 100);
    auto b = MakeInitializedBlock({name, {}, 2}, shape, 0, 100);
    REQUIRE(a.ok());
    REQUIRE(b.ok());
    int64_t equal = 0;
    for (int64_t i = 0; i < a->size(); ++i) equal += a->values()[i] == b->values()[i];
    CHECK(equal < 5);
    // And elements of one variable are not repeats of each other.
    const Moments m = MomentsOf(a->values());
    CHECK(m.stddev > 0);
  }
}

TEST_CASE("random initializers have the moments of their distributions") {
  // 1e5 samples: the standard error of the mean is stddev / 316, of the stddev about stddev / 447.
  struct Case {
    InitializerSpec spec;
    double mean, stddev, lo, hi;  // expected moments and bounds of every value
  };
  const double inf = std::numeric_limits<double>::infinity();
  // Truncated at 2 stddev, a normal keeps 0.8796 of its stddev.
  const double kTruncatedStddevRatio = 0.87962566;
  const Case cases[] = {
      {{"random_uniform", {{"minval", -2}, {"maxval", 3}}, 7}, 0.5, 5 / std::sqrt(12.0), -2, 3},
      {{"random_uniform", {}, 8}, 0, 0.1 / std::sqrt(12.0), -0.05, 0.05},  // Keras' defaults
      {{"random_normal", {{"mean", 1}, {"stddev", 2}}, 9}, 1, 2, -inf, inf},
      {{"random_normal", {}, 10}, 0, 0.05, -inf, inf},
      {{"truncated_normal", {{"mean", 0.5}, {"stddev", 3}}, 11},
       0.5,
       3 * kTruncatedStddevRatio,
       0.5 - 6,
       0.5 + 6},
      {{"truncated_normal", {}, 12}, 0, 0.05 * kTruncatedStddevRatio, -0.1, 0.1},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec.name);
    CAPTURE(c.spec.seed);
    auto t = MakeInitializedBlock(c.spec, Shape{1000, 100}, 0, 1000);
    REQUIRE(t.ok());
    const Moments m = MomentsOf(t->values());
    CHECK(std::abs(m.mean - c.mean) < 5 * c.stddev / std::sqrt(1e5));
    CHECK(m.stddev == doctest::Approx(c.stddev).epsilon(0.015));
    CHECK(m.min >= c.lo);
    CHECK(m.max <= c.hi);
    if (std::isfinite(c.lo)) {
      // The values reach their bounds: the range is not narrower than specified.
      const double width = c.hi - c.lo;
      CHECK(m.min < c.lo + 0.001 * width);
      CHECK(m.max > c.hi - 0.001 * width);
    }
  }
}

TEST_CASE("truncated_normal re-draws values beyond 2 stddev rather than clamping them") {
  auto t = MakeInitializedBlock({"truncated_normal", {{"stddev", 1}}, 5}, Shape{100000}, 0, 100000);
  REQUIRE(t.ok());
  int64_t near_bound = 0, at_bound = 0;
  for (float v : t->values()) {
    near_bound += std::abs(v) > 1.9f;
    at_bound += std::abs(v) == 2.0f;
  }
  // P(1.9 < |z| <= 2 | |z| <= 2) = 0.0125; clamping would pile 4.6% more onto the bound.
  CHECK(near_bound > 1000);
  CHECK(near_bound < 1500);
  CHECK(at_bound < 5);
}

TEST_CASE("glorot_uniform's limit comes from Keras' fans of the full shape") {
  struct Case {
    Shape shape;
    double fan_in, fan_out;
  };
  const Case cases[] = {
      {{20000}, 20000, 20000},                   // rank 1: both fans are dim 0
      {{200, 100}, 200, 100},                    // rank 2
      {{6, 5, 30, 40}, 6 * 5 * 30, 6 * 5 * 40},  // receptive field 30
      {{2, 3, 4, 50, 60}, 24 * 50, 24 * 60},     // receptive field 24
  };
  for (const Case& c : cases) {
    CAPTURE(c.shape.ToString());
    const double limit = std::sqrt(6.0 / (c.fan_in + c.fan_out));
    // Only a block of the variable: its limit must still be the full shape's.
    auto t = MakeInitializedBlock({"glorot_uniform", {}, 17}, c.shape, 1, c.shape.rows() - 1);
    REQUIRE(t.ok());
    REQUIRE(t->size() >= 19000);
    const Moments m = MomentsOf(t->values());
    CHECK(m.max <= limit);
    CHECK(m.min >= -limit);
    CHECK(m.max > 0.998 * limit);
    CHECK(m.min < -0.998 * limit);
    CHECK(std::abs(m.mean) < 5 * limit / std::sqrt(3.0 * t->size()));
    CHECK(m.stddev * m.stddev == doctest::Approx(limit * limit / 3).epsilon(0.04));
  }
}

TEST_CASE("a scalar variable is one block of one element") {
  // Keras: a scalar has fan_in = fan_out = 1, so glorot's limit is sqrt(3).
  auto scalar = MakeInitializedBlock({"glorot_uniform", {}, 1}, Shape{}, 0, 1);
  REQUIRE(scalar.ok());
  CHECK(scalar->shape() == Shape{});
  const float v = scalar->values()[0];
  CHECK(std::abs(v) <= std::sqrt(3.0f));
  CHECK(v != 0.0f);
  // The same value whether the block is shaped [] or [1].
  Tensor as_row(Shape{1});
  REQUIRE(InitializeBlock({"glorot_uniform", {}, 1}, Shape{}, 0, as_row.view()).ok());
  CHECK(as_row.values()[0] == v);
}

TEST_CASE("zeros, ones and constant fill exactly their value") {
  struct Case {
    InitializerSpec spec;
    float want;
  };
  const Case cases[] = {
      {{"zeros", {}, 0}, 0.0f},
      {{"ones", {}, 0}, 1.0f},
      {{"constant", {}, 0}, 0.0f},
      {{"constant", {{"value", -2.5}}, 0}, -2.5f},
      {{"constant", {{"value", 1e30}}, 0}, 1e30f},
  };
  const Shape shape{9, 3, 2};
  for (const Case& c : cases) {
    CAPTURE(c.spec.name);
    CAPTURE(c.want);
    Tensor block(shape.WithRows(4), std::numeric_limits<float>::quiet_NaN());
    REQUIRE(InitializeBlock(c.spec, shape, 5, block.view()).ok());
    CHECK(std::all_of(block.values().begin(), block.values().end(),
                      [&](float v) { return v == c.want; }));
  }
}

TEST_CASE("an empty block or an empty variable is filled without error") {
  for (const InitializerSpec& spec : kEveryInitializer) {
    CAPTURE(spec.name);
    auto none = MakeInitializedBlock(spec, Shape{5, 3}, 5, 0);
    REQUIRE(none.ok());
    CHECK(none->shape() == Shape{0, 3});
    auto empty = MakeInitializedBlock(spec, Shape{0, 0}, 0, 0);
    REQUIRE(empty.ok());
    CHECK(empty->size() == 0);
  }
}

TEST_CASE("every initializer with valid parameters validates") {
  for (const InitializerSpec& spec : kEveryInitializer) {
    CAPTURE(spec.name);
    CHECK(ValidateInitializer(spec).ok());
  }
  CHECK(ValidateInitializer({"random_normal", {{"stddev", 0}}, 0}).ok());
}

TEST_CASE("invalid specs are rejected with a message naming the problem") {
  struct Case {
    InitializerSpec spec;
    std::string message;
  };
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Case cases[] = {
      {{"glorot_normal", {}, 0}, "unknown initializer \"glorot_normal\"; expected one of zeros"},
      {{"", {}, 0}, "unknown initializer \"\""},
      {{"random_uniform", {{"stddev", 1}}, 0},
       "initializer random_uniform: unknown parameter \"stddev\"; accepted: minval, maxval"},
      {{"zeros", {{"value", 1}}, 0},
       "initializer zeros: unknown parameter \"value\"; accepted: none"},
      {{"random_uniform", {{"minval", 1}, {"maxval", 1}}, 0},
       "initializer random_uniform: maxval (1) must be greater than minval (1)"},
      {{"random_uniform", {{"minval", 0.5}}, 0},
       "initializer random_uniform: maxval (0.05) must be greater than minval (0.5)"},
      {{"random_normal", {{"stddev", -1}}, 0},
       "initializer random_normal: stddev (-1) must be >= 0"},
      {{"truncated_normal", {{"stddev", -0.5}}, 0},
       "initializer truncated_normal: stddev (-0.5) must be >= 0"},
      {{"constant", {{"value", nan}}, 0}, "initializer constant: parameter value is nan"},
      {{"constant", {{"value", 1e39}}, 0},
       "initializer constant: parameter value is 1e+39; it must be a finite float32"},
      {{"random_uniform", {{"minval", 1}, {"maxval", 1 + 1e-12}}, 0},
       "maxval (1) must be greater than minval (1)"},
      {{"random_uniform", {{"minval", -3e38}, {"maxval", 3e38}}, 0},
       "initializer random_uniform: the range maxval - minval (6e+38) overflows a float32"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec.name);
    const absl::Status st = ValidateInitializer(c.spec);
    CAPTURE(st.message());
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st.message().find(c.message) != absl::string_view::npos);
    // Filling with an invalid spec fails the same way and writes nothing.
    Tensor block(Shape{2, 2}, 9.0f);
    CHECK(InitializeBlock(c.spec, Shape{2, 2}, 0, block.view()) == st);
    CHECK(block.values()[0] == 9.0f);
  }
}

TEST_CASE("a block that does not fit the variable is rejected and left untouched") {
  struct Case {
    Shape full;
    int64_t row_offset;
    Shape block;
    std::string message;
  };
  const Case cases[] = {
      {{10, 4},
       0,
       {2, 3},
       "block shape [2, 3] does not match the variable's trailing dims: "
       "expected [2, 4] for variable shape [10, 4]"},
      {{10, 4}, 0, {2, 4, 1}, "block shape [2, 4, 1] does not match"},
      {{10, 4}, 0, {8}, "block shape [8] does not match"},
      {{10, 4},
       9,
       {2, 4},
       "a block of 2 rows at row offset 9 falls outside the variable's 10 "
       "rows (variable shape [10, 4])"},
      {{10, 4}, -1, {2, 4}, "a block of 2 rows at row offset -1 falls outside"},
      {{10, 4}, 0, {11, 4}, "a block of 11 rows at row offset 0 falls outside"},
      {{10, 4}, std::numeric_limits<int64_t>::max(), {1, 4}, "falls outside"},
      {{}, 1, {1}, "a block of 1 rows at row offset 1 falls outside the variable's 1 rows"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.full.ToString());
    CAPTURE(c.block.ToString());
    Tensor block(c.block, 9.0f);
    const absl::Status st =
        InitializeBlock({"random_normal", {}, 1}, c.full, c.row_offset, block.view());
    CAPTURE(st.message());
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st.message().find(c.message) != absl::string_view::npos);
    CHECK(std::all_of(block.values().begin(), block.values().end(),
                      [](float v) { return v == 9.0f; }));
  }
  const auto negative = MakeInitializedBlock({"zeros", {}, 0}, Shape{10, 4}, 0, -1);
  CHECK(negative.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(negative.status().message().find("row count -1 is negative") != absl::string_view::npos);
  CHECK(MakeInitializedBlock({"zeros", {}, 0}, Shape{10, 4}, 8, 3).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
