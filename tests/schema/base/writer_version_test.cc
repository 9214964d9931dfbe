// Checkpoint manifests and exported models record the Tessera version that wrote them
// (tessera/version.h); files written before versions were recorded still read, restore and serve.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>

#include "core/base/mem_env.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tessera/version.h"
#include "tests/schema/schema_test_util.h"

namespace tessera {
namespace {

using namespace schema_test;  // NOLINT: the test helpers

// tests/schema/testdata/before_versions/: a checkpoint (checkpoint/) and an export (export/) of
// the same tiny recsys model after 5 steps, written by the build just before versions were
// recorded (commit b5cf24b) with
//   recsys --users=20 --items=10 --embedding_dim=4 --hidden=4 --train_examples=2000
//          --test_examples=200 --steps=5 --batch_size=64 --ps=1 --workers=1
//          --partitioner=fixed:2 --checkpoint_dir=ckpt --checkpoint_every=5 --export_dir=model
// (checkpoint/ is ckpt/ckpt-5, export/ is model/).
std::string BeforeVersions(const std::string& what) {
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE(source != nullptr);
  return std::string(source) + "/tests/schema/testdata/before_versions/" + what;
}

TEST_CASE("a checkpoint manifest records the version that wrote it") {
  auto env = NewMemEnv();
  CheckpointManifest manifest = SampleManifest();
  manifest.writer_version = "9.9.9";  // what a writer is given is not what it records
  REQUIRE(env->CreateDirectories("/ckpt").ok());
  REQUIRE(WriteManifest("/ckpt", manifest, env.get()).ok());
  const CheckpointManifest read = Must(ReadManifest("/ckpt", env.get()));
  CHECK(read.writer_version == std::string(Version()));
  CHECK(SameManifest(read, SampleManifest()));
  CHECK(Must(DecodeManifest(Must(EncodeManifest(manifest)))).writer_version ==
        std::string(Version()));
}

TEST_CASE("an exported model records the version that wrote it, read or opened") {
  auto env = NewMemEnv();
  ExportedModel model = SmallRecsysModel();
  model.writer_version = "9.9.9";
  REQUIRE(env->CreateDirectories("/model").ok());
  REQUIRE(WriteExportedModel("/model", model, env.get()).ok());
  CHECK(Must(ReadExportedModel("/model", env.get())).writer_version == std::string(Version()));
  CHECK(Must(OpenExportedModel("/model", env.get())).description.writer_version ==
        std::string(Version()));
  CHECK(Must(DecodeExportedModel(Must(EncodeExportedModel(model)))).writer_version ==
        std::string(Version()));
}

TEST_CASE("a checkpoint and an export written before versions were recorded read alike") {
  const std::string checkpoint = BeforeVersions("checkpoint");
  const CheckpointManifest manifest = Must(ReadManifest(checkpoint));
  CHECK(manifest.writer_version.empty());
  CHECK(manifest.global_step == 5);
  CHECK_FALSE(manifest.run_id.empty());
  REQUIRE(manifest.variables.size() == 6);

  const std::string exported = BeforeVersions("export");
  const ExportedModel model = Must(ReadExportedModel(exported));
  CHECK(model.writer_version.empty());
  CHECK(model.step == 5);
  OpenedModel opened = Must(OpenExportedModel(exported));
  CHECK(opened.format_version == 2);
  CHECK(opened.description.writer_version.empty());

  // Both hold the model after its last step: every variable restored from the checkpoint's
  // slice files (embeddings from 2 shards each) is the exported value, bit for bit.
  for (const CheckpointVariable& v : manifest.variables) {
    CAPTURE(v.name);
    const TensorSlice whole = Must(ReadSliceBlock(checkpoint, v, 0, v.shape.rows()));
    REQUIRE(model.variables.count(v.name) == 1);
    CHECK(SameTensor(whole.value, model.variables.at(v.name)));
    CHECK(whole.slot_names == std::vector<std::string>{"accumulator"});
  }
  auto predictor =
      Must(Predictor::Create(std::move(opened.description), std::move(opened.variables)));
  Batch batch;
  batch.size = 2;
  batch.ids["user"] = {19, 0};
  batch.ids["item"] = {3, 9};
  const auto outputs = Must(predictor->Predict(batch));
  const auto from_memory = Must(Must(Predictor::Create(model))->Predict(batch));
  CHECK(SameTensor(outputs.at("probability"), from_memory.at("probability")));

  // Written again by this build, they carry its version.
  CHECK(Must(DecodeManifest(Must(EncodeManifest(manifest)))).writer_version ==
        std::string(Version()));
  CHECK(Must(DecodeExportedModel(Must(EncodeExportedModel(model)))).writer_version ==
        std::string(Version()));
}

TEST_CASE("a writer version that is not a version string is refused, naming the file's part") {
  const std::string version(Version());
  REQUIRE(version.size() >= 2);
  for (const std::string& forged :
       {std::string(version.size() - 1, '1') + " ", std::string(version.size() - 1, '1') + "\x01",
        std::string(version.size() - 1, '1') + "\xff"}) {
    CAPTURE(forged);
    const std::string manifest = Must(EncodeManifest(SampleManifest()));
    const absl::StatusOr<CheckpointManifest> bad_manifest = DecodeManifest(
        Reseal(FileKind::kManifest, ReplaceUnique(BodyOf(manifest), version, forged)));
    CHECK(absl::IsDataLoss(bad_manifest.status()));
    CHECK(Contains(bad_manifest.status(), "manifest: the version that wrote it"));

    const std::string model = Must(EncodeExportedModel(SmallRecsysModel()));
    const absl::StatusOr<ExportedModel> bad_model = DecodeExportedModel(Reseal(
        FileKind::kModel, ReplaceUnique(BodyOf(model), version, forged), TailBytesOf(model)));
    CHECK(absl::IsDataLoss(bad_model.status()));
    CHECK(Contains(bad_model.status(), "exported model: the version that wrote it"));
  }
}

TEST_CASE("version strings") {
  CHECK(IsVersionString(Version()));
  CHECK(IsVersionString("0.2.0-rc1+build.7"));
  CHECK_FALSE(IsVersionString(""));
  CHECK_FALSE(IsVersionString("0.1 .0"));
  CHECK_FALSE(IsVersionString("0.1.0\n"));
  CHECK_FALSE(IsVersionString(std::string(65, '1')));
  CHECK(IsVersionString(std::string(64, '1')));
}

}  // namespace
}  // namespace tessera
