#include "tessera/partitioner.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// The value of `v`; fails the test case (rather than aborting) when it is an error.
template <typename T>
T Must(absl::StatusOr<T> v) {
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *std::move(v);
}

std::vector<int64_t> MustPartition(const Partitioner& p, const Shape& shape, DType dtype) {
  absl::StatusOr<std::vector<int64_t>> got = p.Partition(shape, dtype);
  REQUIRE_MESSAGE(got.ok(), got.status().ToString());
  return *got;
}

struct PartitionCase {
  const char* what;
  absl::StatusOr<Partitioner> partitioner;
  Shape shape;
  DType dtype;
  std::vector<int64_t> expected;
};

TEST_CASE("built-in partitioners reproduce TensorFlow's test vectors") {
  // tensorflow/python/distribute/sharded_variable_test.py, PartitionerTest, plus the Fixed
  // vectors of the same shape.
  const PartitionCase cases[] = {
      {"min 4 bytes, max 2", MinSizePartitioner(4, 2), Shape{6, 1}, DType::kFloat32, {2, 1}},
      {"min 4 bytes, max 10", MinSizePartitioner(4, 10), Shape{6, 1}, DType::kFloat32, {6, 1}},
      {"max 4 bytes", MaxSizePartitioner(4), Shape{6, 1}, DType::kFloat32, {6, 1}},
      {"max 4 bytes, max 2", MaxSizePartitioner(4, 2), Shape{6, 1}, DType::kFloat32, {2, 1}},
      {"max 1024 bytes", MaxSizePartitioner(1024), Shape{6, 1}, DType::kFloat32, {1, 1}},
      {"fixed 2 on [10, 3]", FixedShardsPartitioner(2), Shape{10, 3}, DType::kFloat32, {2, 1}},
      {"fixed 2 on [6, 1]", FixedShardsPartitioner(2), Shape{6, 1}, DType::kFloat32, {2, 1}},
      {"fixed 10 on [6, 1]", FixedShardsPartitioner(10), Shape{6, 1}, DType::kFloat32, {6, 1}},
  };
  for (const PartitionCase& c : cases) {
    CAPTURE(c.what);
    REQUIRE(c.partitioner.ok());
    CHECK(MustPartition(*c.partitioner, c.shape, c.dtype) == c.expected);
  }
}

TEST_CASE("partitioners size shards by dtype, string estimate and rounding") {
  const PartitionCase cases[] = {
      // 4,000,000 bytes / 256 KiB = 15.26 -> 16 shards when allowed.
      {"min default bytes, max 100",
       MinSizePartitioner(kDefaultMinShardBytes, 100),
       Shape{1000, 1000},
       DType::kFloat32,
       {16, 1}},
      {"min default, default max 1",
       MinSizePartitioner(),
       Shape{1000, 1000},
       DType::kFloat32,
       {1, 1}},
      {"min: int64 is 8 bytes", MinSizePartitioner(16, 100), Shape{10, 2}, DType::kInt64, {10, 1}},
      {"min: 320 string bytes / 64",
       MinSizePartitioner(64, 100),
       Shape{10, 2},
       DType::kString,
       {5, 1}},
      {"min: 32 bytes per string",
       MinSizePartitioner(64, 100, 32),
       Shape{10, 2},
       DType::kString,
       {10, 1}},
      {"min: capped by rows", MinSizePartitioner(1, 100), Shape{3, 4}, DType::kFloat32, {3, 1}},
      {"min: rank 1", MinSizePartitioner(8, 100), Shape{10}, DType::kFloat32, {5}},
      {"min: rank 3", MinSizePartitioner(48, 100), Shape{4, 3, 2}, DType::kFloat32, {2, 1, 1}},
      {"max: 3 rows per shard", MaxSizePartitioner(12), Shape{10, 1}, DType::kFloat32, {4, 1}},
      {"max: a row bigger than the limit",
       MaxSizePartitioner(4),
       Shape{6, 100},
       DType::kFloat32,
       {6, 1}},
      {"max: string rows of 32 bytes",
       MaxSizePartitioner(64),
       Shape{10, 2},
       DType::kString,
       {5, 1}},
      {"max: string rows of 64 bytes",
       MaxSizePartitioner(64, std::nullopt, 32),
       Shape{10, 2},
       DType::kString,
       {10, 1}},
      {"max: zero-sized rows", MaxSizePartitioner(4), Shape{5, 0}, DType::kFloat32, {1, 1}},
      {"min: zero-sized rows", MinSizePartitioner(4, 10), Shape{5, 0}, DType::kFloat32, {1, 1}},
      {"fixed: no rows", FixedShardsPartitioner(3), Shape{0, 4}, DType::kFloat32, {1, 1}},
      {"none", absl::StatusOr<Partitioner>(Partitioner()), Shape{100, 4}, DType::kFloat32, {1, 1}},
  };
  for (const PartitionCase& c : cases) {
    CAPTURE(c.what);
    REQUIRE(c.partitioner.ok());
    CHECK(MustPartition(*c.partitioner, c.shape, c.dtype) == c.expected);
  }
}

TEST_CASE("partitioner arithmetic does not overflow on huge shapes") {
  const int64_t big = int64_t{1} << 40;
  // 2^82 bytes in total: every shard cap wins.
  CHECK(MustPartition(Must(MinSizePartitioner(1, int64_t{1} << 20)), Shape{big, big},
                      DType::kFloat32) == std::vector<int64_t>{int64_t{1} << 20, 1});
  // A row of 2^82 bytes is over any limit: one row per shard.
  CHECK(MustPartition(Must(MaxSizePartitioner(std::numeric_limits<int64_t>::max())),
                      Shape{4, big, big}, DType::kFloat32) == std::vector<int64_t>{4, 1, 1});
  // A row of 2^162 elements overflows even 128 bits; it must saturate, not wrap to 0 bytes.
  const Shape enormous{4, big, big, big, big};
  CHECK(MustPartition(Must(MaxSizePartitioner(1024)), enormous, DType::kFloat32) ==
        std::vector<int64_t>{4, 1, 1, 1, 1});
  CHECK(MustPartition(Must(MinSizePartitioner(1024, 3)), enormous, DType::kFloat32) ==
        std::vector<int64_t>{3, 1, 1, 1, 1});
  // 2^40 rows of 4 bytes under a 4 KiB limit: 2^30 shards.
  CHECK(MustPartition(Must(MaxSizePartitioner(4096)), Shape{big, 1}, DType::kFloat32) ==
        std::vector<int64_t>{int64_t{1} << 30, 1});
}

TEST_CASE("partitioner arguments below 1 are InvalidArgument naming the argument") {
  struct Case {
    const char* what;
    absl::StatusOr<Partitioner> partitioner;
    const char* message;
  };
  const Case cases[] = {
      {"fixed 0", FixedShardsPartitioner(0),
       "FixedShardsPartitioner: num_shards must be >= 1, got 0"},
      {"fixed -3", FixedShardsPartitioner(-3), "num_shards must be >= 1, got -3"},
      {"min bytes 0", MinSizePartitioner(0), "min_shard_bytes must be >= 1, got 0"},
      {"min max_shards 0", MinSizePartitioner(4, 0), "max_shards must be >= 1, got 0"},
      {"min bytes_per_string 0", MinSizePartitioner(4, 1, 0), "bytes_per_string must be >= 1"},
      {"max bytes 0", MaxSizePartitioner(0), "max_shard_bytes must be >= 1, got 0"},
      {"max bytes -1", MaxSizePartitioner(-1), "max_shard_bytes must be >= 1, got -1"},
      {"max max_shards 0", MaxSizePartitioner(4, 0), "MaxSizePartitioner: max_shards must be"},
      {"max bytes_per_string -2", MaxSizePartitioner(4, 3, -2), "bytes_per_string must be >= 1"},
      {"custom without a function", CustomPartitioner(nullptr), "the function is empty"},
      {"custom without a description",
       CustomPartitioner([](const Shape& s, DType) { return std::vector<int64_t>(s.rank(), 1); },
                         ""),
       "the description is empty"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    REQUIRE_FALSE(c.partitioner.ok());
    CHECK(c.partitioner.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(std::string(c.partitioner.status().message()).find(c.message) != std::string::npos);
  }
}

TEST_CASE("a custom partitioner's result is validated") {
  std::vector<int64_t> result;
  const Partitioner p =
      Must(CustomPartitioner([&result](const Shape&, DType) { return result; }, "table"));
  CHECK(p.description() == "table");
  struct Case {
    std::vector<int64_t> result;
    const char* message;  // empty when valid
  };
  const Case cases[] = {
      {{3, 1}, ""},
      {{1, 1}, ""},
      {{3}, "expected one entry per axis (2)"},
      {{3, 1, 1}, "expected one entry per axis (2)"},
      {{0, 1}, "the axis-0 shard count must be >= 1"},
      {{-2, 1}, "the axis-0 shard count must be >= 1"},
      {{2, 2}, "entry 1 must be 1 (only axis 0 is sharded)"},
      {{1, 0}, "entry 1 must be 1"},
  };
  for (const Case& c : cases) {
    result = c.result;
    absl::StatusOr<std::vector<int64_t>> got = p.Partition(Shape{6, 4}, DType::kFloat32);
    CAPTURE(std::string(c.message));
    if (std::string(c.message).empty()) {
      REQUIRE(got.ok());
      CHECK(*got == c.result);
    } else {
      REQUIRE_FALSE(got.ok());
      CHECK(got.status().code() == absl::StatusCode::kInvalidArgument);
      const std::string message(got.status().message());
      CHECK(message.find(c.message) != std::string::npos);
      CHECK(message.find("partitioner 'table'") != std::string::npos);
      CHECK(message.find("[6, 4]") != std::string::npos);
    }
  }
  result = {2, 2};
  CHECK(NumShards(p, Shape{6, 4}, DType::kFloat32).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("NumShards never partitions a scalar or an empty variable, and caps at the rows") {
  int calls = 0;
  const Partitioner greedy = Must(CustomPartitioner(
      [&calls](const Shape& s, DType) {
        ++calls;
        std::vector<int64_t> r(s.rank(), 1);
        r[0] = 100;
        return r;
      },
      "greedy"));
  CHECK(Must(NumShards(greedy, Shape{}, DType::kFloat32)) == 1);
  CHECK(Must(NumShards(greedy, Shape{0, 8}, DType::kFloat32)) == 1);
  CHECK(calls == 0);
  CHECK(Must(NumShards(greedy, Shape{6, 1}, DType::kFloat32)) == 6);
  CHECK(Must(NumShards(greedy, Shape{200}, DType::kFloat32)) == 100);
  CHECK(calls == 2);

  for (const char* spec : {"none", "fixed:4", "min_size:1:10", "max_size:1"}) {
    CAPTURE(spec);
    const Partitioner p = Must(ParsePartitioner(spec));
    CHECK(Must(NumShards(p, Shape{0, 3}, DType::kFloat32)) == 1);
    CHECK(Must(NumShards(p, Shape{}, DType::kFloat32)) == 1);
  }
  // Partition itself accepts a scalar: no axis, so no entries.
  for (const char* spec : {"none", "fixed:4", "min_size:1:10", "max_size:1"}) {
    CAPTURE(spec);
    CHECK(MustPartition(Must(ParsePartitioner(spec)), Shape{}, DType::kFloat32).empty());
  }
  CHECK(Must(NumShards(Must(FixedShardsPartitioner(4)), Shape{13, 2}, DType::kFloat32)) == 4);
  CHECK(Must(NumShards(Must(MinSizePartitioner(4, 2)), Shape{6, 1}, DType::kFloat32)) == 2);
}

TEST_CASE("partitioner specs parse to the partitioner they describe") {
  struct Case {
    const char* spec;
    const char* description;
    std::vector<int64_t> on_6x1_float;
  };
  const Case cases[] = {
      {"none", "none", {1, 1}},
      {"fixed:4", "fixed:4", {4, 1}},
      {"fixed:10", "fixed:10", {6, 1}},
      {"min_size:4", "min_size:4:1", {1, 1}},
      {"min_size:4:2", "min_size:4:2", {2, 1}},
      {"min_size:4:10:32", "min_size:4:10:32", {6, 1}},
      {"min_size:4:10:16", "min_size:4:10", {6, 1}},
      {"max_size:4", "max_size:4:none", {6, 1}},
      {"max_size:4:none", "max_size:4:none", {6, 1}},
      {"max_size:4:2", "max_size:4:2", {2, 1}},
      {"max_size:1024", "max_size:1024:none", {1, 1}},
      {"max_size:8:none:32", "max_size:8:none:32", {3, 1}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    const Partitioner p = Must(ParsePartitioner(c.spec));
    CHECK(p.description() == c.description);
    CHECK(MustPartition(p, Shape{6, 1}, DType::kFloat32) == c.on_6x1_float);
    // The description round-trips.
    const Partitioner again = Must(ParsePartitioner(p.description()));
    CHECK(again.description() == p.description());
    CHECK(MustPartition(again, Shape{6, 1}, DType::kFloat32) == c.on_6x1_float);
  }
  CHECK(Must(MinSizePartitioner()).description() == "min_size:262144:1");
  CHECK(Must(MaxSizePartitioner(1024, 8, 20)).description() == "max_size:1024:8:20");
}

TEST_CASE("malformed partitioner specs are InvalidArgument naming the spec") {
  struct Case {
    const char* spec;
    const char* message;
  };
  const Case cases[] = {
      {"", "unknown kind ''"},
      {"bogus:3", "unknown kind 'bogus'"},
      {"Fixed:3", "unknown kind 'Fixed'"},
      {"none:1", "expected 'none', got 1 field(s)"},
      {"fixed", "expected 'fixed:NUM_SHARDS', got 0 field(s)"},
      {"fixed:4:5", "got 2 field(s)"},
      {"fixed:", "NUM_SHARDS must be an integer, got ''"},
      {"fixed:x", "NUM_SHARDS must be an integer, got 'x'"},
      {"fixed: 4", "NUM_SHARDS must be an integer, got ' 4'"},
      {"fixed:4.5", "must be an integer"},
      {"fixed:99999999999999999999", "must be an integer"},
      {"fixed:0", "num_shards must be >= 1, got 0"},
      {"min_size", "got 0 field(s)"},
      {"min_size:1:2:3:4", "got 4 field(s)"},
      {"min_size:0:2", "min_shard_bytes must be >= 1, got 0"},
      {"min_size:4:none", "MAX must be an integer, got 'none'"},
      {"max_size", "got 0 field(s)"},
      {"max_size:4:0", "max_shards must be >= 1, got 0"},
      {"max_size:4:none:0", "bytes_per_string must be >= 1, got 0"},
      {"max_size:4:-1", "max_shards must be >= 1, got -1"},
      {"max_size:4:2:3:4", "got 4 field(s)"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec);
    absl::StatusOr<Partitioner> p = ParsePartitioner(c.spec);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string message(p.status().message());
    CHECK(message.find(c.message) != std::string::npos);
    CHECK(message.find(absl::StrCat("partitioner spec '", c.spec, "'")) == 0);
  }
}

}  // namespace
}  // namespace tessera
