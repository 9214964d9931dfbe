// schema/'s files through an in-memory Env (core/base/mem_env.h): slice files, manifests and
// exported models round trip without a disk, the bytes are those of the in-memory encoders, and
// failures of the Env come back as errors that leave nothing half written.
#include <doctest/doctest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/mem_env.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tests/schema/schema_test_util.h"

namespace tessera {
namespace {

using namespace schema_test;  // NOLINT: the test helpers

// A directory that exists only in the fake (checked absent from the real filesystem).
constexpr char kDir[] = "/tessera-mem-env-only/ckpt";

std::vector<std::string> List(Env& env, const std::string& dir) {
  return Must(env.ListDirectory(dir));
}

TEST_CASE("a slice file round trips through the in-memory Env, byte for byte the encoded slice") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories(kDir).ok());
  const std::string path = absl::StrCat(kDir, "/emb.part_0");
  for (const TensorSlice& slice : {SampleSlice(Shape{13, 3}, 4, 5, true),
                                   SampleSlice(Shape(), 0, 1, false),
                                   SampleSlice(Shape{400000, 2}, 0, 300000, true)}) {
    REQUIRE(WriteSliceFile(path, slice, env.get()).ok());
    CHECK(SameSlice(Must(ReadSliceFile(path, env.get())), slice));
    CHECK(Must(ReadFileBounded(*env, path, int64_t{1} << 30)) == Must(EncodeSlice(slice)));
  }
  CHECK(List(*env, kDir) == std::vector<std::string>{"emb.part_0"});
  CHECK_FALSE(std::filesystem::exists("/tessera-mem-env-only"));
}

TEST_CASE("a checkpoint written through the in-memory Env reads back as blocks across slices") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories(kDir).ok());
  // emb [10, 2] with one slot, saved as two slices of 6 and 4 rows.
  CheckpointVariable v;
  v.name = "emb";
  v.shape = Shape{10, 2};
  v.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}};
  v.slot_names = {"accumulator"};
  v.step = 3;
  int64_t offset = 0;
  for (int64_t rows : {6, 4}) {
    TensorSlice slice;
    slice.variable = v.name;
    slice.full_shape = v.shape;
    slice.row_offset = offset;
    slice.value = Tensor(Shape{rows, 2});
    slice.slot_names = v.slot_names;
    slice.slots = {Tensor(Shape{rows, 2})};
    for (int64_t k = 0; k < slice.value.size(); ++k) {
      slice.value.values()[k] = static_cast<float>(offset * 2 + k);
      slice.slots[0].values()[k] = -static_cast<float>(offset * 2 + k);
    }
    slice.step = 3;
    const std::string file = absl::StrCat("emb.", offset);
    REQUIRE(WriteSliceFile(absl::StrCat(kDir, "/", file), slice, env.get()).ok());
    v.slices.push_back({file, offset, rows});
    offset += rows;
  }
  // No manifest yet: no checkpoint.
  CHECK(absl::IsNotFound(ReadManifest(kDir, env.get()).status()));
  CheckpointManifest manifest;
  manifest.global_step = 77;
  manifest.variables = {v};
  REQUIRE(WriteManifest(kDir, manifest, env.get()).ok());
  const CheckpointManifest read = Must(ReadManifest(kDir, env.get()));
  CHECK(SameManifest(read, manifest));
  CHECK(List(*env, kDir) == std::vector<std::string>{"emb.0", "emb.6", kManifestFile});

  // Rows 4..8 straddle both files.
  const TensorSlice block = Must(ReadSliceBlock(kDir, read.variables[0], 4, 4, env.get()));
  CHECK(block.row_offset == 4);
  CHECK(block.step == 3);
  for (int64_t k = 0; k < block.value.size(); ++k) {
    CAPTURE(k);
    CHECK(block.value.values()[k] == static_cast<float>(8 + k));
    CHECK(block.slots[0].values()[k] == -static_cast<float>(8 + k));
  }

  // A slice file the manifest names but the Env lacks, or one cut short.
  REQUIRE(env->RemoveTree(absl::StrCat(kDir, "/emb.6")).ok());
  CHECK(absl::IsNotFound(ReadSliceBlock(kDir, read.variables[0], 4, 4, env.get()).status()));
  const std::string whole = Must(ReadFileBounded(*env, absl::StrCat(kDir, "/emb.0"), 1 << 20));
  REQUIRE(WriteFileAtomically(*env, absl::StrCat(kDir, "/emb.0"),
                              absl::string_view(whole).substr(0, whole.size() - 8), false)
              .ok());
  CHECK(absl::IsDataLoss(ReadSliceBlock(kDir, read.variables[0], 0, 2, env.get()).status()));
}

TEST_CASE("a manifest that fails to land leaves the previous one, whole, and no temporary file") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories(kDir).ok());
  const CheckpointManifest first = SampleManifest();
  REQUIRE(WriteManifest(kDir, first, env.get()).ok());
  CheckpointManifest second = first;
  second.global_step = first.global_step + 1;
  env->FailWritesUnder(absl::StrCat(kDir, "/", kManifestFile),
                       absl::UnavailableError("injected: no space"));
  CHECK(absl::IsUnavailable(WriteManifest(kDir, second, env.get())));
  env->FailWritesUnder("/", absl::OkStatus());
  CHECK(SameManifest(Must(ReadManifest(kDir, env.get())), first));
  CHECK(List(*env, kDir) == std::vector<std::string>{kManifestFile});
  // Into a directory that does not exist: NotFound, as on a disk.
  CHECK(absl::IsNotFound(WriteManifest("/nowhere", first, env.get())));
  CHECK(absl::IsNotFound(
      WriteSliceFile("/nowhere/emb.0", SampleSlice(Shape{3}, 0, 3, false), env.get())));
}

TEST_CASE("an exported model round trips through the in-memory Env") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/export").ok());
  const ExportedModel model = SmallRecsysModel();
  CHECK(absl::IsNotFound(ReadExportedModel("/export", env.get()).status()));
  REQUIRE(WriteExportedModel("/export", model, env.get()).ok());
  CHECK(SameModel(Must(ReadExportedModel("/export", env.get())), model));
  CHECK(Must(ReadFileBounded(*env, absl::StrCat("/export/", kModelFile), int64_t{1} << 30)) ==
        Must(EncodeExportedModel(model)));
  CHECK(List(*env, "/export") == std::vector<std::string>{kModelFile});
}

}  // namespace
}  // namespace tessera
