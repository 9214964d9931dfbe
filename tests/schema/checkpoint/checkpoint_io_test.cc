#include "schema/checkpoint/checkpoint_io.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/schema/schema_test_util.h"

namespace tessera {
namespace {

using namespace schema_test;  // NOLINT: the test helpers

TEST_CASE("slices round trip exactly, with and without slots, whatever their shape") {
  struct Case {
    std::string name;
    TensorSlice slice;
  };
  TensorSlice int64 = SampleSlice(Shape{13, 3}, 4, 5, false);
  int64.dtype = DType::kInt64;
  TensorSlice stepless = SampleSlice(Shape{13, 3}, 0, 13, true);
  stepless.step = 0;
  TensorSlice identified = SampleSlice(Shape{13, 3}, 4, 5, true);
  identified.checkpoint = {RunId{0x0123456789abcdefULL, 0x1122334455667788ULL}, 1234};
  const std::vector<Case> cases = {
      {"rows of a matrix", SampleSlice(Shape{13, 3}, 4, 5, false)},
      {"rows of a matrix with slots", SampleSlice(Shape{13, 3}, 4, 5, true)},
      {"a whole vector", SampleSlice(Shape{7}, 0, 7, true)},
      {"a rank-3 block", SampleSlice(Shape{6, 2, 3}, 2, 3, true)},
      {"a scalar", SampleSlice(Shape(), 0, 1, false)},
      {"a scalar with slots", SampleSlice(Shape(), 0, 1, true)},
      {"an empty shard", SampleSlice(Shape{2, 4}, 2, 0, true)},
      {"a variable with no rows", SampleSlice(Shape{0, 4}, 0, 0, false)},
      {"rows with a zero-width dimension", SampleSlice(Shape{5, 0}, 1, 3, true)},
      {"an int64 variable", int64},
      {"step 0", stepless},
      {"a checkpoint's run id and step", identified},
      // 2.4 MB of values and of each slot: three 1 MiB chunks apiece.
      {"several chunks", SampleSlice(Shape{400000, 2}, 0, 300000, true)},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string bytes = Must(EncodeSlice(c.slice));
    const TensorSlice decoded = Must(DecodeSlice(bytes));
    CHECK(SameSlice(decoded, c.slice));
    CHECK(Must(EncodeSlice(decoded)) == bytes);
  }
}

TEST_CASE("slice files are written atomically and read back") {
  TempDir dir;
  const std::string path = dir.path() + "/emb.part_0";
  const TensorSlice first = SampleSlice(Shape{13, 3}, 0, 7, true);
  REQUIRE(WriteSliceFile(path, first).ok());
  CHECK(SameSlice(Must(ReadSliceFile(path)), first));
  // Overwriting replaces the whole file and leaves no temporary behind.
  const TensorSlice second = SampleSlice(Shape{13, 3}, 7, 6, false);
  REQUIRE(WriteSliceFile(path, second).ok());
  CHECK(SameSlice(Must(ReadSliceFile(path)), second));
  CHECK(dir.Files() == std::vector<std::string>{"emb.part_0"});

  CHECK(absl::IsNotFound(ReadSliceFile(dir.path() + "/missing").status()));
  CHECK(absl::IsNotFound(WriteSliceFile(dir.path() + "/no/such/dir/file", first)));
  CHECK(dir.Files() == std::vector<std::string>{"emb.part_0"});
  const absl::Status not_a_file = ReadSliceFile(dir.path()).status();
  CHECK(absl::IsDataLoss(not_a_file));
}

// A [rows, 3] variable with two slots saved as slices of `sizes` rows in dir/emb.<i>, and its
// manifest entry. Row r's values are distinct across the variable and its slots.
CheckpointVariable SaveSlices(const std::string& dir, const std::vector<int64_t>& sizes) {
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  CheckpointVariable v;
  v.name = "emb";
  v.shape = Shape{total, 3};
  v.slot_names = {"m", "v"};
  v.step = 9;
  int64_t offset = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    TensorSlice slice;
    slice.variable = "emb";
    slice.full_shape = v.shape;
    slice.row_offset = offset;
    slice.value = Tensor(Shape{sizes[i], 3});
    slice.slot_names = v.slot_names;
    slice.slots = {Tensor(Shape{sizes[i], 3}), Tensor(Shape{sizes[i], 3})};
    for (int64_t k = 0; k < slice.value.size(); ++k) {
      const float global = static_cast<float>(offset * 3 + k);
      slice.value.values()[k] = global;
      slice.slots[0].values()[k] = -global;
      slice.slots[1].values()[k] = global + 0.5f;
    }
    slice.step = static_cast<int64_t>(i) + 7;
    const std::string file = absl::StrCat("emb.", i);
    REQUIRE(WriteSliceFile(dir + "/" + file, slice).ok());
    v.slices.push_back({file, offset, sizes[i]});
    offset += sizes[i];
  }
  return v;
}

TEST_CASE("a block is read straight from the slice files, equal to the assembled one") {
  TempDir dir;
  // Slices of 100k, 250k and 1 row: 1.2 MB, 3 MB and 12 bytes per tensor, so reads start and
  // end inside 1 MiB chunks, span several, or fall inside one.
  const CheckpointVariable v = SaveSlices(dir.path(), {100000, 250000, 1});
  const int64_t rows = v.shape.rows();
  for (const auto& [offset, count] : std::vector<std::pair<int64_t, int64_t>>{
           {0, rows}, {0, 100000}, {100000, 250000}, {5, 1}, {99999, 2}, {87381, 87382},
           {123456, 200000}, {rows - 1, 1}, {rows - 7, 7}, {3, 0}}) {
    CAPTURE(offset);
    CAPTURE(count);
    const std::vector<SliceRead> reads = Must(PlanSliceReads(v, offset, count));
    std::vector<TensorSlice> files;
    for (const SliceRead& read : reads) {
      files.push_back(Must(ReadSliceFile(dir.path() + "/" + v.slices[read.slice].file)));
    }
    std::vector<const TensorSlice*> pointers;
    for (const TensorSlice& f : files) pointers.push_back(&f);
    const TensorSlice want = Must(AssembleSlice(v, offset, count, reads, pointers));
    CHECK(SameSlice(Must(ReadSliceBlock(dir.path(), v, offset, count)), want));
  }
}

TEST_CASE("a block read checks the chunks it reads and the files against the manifest") {
  TempDir dir;
  const CheckpointVariable v = SaveSlices(dir.path(), {100000, 250000});
  // Damage the second file's value in its last chunk: bytes 2 MiB.. of its 3 MB.
  const std::string path = dir.path() + "/emb.1";
  std::string bytes;
  {
    const int fd = ::open(path.c_str(), O_RDWR);
    REQUIRE(fd >= 0);
    const off_t size = ::lseek(fd, 0, SEEK_END);
    bytes.resize(static_cast<size_t>(size));
    REQUIRE(::pread(fd, bytes.data(), bytes.size(), 0) == size);
    const off_t data_at = size - 3 * 250000 * 3 * 4;  // three tensors, no padding
    const char damaged = static_cast<char>(bytes[data_at + (2 << 20) + 100] ^ 1);
    REQUIRE(::pwrite(fd, &damaged, 1, data_at + (2 << 20) + 100) == 1);
    ::close(fd);
  }
  // Rows 100000 + [0, 174762) of the file lie in its first two value chunks: not damaged.
  CHECK(ReadSliceBlock(dir.path(), v, 100000, 100000).ok());
  const absl::Status damaged = ReadSliceBlock(dir.path(), v, 300000, 10).status();
  CHECK(absl::IsDataLoss(damaged));
  CHECK_MESSAGE(Contains(damaged, "checksum mismatch in slice of emb chunk 2"), damaged.ToString());
  CHECK(Contains(damaged, "emb.1"));

  // A manifest that disagrees with a file, or names a missing one.
  CheckpointVariable other = v;
  other.slot_names = {"accumulator"};
  CHECK(absl::IsInvalidArgument(ReadSliceBlock(dir.path(), other, 0, 10).status()));
  other = v;
  other.slices[0].file = "emb.9";
  CHECK(absl::IsNotFound(ReadSliceBlock(dir.path(), other, 0, 10).status()));
  CHECK(absl::IsInvalidArgument(ReadSliceBlock(dir.path(), v, 0, v.shape.rows() + 1).status()));
}

TEST_CASE("an invalid slice is refused before anything is written") {
  TempDir dir;
  TensorSlice bad = SampleSlice(Shape{13, 3}, 10, 5, true);  // rows 10..15 of 13
  CHECK(absl::IsInvalidArgument(EncodeSlice(bad).status()));
  CHECK(absl::IsInvalidArgument(WriteSliceFile(dir.path() + "/x", bad)));
  CHECK(dir.Files().empty());
}

TEST_CASE("manifests round trip exactly and are found in their directory") {
  const CheckpointManifest manifest = SampleManifest();
  const std::string bytes = Must(EncodeManifest(manifest));
  const CheckpointManifest decoded = Must(DecodeManifest(bytes));
  CHECK(SameManifest(decoded, manifest));
  CHECK(Must(EncodeManifest(decoded)) == bytes);
  CHECK(SameManifest(Must(DecodeManifest(Must(EncodeManifest(CheckpointManifest{})))),
                     CheckpointManifest{}));

  TempDir dir;
  const absl::Status missing = ReadManifest(dir.path()).status();
  CHECK(absl::IsNotFound(missing));
  CHECK(Contains(missing, "no checkpoint in"));
  REQUIRE(WriteManifest(dir.path(), manifest).ok());
  CHECK(SameManifest(Must(ReadManifest(dir.path())), manifest));
  CHECK(dir.Files() == std::vector<std::string>{kManifestFile});

  CheckpointManifest bad = manifest;
  bad.variables[1].name = bad.variables[0].name;
  CHECK(absl::IsInvalidArgument(EncodeManifest(bad).status()));
  CHECK(absl::IsNotFound(WriteManifest(dir.path() + "/missing", manifest)));
}

TEST_CASE("the checkpoint's identity is read back, and a file without one reads as one of no run") {
  CheckpointManifest manifest = SampleManifest();
  manifest.run_id = RunId{0xabc, 0xdef};
  const CheckpointManifest decoded = Must(DecodeManifest(Must(EncodeManifest(manifest))));
  CHECK(decoded.run_id == manifest.run_id);
  // Every entry names the checkpoint its slice files must belong to.
  for (const CheckpointVariable& v : decoded.variables) {
    CHECK(v.checkpoint == CheckpointId{manifest.run_id, manifest.global_step});
  }
  // Without an identity, as files written before run ids: the fields read as absent.
  const CheckpointManifest old = Must(DecodeManifest(Must(EncodeManifest(SampleManifest()))));
  CHECK(old.run_id.empty());
  CHECK(old.variables[0].checkpoint == CheckpointId{RunId{}, 1234});
  TensorSlice slice = SampleSlice(Shape{13, 3}, 4, 5, true);
  const std::string without = Must(EncodeSlice(slice));
  CHECK(Must(DecodeSlice(without)).checkpoint == CheckpointId{});
  slice.checkpoint = {RunId{1, 2}, 1234};
  CHECK(Must(EncodeSlice(slice)).size() > without.size());
  CHECK(Must(DecodeSlice(Must(EncodeSlice(slice)))).checkpoint == slice.checkpoint);
}

TEST_CASE("a block read refuses a slice file of another checkpoint, naming it") {
  TempDir dir;
  CheckpointVariable v;
  v.name = "emb";
  v.shape = Shape{13, 3};
  v.slices = {{"emb.0", 0, 7}, {"emb.1", 7, 6}};
  v.checkpoint = {RunId{5, 6}, 400};
  for (const SliceFileRef& ref : v.slices) {
    TensorSlice slice = SampleSlice(v.shape, ref.row_offset, ref.rows, false);
    slice.checkpoint = v.checkpoint;
    REQUIRE(WriteSliceFile(dir.path() + "/" + ref.file, slice).ok());
  }
  REQUIRE(ReadSliceBlock(dir.path(), v, 0, 13).ok());
  // emb.1 replaced by the same variable's rows of the checkpoint of step 200.
  TensorSlice stale = SampleSlice(v.shape, 7, 6, false);
  stale.checkpoint = {RunId{5, 6}, 200};
  REQUIRE(WriteSliceFile(dir.path() + "/emb.1", stale).ok());
  CHECK(ReadSliceBlock(dir.path(), v, 0, 7).ok());  // rows of emb.0 only
  const absl::Status status = ReadSliceBlock(dir.path(), v, 3, 6).status();
  CHECK(absl::IsDataLoss(status));
  CHECK_MESSAGE(Contains(status, "file emb.1 belongs to another checkpoint"), status.ToString());
  CHECK(Contains(status, "step 200; its manifest: run 00000000000000050000000000000006 step 400"));
}

TEST_CASE("a manifest whose optimizer is no optimizer is refused on read, naming it") {
  CheckpointManifest manifest = SampleManifest();  // adagrad, learning_rate 0.05
  const std::string bytes = Must(EncodeManifest(manifest));
  const std::string body = BodyOf(bytes);
  struct Case {
    std::string name;
    std::string from, to;  // bytes of the body replaced
    std::string message;
  };
  auto double_bytes = [](double value) {
    std::string out(sizeof(double), '\0');
    std::memcpy(out.data(), &value, sizeof(double));
    return out;
  };
  const std::vector<Case> cases = {
      {"an unknown rule", "adagrad", "adagrax", "unknown optimizer 'adagrax'"},
      {"a NaN learning rate", double_bytes(0.05), double_bytes(std::nan("")),
       "learning_rate must be >= 0 and finite, got nan"},
      {"an infinite learning rate", double_bytes(0.05),
       double_bytes(std::numeric_limits<double>::infinity()),
       "learning_rate must be >= 0 and finite, got inf"},
      {"an unknown hyperparameter", "learning_rate", "learning_ratf",
       "unknown hyperparameter 'learning_ratf'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    std::string forged = body;
    const size_t at = forged.find(c.from);
    REQUIRE(at != std::string::npos);
    REQUIRE(forged.find(c.from, at + 1) == std::string::npos);
    forged.replace(at, c.from.size(), c.to);
    const absl::Status status = DecodeManifest(Reseal(FileKind::kManifest, forged)).status();
    CHECK(absl::IsInvalidArgument(status));
    CHECK_MESSAGE(Contains(status, "checkpoint variable user_embedding: "), status.ToString());
    CHECK_MESSAGE(Contains(status, c.message), status.ToString());
  }
}

TEST_CASE("files of absurd size are refused before they are read") {
  TempDir dir;
  struct Case {
    std::string path;
    int64_t size;
  };
  // Sparse files: no disk space is used.
  const std::vector<Case> cases = {{dir.path() + "/" + kManifestFile, int64_t{257} << 20},
                                   {dir.path() + "/huge.slice", int64_t{17} << 30}};
  for (const Case& c : cases) {
    const int fd = ::open(c.path.c_str(), O_WRONLY | O_CREAT, 0644);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, c.size) == 0);
    ::close(fd);
  }
  const absl::Status manifest = ReadManifest(dir.path()).status();
  CHECK(absl::IsDataLoss(manifest));
  CHECK(Contains(manifest, "more than the"));
  const absl::Status slice = ReadSliceFile(cases[1].path).status();
  CHECK(absl::IsDataLoss(slice));
  CHECK(Contains(slice, "more than the"));
}

TEST_CASE("a slice of another format version is refused, naming both versions") {
  const std::string bytes = Must(EncodeSlice(SampleSlice(Shape{13, 3}, 4, 5, false)));
  std::string body = BodyOf(bytes);
  // A one-segment message: 8 bytes of segment table, the root pointer, then the root struct,
  // whose first field is formatVersion.
  uint32_t version = 0;
  std::memcpy(&version, body.data() + 16, 4);
  REQUIRE(version == 2);
  for (uint32_t other : {1u, 7u}) {
    CAPTURE(other);
    std::memcpy(body.data() + 16, &other, 4);
    const absl::Status status =
        DecodeSlice(Reseal(FileKind::kSlice, body, TailBytesOf(bytes))).status();
    CHECK(absl::IsInvalidArgument(status));
    CHECK(Contains(status, absl::StrCat("format version ", other,
                                        "; this build reads format version 2")));
  }

  std::string manifest_body = BodyOf(Must(EncodeManifest(SampleManifest())));
  std::memcpy(&version, manifest_body.data() + 16, 4);
  REQUIRE(version == 1);
  manifest_body[16] = 0;
  const absl::Status manifest = DecodeManifest(Reseal(FileKind::kManifest, manifest_body)).status();
  CHECK(absl::IsInvalidArgument(manifest));
  CHECK(Contains(manifest, "format version 0; this build reads format version 1"));
}

TEST_CASE("a corrupt data chunk is reported as a checksum mismatch naming the tensor") {
  const TensorSlice slice = SampleSlice(Shape{13, 3}, 4, 5, true);
  const std::string file = Must(EncodeSlice(slice));
  const std::string body = BodyOf(file);
  struct Case {
    std::string name;
    float value;  // a value found once in the data
    std::string message;
  };
  // Sample() makes values (i + 0.5) * scale: 10.5 is in the value, 21 (10.5 * 2) in slot m.
  const std::vector<Case> cases = {
      {"value", 10.5f, "checksum mismatch in slice of emb chunk 0"},
      {"slot", 21.0f, "checksum mismatch in slice of emb slot m chunk 0"}};
  for (const Case& c : cases) {
    CAPTURE(c.name);
    std::string from(4, '\0'), to(4, '\0');
    const float changed = c.value + 1;
    std::memcpy(from.data(), &c.value, 4);
    std::memcpy(to.data(), &changed, 4);
    const std::string forged =
        Reseal(FileKind::kSlice, ReplaceUnique(body, from, to), TailBytesOf(file));
    const absl::Status status = DecodeSlice(forged).status();
    CHECK(absl::IsDataLoss(status));
    CHECK_MESSAGE(Contains(status, c.message), status.ToString());
  }
}

TEST_CASE("forged shapes never allocate what the data does not hold") {
  const TensorSlice slice = SampleSlice(Shape{13, 3}, 4, 5, true);
  const std::string file = Must(EncodeSlice(slice));
  const std::string body = BodyOf(file);
  const uint64_t tail = TailBytesOf(file);
  const std::string value_shape = Int64Bytes({5, 3});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  struct Case {
    std::vector<int64_t> dims;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      // 2^40 and 2^62 elements: 4 TiB and 16 EiB allocations if believed; beyond the limit on
      // tensors from outside (tessera/tensor.h), so refused from the shape alone.
      {{int64_t{1} << 20, int64_t{1} << 20}, absl::StatusCode::kDataLoss, "elements)"},
      {{int64_t{1} << 31, int64_t{1} << 31}, absl::StatusCode::kDataLoss, "elements)"},
      // 2^32 elements: within the limit, but the file holds far fewer bytes.
      {{int64_t{1} << 16, int64_t{1} << 16}, absl::StatusCode::kDataLoss, "bytes of data for"},
      {{kMax, 3}, absl::StatusCode::kDataLoss, "invalid shape"},  // overflows
      {{kMax, kMax}, absl::StatusCode::kDataLoss, "invalid shape"},
      {{-5, 3}, absl::StatusCode::kDataLoss, "invalid shape"},
      {{3, 5}, absl::StatusCode::kInvalidArgument, "no row block"},  // same size, wrong shape
      {{15, 1}, absl::StatusCode::kInvalidArgument, "no row block"},
      // The value and its two slots: 3 x 15 floats, 180 bytes padded to 184.
      {{0, 3}, absl::StatusCode::kDataLoss, "184 bytes of data for 3 x 0 float32 values"},
  };
  for (const Case& c : cases) {
    CAPTURE(Shape(c.dims).ToString());
    const std::string forged =
        Reseal(FileKind::kSlice, ReplaceUnique(body, value_shape, Int64Bytes(c.dims)), tail);
    const absl::Status status = DecodeSlice(forged).status();
    CHECK(status.code() == c.code);
    CHECK_MESSAGE(Contains(status, c.message), status.ToString());
  }
  // A forged full shape and a forged step fail validation.
  CHECK(absl::IsInvalidArgument(
      DecodeSlice(
          Reseal(FileKind::kSlice, ReplaceUnique(body, Int64Bytes({13, 3}), Int64Bytes({8, 3})),
                 tail))
          .status()));
  const absl::Status step =
      DecodeSlice(Reseal(FileKind::kSlice,
                         ReplaceUnique(body, Int64Bytes({slice.step}), Int64Bytes({-slice.step})),
                         tail))
          .status();
  CHECK(absl::IsInvalidArgument(step));
  CHECK(Contains(step, "negative step"));
}

}  // namespace
}  // namespace tessera
