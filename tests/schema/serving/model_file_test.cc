// Exported model files of format 2 (Note [Model file layout] in
// schema/serving/internal/model_format.h): the layout, streaming writes, format 1 files still
// read, the mapped reader's lazy verification, and hostile files — huge claimed sizes,
// truncation, sparse giants, FIFOs and directories, forged offsets.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "core/base/mem_env.h"
#include "schema/base/internal/crc32c.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/internal/model_data.h"
#include "schema/serving/model_io.h"
#include "tests/fifo_watchdog.h"
#include "tests/schema/schema_test_util.h"

namespace tessera {
namespace {

using namespace schema_test;  // NOLINT: the test helpers

namespace fs = std::filesystem;

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

uint64_t Load64(const std::string& bytes, size_t at) {
  uint64_t v = 0;
  std::memcpy(&v, bytes.data() + at, 8);
  return v;
}

// A recsys model large enough for several pieces per table: users 300 x 64 floats (75 KiB, two
// pieces), items 50 x 64.
ExportedModel PieceyModel() {
  RecsysModelOptions options;
  options.num_users = 300;
  options.num_items = 50;
  options.embedding_dim = 64;
  options.hidden_units = 4;
  options.seed = 3;
  return SampleModel(Must(RecsysModelSpec(options)));
}

// Where the data section of an encoded format-2 file starts.
uint64_t DataAt(const std::string& file) { return file.size() - TailBytesOf(file); }

// The layout of `model`'s file, as the writer computes it.
schema_internal::ModelLayout LayoutOf(const ExportedModel& model) {
  std::vector<std::pair<std::string, Shape>> shapes;
  for (const auto& [name, value] : model.variables) shapes.emplace_back(name, value.shape());
  return Must(schema_internal::LayOutModel(shapes, schema_internal::kModelPieceBytes));
}

const schema_internal::VariableExtent& ExtentOf(const schema_internal::ModelLayout& layout,
                                                const std::string& name) {
  for (const auto& v : layout.variables) {
    if (v.name == name) return v;
  }
  FAIL("no variable " << name);
  return layout.variables[0];
}

// `file` with its checksum table and seal recomputed from the data as it now is: a forgery that
// passes every checksum.
std::string Rechecksum(std::string file, const schema_internal::ModelLayout& layout) {
  const uint64_t data = DataAt(file);
  for (const auto& v : layout.variables) {
    for (uint64_t p = 0; p < v.pieces; ++p) {
      const uint64_t begin = p * layout.piece_bytes;
      const uint64_t end = std::min(begin + layout.piece_bytes, v.padded);
      const uint32_t crc = schema_internal::Crc32c(
          absl::string_view(file.data() + data + v.offset + begin, end - begin));
      std::memcpy(file.data() + data + layout.checksums_offset + 4 * (v.first_piece + p), &crc, 4);
    }
  }
  const uint32_t seal = schema_internal::Crc32c(
      absl::string_view(file.data() + data + layout.checksums_offset, layout.table_bytes));
  std::memcpy(file.data() + data + layout.checksums_offset + layout.table_bytes, &seal, 4);
  return file;
}

Batch Lookup(int64_t user, int64_t item) {
  Batch batch;
  batch.size = 1;
  batch.ids["user"] = {user};
  batch.ids["item"] = {item};
  return batch;
}

std::unique_ptr<Predictor> OpenPredictor(MemEnv& env, const std::string& dir) {
  OpenedModel opened = Must(OpenExportedModel(dir, &env));
  return Must(Predictor::Create(std::move(opened.description), std::move(opened.variables)));
}

TEST_CASE("a format-2 file: header, a small message, then each variable's raw floats aligned") {
  const ExportedModel model = PieceyModel();
  const std::string file = Must(EncodeExportedModel(model));
  const schema_internal::ModelLayout layout = LayoutOf(model);
  CHECK(TailBytesOf(file) == layout.data_bytes);
  const uint64_t data = DataAt(file);
  CHECK(data % 8 == 0);
  CHECK(data < 4096);  // the message holds names and shapes only
  for (const auto& v : layout.variables) {
    CAPTURE(v.name);
    CHECK((data + v.offset) % 8 == 0);
    const Tensor& value = model.variables.at(v.name);
    CHECK(std::memcmp(file.data() + data + v.offset, value.data(), v.bytes) == 0);
    CHECK(v.pieces == (v.padded + layout.piece_bytes - 1) / layout.piece_bytes);
  }
  CHECK(ExtentOf(layout, "user_embedding").pieces == 2);
  CHECK(SameModel(Must(DecodeExportedModel(file)), model));
}

TEST_CASE("format 1 files of earlier builds still read, open and serve") {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE(source != nullptr);
  TempDir copy;
  fs::copy_file(std::string(source) + "/tests/schema/testdata/recsys_format1.tsr",
                copy.path() + "/" + kModelFile);
  // Written by a format-1 build from SmallRecsysModel(). That build's initializer fused
  // multiply-adds (today's never does, so every build draws the same bits): its values may differ
  // from today's in the last bit, so the values are compared within 1e-6 and the rest exactly.
  ExportedModel want = SmallRecsysModel();
  const ExportedModel read = Must(ReadExportedModel(copy.path()));
  REQUIRE(read.variables.size() == want.variables.size());
  for (auto& [name, value] : want.variables) {
    CAPTURE(name);
    const Tensor& got = read.variables.at(name);
    REQUIRE(got.shape() == value.shape());
    for (int64_t i = 0; i < value.size(); ++i) {
      REQUIRE(std::abs(got.data()[i] - value.data()[i]) <= 1e-6f);
    }
    value = got;  // from here on: exactly the file's values
  }
  CHECK(SameModel(read, want));
  OpenedModel opened = Must(OpenExportedModel(copy.path()));
  CHECK(opened.format_version == 1);
  auto predictor =
      Must(Predictor::Create(std::move(opened.description), std::move(opened.variables)));
  auto from_file = Must(predictor->Predict(Lookup(4, 3)));
  auto from_memory = Must(Must(Predictor::Create(want))->Predict(Lookup(4, 3)));
  CHECK(SameTensor(from_file.at("probability"), from_memory.at("probability")));
  // Written again, it is format 2.
  const std::string again = Must(EncodeExportedModel(Must(ReadExportedModel(copy.path()))));
  CHECK(TailBytesOf(again) > 0);
  CHECK(Must(OpenExportedModel(copy.path())).format_version == 1);
}

// A source that records the ranges it is asked for.
class RecordingSource : public VariableRowSource {
 public:
  explicit RecordingSource(const ExportedModel& model) : rows_(model) {}
  absl::StatusOr<ConstTensorView> Rows(const std::string& name, int64_t begin,
                                       int64_t end) override {
    asked.push_back({name, begin, end});
    return rows_.Rows(name, begin, end);
  }
  struct Asked {
    std::string name;
    int64_t begin, end;
  };
  std::vector<Asked> asked;

 private:
  ExportedModelRows rows_;
};

TEST_CASE("the writer asks a source for each variable's rows in order, a few MiB at a time") {
  RecsysModelOptions options;
  options.num_users = 3000;
  options.num_items = 10;
  options.embedding_dim = 1000;  // 12 MB of users: 4 reads of at most 4 MiB
  options.hidden_units = 2;
  const ExportedModel model = SampleModel(Must(RecsysModelSpec(options)));
  auto env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/export").ok());
  RecordingSource source(model);
  REQUIRE(WriteExportedModel("/export", model, source, env.get()).ok());
  std::map<std::string, int64_t> next;
  std::string last;
  int user_reads = 0;
  for (const auto& a : source.asked) {
    CAPTURE(a.name);
    CHECK(a.name >= last);  // name order
    last = a.name;
    CHECK(a.begin == next[a.name]);  // rows in order, no gap, no repeat
    next[a.name] = a.end;
    const int64_t row_bytes = model.variables.at(a.name).row_size() * 4;
    CHECK((a.end - a.begin) * row_bytes <= std::max<int64_t>(int64_t{4} << 20, row_bytes));
    if (a.name == "user_embedding") ++user_reads;
  }
  for (const auto& [name, value] : model.variables) CHECK(next[name] == value.rows());
  CHECK(user_reads == 3);
  // The file equals the in-memory encoding.
  CHECK(Must(ReadFileBounded(*env, "/export/model.tsr", 1 << 30)) ==
        Must(EncodeExportedModel(model)));
}

TEST_CASE("a NaN or an infinity is not exported: InvalidArgument naming the variable and row") {
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    ExportedModel model = PieceyModel();
    model.variables.at("item_embedding").row(31)[5] = bad;
    const absl::Status encoded = EncodeExportedModel(model).status();
    CHECK(absl::IsInvalidArgument(encoded));
    CHECK(Contains(encoded, "variable 'item_embedding' row 31 holds a non-finite value"));
    TempDir dir;
    CHECK(absl::IsInvalidArgument(WriteExportedModel(dir.path(), model)));
    CHECK(dir.Files().empty());  // not even a temporary file
  }
}

TEST_CASE("a mapped model serves in place and verifies a piece the first time a row is read") {
  const ExportedModel model = PieceyModel();
  auto env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/m").ok());
  REQUIRE(WriteExportedModel("/m", model, env.get()).ok());
  OpenedModel opened = Must(OpenExportedModel("/m", env.get()));
  CHECK(opened.format_version == 2);
  const auto& views = opened.variables->views();
  CHECK(SameTensor(Tensor::Copy(views.at("user_embedding")), model.variables.at("user_embedding")));
  auto predictor =
      Must(Predictor::Create(std::move(opened.description), std::move(opened.variables)));
  auto want = Must(Must(Predictor::Create(model))->Predict(Lookup(299, 49)));
  CHECK(SameTensor(Must(predictor->Predict(Lookup(299, 49))).at("probability"),
                   want.at("probability")));

  // One flipped byte in user row 280 (the table's second piece: rows 256 on): the model opens
  // (nothing of the tables is read), rows of the first piece serve, and every request reading
  // row 280 fails.
  const schema_internal::ModelLayout layout = LayoutOf(model);
  const auto& users = ExtentOf(layout, "user_embedding");
  std::string file = Must(ReadFileBounded(*env, "/m/model.tsr", 1 << 30));
  const uint64_t row_280 = DataAt(file) + users.offset + 280 * 64 * 4;
  REQUIRE(256 * 64 * 4 == layout.piece_bytes);
  file[row_280 + 3] ^= 0x10;
  REQUIRE(WriteFileAtomically(*env, "/m/model.tsr", file, false).ok());
  auto damaged = OpenPredictor(*env, "/m");
  CHECK(damaged->Predict(Lookup(3, 1)).ok());
  for (int attempt = 0; attempt < 3; ++attempt) {
    const absl::Status status = damaged->Predict(Lookup(280, 1)).status();
    CHECK(absl::IsDataLoss(status));
    CHECK(Contains(status, "checksum mismatch in variable 'user_embedding' rows [256"));
  }
  CHECK(damaged->Predict(Lookup(3, 1)).ok());
  CHECK(absl::IsDataLoss(damaged->variables().CheckAll("user_embedding")));
  CHECK(damaged->variables().CheckAll("item_embedding").ok());

  // A damaged dense variable is found when the predictor is built.
  file = Must(ReadFileBounded(*env, "/m/model.tsr", 1 << 30));
  file[row_280 + 3] ^= 0x10;  // the table is whole again
  file[DataAt(file) + ExtentOf(layout, "hidden/kernel").offset + 4] ^= 1;
  REQUIRE(WriteFileAtomically(*env, "/m/model.tsr", file, false).ok());
  OpenedModel dense = Must(OpenExportedModel("/m", env.get()));
  const absl::Status refused =
      Predictor::Create(std::move(dense.description), std::move(dense.variables)).status();
  CHECK(absl::IsDataLoss(refused));
  CHECK(Contains(refused, "variable 'hidden/kernel'"));
}

TEST_CASE("threads predicting at once verify pieces safely: good rows serve, a bad piece fails") {
  const ExportedModel model = PieceyModel();
  const schema_internal::ModelLayout layout = LayoutOf(model);
  std::string file = Must(EncodeExportedModel(model));
  file[DataAt(file) + ExtentOf(layout, "user_embedding").offset + 290 * 64 * 4] ^= 0x01;
  auto env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/m").ok());
  REQUIRE(WriteFileAtomically(*env, "/m/model.tsr", file, false).ok());
  auto mapped = OpenPredictor(*env, "/m");
  auto in_memory = Must(Predictor::Create(model));
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int64_t user = t; user < 300; user += 3) {
        const auto got = mapped->Predict(Lookup(user, user % 50));
        if (user >= 256) {  // the damaged second piece
          if (got.ok() || !absl::IsDataLoss(got.status())) ++wrong;
          continue;
        }
        const auto want = in_memory->Predict(Lookup(user, user % 50));
        if (!got.ok() || !want.ok() ||
            !SameTensor(got->at("probability"), want->at("probability"))) {
          ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(wrong == 0);
}

TEST_CASE("a NaN forged into a mapped file behind valid checksums is never served") {
  const ExportedModel model = PieceyModel();
  const schema_internal::ModelLayout layout = LayoutOf(model);
  std::string file = Must(EncodeExportedModel(model));
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(
      file.data() + DataAt(file) + ExtentOf(layout, "user_embedding").offset + (280 * 64 + 2) * 4,
      &nan, 4);
  file = Rechecksum(file, layout);
  auto env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/m").ok());
  REQUIRE(WriteFileAtomically(*env, "/m/model.tsr", file, false).ok());
  auto predictor = OpenPredictor(*env, "/m");
  CHECK(predictor->Predict(Lookup(7, 6)).ok());  // rows of another piece serve
  const absl::Status status = predictor->Predict(Lookup(280, 7)).status();
  CHECK(absl::IsDataLoss(status));
  CHECK(Contains(status, "variable 'user_embedding' row 280 holds a non-finite value (nan)"));
  CHECK(absl::IsDataLoss(DecodeExportedModel(file).status()));
  // In memory (a format-1 file of an earlier build could hold one), the same.
  ExportedModel in_memory = model;
  in_memory.variables.at("item_embedding").row(7)[2] = nan;
  const absl::Status from_memory =
      Must(Predictor::Create(in_memory))->Predict(Lookup(7, 7)).status();
  CHECK(Contains(from_memory, "variable 'item_embedding' row 7 holds a non-finite value"));
}

TEST_CASE("forged sizes, offsets and layouts are DataLoss, never a crash or an allocation") {
  const ExportedModel model = PieceyModel();
  const schema_internal::ModelLayout layout = LayoutOf(model);
  const std::string file = Must(EncodeExportedModel(model));
  const std::string body = BodyOf(file);
  const uint64_t tail = TailBytesOf(file);
  const uint64_t message = body.size() - tail;
  const auto& items = ExtentOf(layout, "item_embedding");
  const auto& users = ExtentOf(layout, "user_embedding");
  REQUIRE(items.offset != 0);
  REQUIRE(users.offset != 0);
  auto forge_word = [&](uint64_t from, uint64_t to) {
    // The word in the message holding `from` (a data offset or the checksums' offset).
    std::string forged = body;
    int found = 0;
    for (size_t at = 0; at + 8 <= message; at += 8) {
      if (Load64(forged, at) == from) {
        std::memcpy(forged.data() + at, &to, 8);
        ++found;
      }
    }
    REQUIRE(found == 1);
    return Reseal(FileKind::kModel, forged, tail);
  };
  struct Case {
    std::string name;
    std::string file;
    std::string error;
  };
  std::string huge_header = file;
  const uint64_t huge = uint64_t{1} << 62;
  std::memcpy(huge_header.data() + 8, &huge, 8);
  std::string huge_tail = file;
  const uint32_t words = 0xffffffffu;
  std::memcpy(huge_tail.data() + 20, &words, 4);
  const std::vector<Case> cases = {
      {"overlapping variables", forge_word(users.offset, items.offset), "overlapping"},
      {"data outside the file", forge_word(users.offset, uint64_t{1} << 40), "out of place"},
      {"checksums elsewhere", forge_word(layout.checksums_offset, layout.checksums_offset + 8),
       "its checksums are said to start at"},
      {"a body size beyond the file", huge_header, "the header says"},
      {"a tail beyond the body", huge_tail, "malformed header"},
      {"extended", Reseal(FileKind::kModel, body + std::string(64, '\0'), tail + 64),
       "truncated or extended"},
      {"a message claiming the whole file", Reseal(FileKind::kModel, body, 0), "model"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const absl::Status status = DecodeExportedModel(c.file).status();
    CHECK(!status.ok());
    CHECK_MESSAGE(Contains(status, c.error), status.ToString());
  }
  // A table claimed as 2^27 x 64 floats (32 GiB): a valid shape, more than a file may hold.
  const std::string shape_from = Int64Bytes({300, 64});
  const std::string shape_to = Int64Bytes({int64_t{1} << 27, 64});
  // Both the spec's parameter and the variable say [300, 64].
  std::string forged = body;
  int replaced = 0;
  for (size_t at = forged.find(shape_from); at < message; at = forged.find(shape_from, at + 1)) {
    forged.replace(at, shape_to.size(), shape_to);
    ++replaced;
  }
  REQUIRE(replaced == 2);
  const absl::Status shape = DecodeExportedModel(Reseal(FileKind::kModel, forged, tail)).status();
  CHECK(absl::IsDataLoss(shape));
  CHECK_MESSAGE(Contains(shape, "more than a model file may hold"), shape.ToString());
}

TEST_CASE("every truncation of a model file on disk is refused when opened") {
  const std::string file = Must(EncodeExportedModel(PieceyModel()));
  TempDir dir;
  const std::string path = dir.path() + "/" + kModelFile;
  for (size_t n : {size_t{0}, size_t{10}, size_t{24}, size_t{100}, file.size() / 2, file.size() - 8,
                   file.size() - 1}) {
    CAPTURE(n);
    WriteBytes(path, file.substr(0, n));
    const absl::Status status = OpenExportedModel(dir.path()).status();
    CHECK(absl::IsDataLoss(status));
    CHECK(Contains(status, path));
  }
}

TEST_CASE("a sparse 15 GiB model file with a valid header is refused without reading it") {
  const std::string file = Must(EncodeExportedModel(PieceyModel()));
  TempDir dir;
  const std::string path = dir.path() + "/" + kModelFile;
  // Header, message and data as written, then a hole up to 15 GiB; the header's sizes are made to
  // match the file, so only the layout can tell.
  const uint64_t size = uint64_t{15} << 30;
  std::string head = file;
  const uint64_t body = size - schema_internal::kEnvelopeHeaderBytes;
  const uint32_t tail_words =
      static_cast<uint32_t>((body - (file.size() - 24 - TailBytesOf(file))) / 8);
  std::memcpy(head.data() + 8, &body, 8);
  std::memcpy(head.data() + 20, &tail_words, 4);
  WriteBytes(path, head);
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(size)) == 0);
  struct stat info;
  REQUIRE(::stat(path.c_str(), &info) == 0);
  REQUIRE(static_cast<uint64_t>(info.st_blocks) * 512 < (uint64_t{1} << 20));  // really sparse

  const auto start = std::chrono::steady_clock::now();
  const absl::Status opened = OpenExportedModel(dir.path()).status();
  CHECK(absl::IsDataLoss(opened));
  CHECK_MESSAGE(Contains(opened, "truncated or extended"), opened.ToString());
  const absl::Status read = ReadExportedModel(dir.path()).status();
  CHECK(absl::IsDataLoss(read));
  // A header claiming the whole 15 GiB is message (a format-1 file's shape): refused as well.
  std::string all_message = file;
  const uint32_t no_tail = 0;
  std::memcpy(all_message.data() + 8, &body, 8);
  std::memcpy(all_message.data() + 20, &no_tail, 4);
  WriteBytes(path, all_message.substr(0, 24));
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(size)) == 0);
  CHECK(absl::IsDataLoss(OpenExportedModel(dir.path()).status()));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("a FIFO or a directory in place of a model, slice or manifest is refused at once") {
  TempDir dir;
  const std::string model = dir.path() + "/" + kModelFile;
  const std::string manifest = dir.path() + "/" + kManifestFile;
  const std::string slice = dir.path() + "/v0.emb.part-0-of-1.slice";
  for (const std::string& path : {model, manifest, slice}) {
    REQUIRE(::mkfifo(path.c_str(), 0644) == 0);
  }
  {
    testing::FifoWatchdog watchdog(model, absl::Seconds(5));
    CHECK(absl::IsDataLoss(OpenExportedModel(dir.path()).status()));
    CHECK(absl::IsDataLoss(ReadExportedModel(dir.path()).status()));
    CHECK(absl::IsDataLoss(ReadManifest(dir.path()).status()));
    CHECK(absl::IsDataLoss(ReadSliceFile(slice).status()));
    const absl::Status status = OpenExportedModel(dir.path()).status();
    CHECK(Contains(status, "is not a regular file"));
    CHECK(!watchdog.fired());
  }
  for (const std::string& path : {model, manifest}) fs::remove(path);
  fs::create_directory(model);
  fs::create_directory(manifest);
  CHECK(absl::IsDataLoss(OpenExportedModel(dir.path()).status()));
  CHECK(absl::IsDataLoss(ReadManifest(dir.path()).status()));
}

}  // namespace
}  // namespace tessera
