#include "cli/inspect_command.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tessera/version.h"
#include "tests/cli/cli_test_util.h"

namespace tessera::cli {
namespace {

using testing::TempDir;
using testing::TinyRecsysModel;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A checkpoint of two variables: an embedding saved as two shards with Adagrad slots, and a
// scalar without an optimizer.
CheckpointManifest TwoVariableManifest() {
  CheckpointManifest manifest;
  manifest.global_step = 1200;
  manifest.run_id = RunId{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  CheckpointVariable embedding;
  embedding.name = "user_embedding";
  embedding.shape = Shape{13, 4};
  embedding.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.05}}};
  embedding.slot_names = {"accumulator"};
  embedding.step = 1199;
  embedding.slices = {{"user_embedding.part_0.tsr", 0, 7}, {"user_embedding.part_1.tsr", 7, 6}};
  CheckpointVariable scale;
  scale.name = "scale";
  scale.shape = Shape{};
  scale.slices = {{"scale.tsr", 0, 1}};
  manifest.variables = {embedding, scale};
  return manifest;
}

TEST_CASE("inspecting a checkpoint lists every variable with its optimizer, slots and shards") {
  TempDir dir;
  const absl::Status written = WriteManifest(dir.path(), TwoVariableManifest());
  REQUIRE_MESSAGE(written.ok(), written.message());
  std::ostringstream out;
  const absl::Status status = RunInspect(dir.path(), out);
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::string text = out.str();
  CAPTURE(text);
  CHECK(Has(text, "checkpoint " + dir.path()));
  CHECK(Has(text, "global step: 1200"));
  CHECK(Has(text, "run: 0123456789abcdeffedcba9876543210\n"));
  CHECK(Has(text, "written by: tessera " + std::string(Version()) + "\n"));
  CHECK(Has(text, "variables: 2"));
  CHECK(Has(text, "user_embedding  [13, 4]  float32  step 1199"));
  CHECK(Has(text, "optimizer: adagrad {learning_rate: 0.05}"));
  CHECK(Has(text, "slots: accumulator"));
  CHECK(Has(text, "slices: 2"));
  CHECK(Has(text, "user_embedding.part_0.tsr  rows [0, 7)"));
  CHECK(Has(text, "user_embedding.part_1.tsr  rows [7, 13)"));
  CHECK(Has(text, "scale  []  float32  step 0"));
  CHECK(Has(text, "optimizer: none"));
  CHECK(Has(text, "slots: none"));
  CHECK_FALSE(Has(text, "exported model"));

  std::ostringstream by_file;
  REQUIRE(RunInspect(dir.Sub(kManifestFile), by_file).ok());
  CHECK(by_file.str() == text);

  CheckpointManifest old = TwoVariableManifest();
  old.run_id = RunId{};
  std::ostringstream old_out;
  DescribeCheckpoint(old, old_out);
  CHECK(Has(old_out.str(), "run: none (written before run ids)\n"));
  CHECK(Has(old_out.str(),
            "written by: an unknown version (written before versions were recorded)\n"));
}

TEST_CASE("inspecting an exported model lists its signatures, layers and variables") {
  TempDir dir;
  REQUIRE(WriteExportedModel(dir.path(), TinyRecsysModel()).ok());
  std::ostringstream out;
  const absl::Status status = RunInspect(dir.path(), out);
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::string text = out.str();
  CAPTURE(text);
  CHECK(Has(text, "exported model " + dir.path()));
  CHECK(Has(text, "written by: tessera " + std::string(Version()) + "\n"));
  CHECK(Has(text, "name: recsys"));
  CHECK(Has(text, "step: 42"));
  CHECK(Has(text, "signatures: 1"));
  CHECK(Has(text, "  serving_default\n    inputs:\n      user  int64 [-1]\n"));
  CHECK(Has(text, "      probability  float32 [-1, 1]"));
  CHECK(Has(text, "layers: 6"));
  CHECK(Has(text, "user_vector  embedding(user)  params user_embedding"));
  CHECK(Has(text,
            "hidden  dense(features)  params hidden/kernel, hidden/bias {units: 4} "
            "{activation: relu}"));
  CHECK(Has(text, "loss: sigmoid_cross_entropy on logits"));
  CHECK(Has(text, "variables: 6"));
  CHECK(Has(text, "user_embedding  [5, 3]  partitioned"));
  CHECK(Has(text, "hidden/kernel  [6, 4]\n"));
  CHECK_FALSE(Has(text, "global step"));
}

TEST_CASE("files written before versions were recorded are described as such") {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE(source != nullptr);
  const std::string testdata = std::string(source) + "/tests/schema/testdata/before_versions/";
  for (const char* what : {"checkpoint", "export"}) {
    CAPTURE(what);
    std::ostringstream out;
    const absl::Status status = RunInspect(testdata + what, out);
    REQUIRE_MESSAGE(status.ok(), status.message());
    CHECK(Has(out.str(),
              "written by: an unknown version (written before versions were recorded)\n"));
  }
}

TEST_CASE("a directory with both a checkpoint and a model describes both") {
  TempDir dir;
  REQUIRE(WriteExportedModel(dir.path(), TinyRecsysModel()).ok());
  REQUIRE(WriteManifest(dir.path(), TwoVariableManifest()).ok());
  std::ostringstream out;
  REQUIRE(RunInspect(dir.path(), out).ok());
  CHECK(Has(out.str(), "global step: 1200"));
  CHECK(Has(out.str(), "name: recsys"));
}

TEST_CASE("inspecting neither, nothing or a corrupt file is an error naming the problem") {
  TempDir dir;
  std::ostringstream out;

  const absl::Status empty = RunInspect(dir.path(), out);
  CHECK(empty.code() == absl::StatusCode::kNotFound);
  CHECK(Has(std::string(empty.message()),
            "holds neither a checkpoint (manifest.tsr) nor an "
            "exported model (model.tsr)"));

  const absl::Status missing = RunInspect(dir.Sub("nowhere"), out);
  CHECK(missing.code() == absl::StatusCode::kNotFound);
  CHECK(Has(std::string(missing.message()), "no such file or directory"));

  std::ofstream(dir.Sub("notes.txt")) << "hello";
  const absl::Status other_file = RunInspect(dir.Sub("notes.txt"), out);
  CHECK(other_file.code() == absl::StatusCode::kNotFound);

  std::ofstream(dir.Sub(kManifestFile), std::ios::binary) << std::string(100, '\x7f');
  const absl::Status corrupt = RunInspect(dir.path(), out);
  CHECK_MESSAGE(corrupt.code() == absl::StatusCode::kDataLoss, corrupt.ToString());
  CHECK(Has(std::string(corrupt.message()), dir.Sub(kManifestFile)));

  TempDir model_dir;
  REQUIRE(WriteExportedModel(model_dir.path(), TinyRecsysModel()).ok());
  std::string bytes;
  {
    std::ifstream in(model_dir.Sub(kModelFile), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  REQUIRE(bytes.size() > 64);
  bytes.resize(bytes.size() / 2);  // truncated
  std::ofstream(model_dir.Sub(kModelFile), std::ios::binary | std::ios::trunc) << bytes;
  const absl::Status truncated = RunInspect(model_dir.path(), out);
  CHECK_MESSAGE(truncated.code() == absl::StatusCode::kDataLoss, truncated.ToString());
  CHECK(Has(std::string(truncated.message()), model_dir.Sub(kModelFile)));
}

TEST_CASE("inspect names the file format and, with verify, checks every value") {
  TempDir dir;
  const ExportedModel model = TinyRecsysModel();
  REQUIRE(WriteExportedModel(dir.path(), model).ok());
  std::ostringstream out;
  REQUIRE(RunInspect(dir.path(), out).ok());
  CHECK(Has(out.str(), "format: 2\n"));
  CHECK_FALSE(Has(out.str(), "verified"));
  std::ostringstream verified;
  REQUIRE(RunInspect(dir.path(), verified, /*verify=*/true).ok());
  CHECK(Has(verified.str(), "values: verified"));

  // A flipped bit in the item table: the description still reads, verification names it.
  std::string bytes;
  {
    std::ifstream in(dir.Sub(kModelFile), std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const Tensor& items = model.variables.at("item_embedding");
  const size_t at = bytes.find(std::string(reinterpret_cast<const char*>(items.data()),
                                           static_cast<size_t>(items.size()) * 4));
  REQUIRE(at != std::string::npos);
  bytes[at + 5] ^= 0x20;
  std::ofstream(dir.Sub(kModelFile), std::ios::binary | std::ios::trunc) << bytes;
  std::ostringstream described;
  CHECK(RunInspect(dir.path(), described).ok());
  std::ostringstream ignored;
  const absl::Status bad = RunInspect(dir.path(), ignored, /*verify=*/true);
  CHECK(bad.code() == absl::StatusCode::kDataLoss);
  CHECK(Has(std::string(bad.message()), "checksum mismatch in variable 'item_embedding'"));
}

}  // namespace
}  // namespace tessera::cli
