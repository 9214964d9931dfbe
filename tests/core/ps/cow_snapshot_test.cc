#include "core/ps/cow_snapshot.h"

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "core/checkpoint/checkpoint.h"
#include "core/ps/shard_state.h"
#include "core/variables/indexed_slices.h"

namespace tessera {
namespace {

// 1,024-float rows: one page each, 256 rows a chunk; 900 rows are 3 whole chunks and a half one.
constexpr int64_t kRows = 900;
constexpr int64_t kWidth = 1024;
constexpr int64_t kRowsPerChunk = kSliceChunkBytes / (kWidth * 4);
static_assert(kWidth * 4 == kCowPageBytes, "the cases below count a row as a page");

Tensor Pattern(float base) {
  Tensor t(Shape{kRows, kWidth});
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = base + static_cast<float>(i);
  return t;
}

// Chunks [first, end) of `tensor` as the snapshot hands them out, appended to `bytes`.
void ReadChunks(CowSnapshot& snapshot, size_t tensor, int64_t first, int64_t end,
                std::string& bytes) {
  for (int64_t c = first; c < end; ++c) {
    REQUIRE(snapshot
                .ReadChunk(tensor, c,
                           [&bytes](absl::string_view chunk) {
                             bytes.append(chunk.data(), chunk.size());
                             return absl::OkStatus();
                           })
                .ok());
  }
}

// Every chunk of `tensor`, joined.
std::string ReadAll(CowSnapshot& snapshot, size_t tensor) {
  std::string bytes;
  ReadChunks(snapshot, tensor, 0, snapshot.chunks(), bytes);
  return bytes;
}

std::string BytesOf(const Tensor& t) {
  return std::string(reinterpret_cast<const char*>(t.data()), t.size() * sizeof(float));
}

void WriteRow(Tensor& t, int64_t row, float value) {
  for (float& x : t.row(row)) x = value;
}

TEST_CASE("a copy-on-write snapshot hands out every chunk as it was at the cut") {
  Tensor value = Pattern(0), slot = Pattern(1e6f);
  const std::string value_at_cut = BytesOf(value), slot_at_cut = BytesOf(slot);
  CowSnapshot snapshot({value.view(), slot.view()});
  REQUIRE(snapshot.chunks() == 4);
  CHECK(snapshot.copied_bytes() == 0);  // the cut copied nothing

  // The writer has read the value's first chunk; then the shard writes rows in chunks 0, 1 and 3.
  std::string value_read;
  ReadChunks(snapshot, 0, 0, 1, value_read);
  const std::vector<int64_t> rows = {10, kRowsPerChunk + 3, kRows - 1};
  snapshot.BeforeWriteRows(rows);
  for (const int64_t row : rows) {
    WriteRow(value, row, -1);
    WriteRow(slot, row, -2);
  }
  // Copied: the pages of the rows written, the value's in chunks 1 and 3 (chunk 0 was read
  // already) and all three of the slot's; not their chunks.
  CHECK(snapshot.copied_bytes() == 5 * kCowPageBytes);
  // Writing there again copies nothing more; the rest of the slot's chunk 0 is copied now.
  snapshot.BeforeWriteRows(rows);
  CHECK(snapshot.copied_bytes() == 5 * kCowPageBytes);
  snapshot.BeforeWriteRange(0, kRowsPerChunk);
  for (int64_t row = 0; row < kRowsPerChunk; ++row) WriteRow(slot, row, -3);
  CHECK(snapshot.copied_bytes() == (5 + kRowsPerChunk - 1) * kCowPageBytes);

  ReadChunks(snapshot, 0, 1, snapshot.chunks(), value_read);
  CHECK(value_read == value_at_cut);
  CHECK(ReadAll(snapshot, 1) == slot_at_cut);
  CHECK(snapshot.copied_bytes() == 0);    // each copy freed once handed out
  CHECK(BytesOf(value) != value_at_cut);  // the shard's writes are in place
}

TEST_CASE("a snapshot refuses a chunk out of range or read twice") {
  Tensor value = Pattern(0);
  CowSnapshot snapshot({value.view()});
  auto ignore = [](absl::string_view) { return absl::OkStatus(); };
  CHECK(absl::IsInvalidArgument(snapshot.ReadChunk(1, 0, ignore)));
  CHECK(absl::IsInvalidArgument(snapshot.ReadChunk(0, 4, ignore)));
  CHECK(absl::IsInvalidArgument(snapshot.ReadChunk(0, -1, ignore)));
  REQUIRE(snapshot.ReadChunk(0, 2, ignore).ok());
  const absl::Status again = snapshot.ReadChunk(0, 2, ignore);
  CHECK(absl::IsInvalidArgument(again));
  CHECK(absl::StrContains(again.message(), "read before"));
  // The writer's own error comes back as it is.
  CHECK(absl::IsDataLoss(
      snapshot.ReadChunk(0, 0, [](absl::string_view) { return absl::DataLossError("disk"); })));
  // Rows out of range are left to the update's own checks.
  snapshot.BeforeWriteRows({-1, kRows, kRows + 1000});
  snapshot.BeforeWriteRange(-5, 0);
  CHECK(snapshot.copied_bytes() == 0);
}

TEST_CASE("after BeforeWriteAll the tensors may go: the snapshot holds what it had not read") {
  auto value = std::make_unique<Tensor>(Pattern(3));
  const std::string at_cut = BytesOf(*value);
  CowSnapshot snapshot({value->view()});
  std::string read;
  ReadChunks(snapshot, 0, 0, 1, read);
  snapshot.BeforeWriteAll();
  CHECK(snapshot.copied_bytes() == value->size() * 4 - kSliceChunkBytes);
  value.reset();  // a restore or the shard's end frees the block
  ReadChunks(snapshot, 0, 1, snapshot.chunks(), read);
  CHECK(read == at_cut);
}

TEST_CASE("once finished, a snapshot frees its copies and the shard writes without copying") {
  Tensor value = Pattern(0);
  CowSnapshot snapshot({value.view()});
  snapshot.BeforeWriteRows({0});
  CHECK(snapshot.copied_bytes() == kCowPageBytes);
  CHECK_FALSE(snapshot.finished());
  snapshot.Finish();
  CHECK(snapshot.finished());
  CHECK(snapshot.copied_bytes() == 0);
  snapshot.BeforeWriteAll();
  CHECK(snapshot.copied_bytes() == 0);
}

// Rows [begin, begin + out.rows()) as an initializer would give them: each element its row times
// 10 plus its column, negated.
void FillPattern(int64_t begin, TensorView out) {
  for (int64_t r = 0; r < out.rows(); ++r) {
    for (int64_t c = 0; c < kWidth; ++c) {
      out.data()[r * kWidth + c] = -static_cast<float>((begin + r) * 10 + c);
    }
  }
}

TEST_CASE("a snapshot computes the rows without a value at the cut, and copies no page of them") {
  // Rows 0-299 and 700-899 have values; 300-699 wait for their initializer (zeros in memory).
  Tensor value = Pattern(0), slot = Pattern(1e6f);
  std::vector<uint8_t> unfilled(kRows, 0);
  for (int64_t row = 300; row < 700; ++row) {
    unfilled[static_cast<size_t>(row)] = 1;
    WriteRow(value, row, 0);
  }
  Tensor expected = Tensor::Copy(value.view());
  FillPattern(300, expected.RowBlock(300, 400));
  const std::string slot_at_cut = BytesOf(slot);
  CowSnapshot snapshot({value.view(), slot.view()}, UnfilledRows{unfilled, FillPattern});

  // The shard initializes rows 310 and 650 (their pages hold nothing else: no copy), updates row
  // 100 (its pages of both tensors copied) and then rows 310 and 650 (only the slot's pages).
  const std::vector<int64_t> filled = {310, 650};
  snapshot.BeforeFillRows(filled);
  CHECK(snapshot.copied_bytes() == 0);
  for (const int64_t row : filled) WriteRow(value, row, 42);
  const std::vector<int64_t> updated = {100};
  snapshot.BeforeWriteRows(updated);
  WriteRow(value, 100, 7);
  WriteRow(slot, 100, 8);
  CHECK(snapshot.copied_bytes() == 2 * kCowPageBytes);
  snapshot.BeforeWriteRows(filled);
  for (const int64_t row : filled) {
    WriteRow(value, row, 43);
    WriteRow(slot, row, 9);
  }
  CHECK(snapshot.copied_bytes() == 4 * kCowPageBytes);

  CHECK(ReadAll(snapshot, 0) == BytesOf(expected));
  CHECK(ReadAll(snapshot, 1) == slot_at_cut);
  CHECK(snapshot.copied_bytes() == 0);
}

TEST_CASE("a writer thread reads the cut while the shard's thread keeps writing rows") {
  Tensor value = Pattern(0), slot = Pattern(-5e6f);
  const std::string value_at_cut = BytesOf(value), slot_at_cut = BytesOf(slot);
  for (int round = 0; round < 20; ++round) {
    value = Pattern(0);
    slot = Pattern(-5e6f);
    CowSnapshot snapshot({value.view(), slot.view()});
    std::atomic<bool> done{false};
    std::string value_read, slot_read;
    std::thread writer([&] {
      value_read = ReadAll(snapshot, 0);
      slot_read = ReadAll(snapshot, 1);
      snapshot.Finish();
      done = true;
    });
    std::mt19937 random(round);
    std::uniform_int_distribution<int64_t> row(0, kRows - 1);
    int writes = 0;
    while (!done || writes < 50) {
      const int64_t r = row(random);
      const int64_t ids[] = {r};
      snapshot.BeforeWriteRows(ids);
      WriteRow(value, r, static_cast<float>(writes));
      WriteRow(slot, r, static_cast<float>(-writes));
      ++writes;
    }
    writer.join();
    CHECK(value_read == value_at_cut);
    CHECK(slot_read == slot_at_cut);
  }
}

// A shard of 2 of a [1200, 1024] variable with Adagrad: rows [600, 1200), 600 rows, 3 chunks.
ShardState MakeBigShard() {
  ShardSpec spec;
  spec.variable = "emb";
  spec.shard_index = 1;
  spec.num_shards = 2;
  spec.full_shape = Shape{1200, kWidth};
  spec.row_offset = 600;
  spec.rows = 600;
  spec.initializer = InitializerSpec{"random_uniform", {{"minval", -1.0}, {"maxval", 1.0}}, 3};
  spec.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}};
  auto shard = ShardState::Create(spec);
  REQUIRE(shard.ok());
  return std::move(shard).value();
}

// The snapshot's tensors read whole, as a TensorSlice's value and slots would hold them.
std::vector<std::string> ReadTensors(CowSnapshot& snapshot, size_t tensors) {
  std::vector<std::string> out;
  for (size_t t = 0; t < tensors; ++t) out.push_back(ReadAll(snapshot, t));
  return out;
}

std::vector<std::string> BytesOf(const TensorSlice& slice) {
  std::vector<std::string> out{BytesOf(slice.value)};
  for (const Tensor& slot : slice.slots) out.push_back(BytesOf(slot));
  return out;
}

TEST_CASE("a shard's snapshot holds its cut through updates, restores, a new optimizer, its end") {
  IndexedSlices g;
  g.indices = {5, 300, 599};
  g.values = Tensor(Shape{3, kWidth}, 0.25f);
  SUBCASE("sparse and dense updates, assignments and scatters") {
    ShardState shard = MakeBigShard();
    const std::shared_ptr<CowSnapshot> snapshot = shard.StartSnapshot();
    const TensorSlice at_cut = shard.Snapshot();
    REQUIRE(shard.ApplySparseGradient(g.indices, g.values).ok());
    REQUIRE(shard.Scatter(ScatterOp::kAdd, g.indices, g.values).ok());
    REQUIRE(shard.ApplyDenseGradient(Tensor(Shape{600, kWidth}, 0.5f)).ok());
    REQUIRE(shard.Assign(AssignKind::kAdd, Tensor(Shape{600, kWidth}, 1.0f)).ok());
    CHECK(ReadTensors(*snapshot, 2) == BytesOf(at_cut));
  }
  SUBCASE("a whole restore, a restore of some rows, a new optimizer") {
    ShardState shard = MakeBigShard();
    const std::shared_ptr<CowSnapshot> snapshot = shard.StartSnapshot();
    const TensorSlice at_cut = shard.Snapshot();
    TensorSlice other = at_cut;
    other.value = Tensor(Shape{600, kWidth}, 7.0f);
    REQUIRE(shard.Restore(std::move(other)).ok());
    REQUIRE(shard.Restore(shard.SnapshotRows(0, 10)).ok());
    REQUIRE(shard.SetOptimizer(OptimizerSpec{"adam", {}}).ok());
    CHECK(ReadTensors(*snapshot, 2) == BytesOf(at_cut));
  }
  SUBCASE("the shard ends before the writer has read anything") {
    std::shared_ptr<CowSnapshot> snapshot;
    TensorSlice at_cut;
    {
      ShardState shard = MakeBigShard();
      snapshot = shard.StartSnapshot();
      at_cut = shard.Snapshot();
    }
    CHECK(ReadTensors(*snapshot, 2) == BytesOf(at_cut));
  }
  SUBCASE("a second snapshot while the first is being read") {
    ShardState shard = MakeBigShard();
    const std::shared_ptr<CowSnapshot> first = shard.StartSnapshot();
    const TensorSlice first_cut = shard.Snapshot();
    REQUIRE(shard.ApplySparseGradient(g.indices, g.values).ok());
    const std::shared_ptr<CowSnapshot> second = shard.StartSnapshot();
    const TensorSlice second_cut = shard.Snapshot();
    REQUIRE(shard.ApplySparseGradient(g.indices, g.values).ok());
    CHECK(ReadTensors(*second, 2) == BytesOf(second_cut));
    CHECK(ReadTensors(*first, 2) == BytesOf(first_cut));
    CHECK(BytesOf(first_cut) != BytesOf(second_cut));
  }
  SUBCASE("the cut initializes no row: the writer computes them, the shard's gathers copy none") {
    ShardState shard = MakeBigShard();  // no row initialized yet
    const std::shared_ptr<CowSnapshot> snapshot = shard.StartSnapshot();
    REQUIRE(shard.Gather(g.indices).ok());  // initializes three rows, each alone on its page
    CHECK(snapshot->copied_bytes() == 0);
    // The update copies the three rows' slot pages, not their value pages: those held no value at
    // the cut (had the cut initialized them, they would be copied too).
    REQUIRE(shard.ApplySparseGradient(g.indices, g.values).ok());
    CHECK(snapshot->copied_bytes() == 3 * kCowPageBytes);
    REQUIRE(shard.ApplySparseGradient(g.indices, g.values).ok());
    CHECK(snapshot->copied_bytes() == 3 * kCowPageBytes);
    TensorSlice at_cut = MakeBigShard().Snapshot();  // every row as initialized
    CHECK(ReadTensors(*snapshot, 2) == BytesOf(at_cut));
  }
  SUBCASE("a finished snapshot is dropped: later writes copy nothing") {
    ShardState shard = MakeBigShard();
    const std::shared_ptr<CowSnapshot> snapshot = shard.StartSnapshot();
    snapshot->Finish();
    REQUIRE(shard.ApplySparseGradient(g.indices, g.values).ok());
    CHECK(snapshot.use_count() == 1);  // the shard let it go
    CHECK(snapshot->copied_bytes() == 0);
  }
}

}  // namespace
}  // namespace tessera
