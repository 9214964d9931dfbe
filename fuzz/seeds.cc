// tessera_fuzz_seeds OUT_DIR: writes the seed corpus of the fuzz targets — the bodies (without
// the envelope, as the targets take them; a slice's prefixed with its tail's size in words, see
// round_trip_check.h) of small valid slices, manifests and models — into
// OUT_DIR/{slice,manifest,model}/, and small text files (a format byte, then the lines; see
// decode_text_fuzzer.cc) into OUT_DIR/text/.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schema/base/internal/envelope.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tessera/model.h"
#include "tessera/workloads/reference_models.h"

namespace tessera {
namespace {

Tensor Values(Shape shape, float scale) {
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = scale * (static_cast<float>(i) + 0.5f);
  return t;
}

TensorSlice Slice(Shape full_shape, int64_t offset, int64_t rows, bool with_slots) {
  TensorSlice s;
  s.variable = "emb";
  s.full_shape = full_shape;
  s.row_offset = offset;
  s.value = Values(full_shape.rank() == 0 ? Shape() : full_shape.WithRows(rows), 1);
  if (with_slots) {
    s.slot_names = {"m", "v"};
    s.slots = {Values(s.value.shape(), 2), Values(s.value.shape(), 3)};
  }
  s.step = 17;
  s.checkpoint = {RunId{0x0123456789abcdefULL, 0x0fedcba987654321ULL}, 100};
  return s;
}

CheckpointManifest Manifest() {
  CheckpointManifest m;
  m.global_step = 100;
  CheckpointVariable emb{"emb",
                         Shape{13, 4},
                         DType::kFloat32,
                         OptimizerSpec{"adagrad", {{"learning_rate", 0.05}}},
                         {"accumulator"},
                         90,
                         {{"emb.0", 0, 7}, {"emb.1", 7, 6}},
                         {}};
  CheckpointVariable scalar{"scale", Shape(), DType::kFloat32,     std::nullopt,
                            {},      0,       {{"scale.0", 0, 1}}, {}};
  m.variables = {emb, scalar};
  m.run_id = RunId{0x0123456789abcdefULL, 0x0fedcba987654321ULL};
  return m;
}

absl::StatusOr<ExportedModel> Model(const ModelSpec& spec) {
  ExportedModel model;
  model.spec = spec;
  absl::StatusOr<Signature> signature = ServingSignature(spec);
  if (!signature.ok()) return signature.status();
  model.signatures = {*signature};
  for (const ParamSpec& p : spec.params) {
    absl::StatusOr<Tensor> value = MakeInitializedBlock(p.initializer, p.shape, 0, p.shape.rows());
    if (!value.ok()) return value.status();
    model.variables.emplace(p.name, *std::move(value));
  }
  model.step = 5;
  return model;
}

bool Write(const std::filesystem::path& dir, const std::string& name,
           const absl::StatusOr<std::string>& file) {
  if (!file.ok()) {
    std::fprintf(stderr, "%s: %s\n", name.c_str(), file.status().ToString().c_str());
    return false;
  }
  std::filesystem::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary);
  if (dir.filename() == "slice") out << file->substr(20, 4);  // the header's tail size in words
  out << file->substr(schema_internal::kEnvelopeHeaderBytes);
  return static_cast<bool>(out);
}

int Main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::filesystem::path out = argv[1];
  bool ok = true;
  const std::vector<TensorSlice> slices = {
      Slice(Shape{13, 3}, 4, 5, false), Slice(Shape{13, 3}, 4, 5, true), Slice(Shape(), 0, 1, true),
      Slice(Shape{2, 4}, 2, 0, true), Slice(Shape{6, 2, 2}, 1, 2, true)};
  for (size_t i = 0; i < slices.size(); ++i) {
    ok &= Write(out / "slice", absl::StrCat("seed", i), EncodeSlice(slices[i]));
  }
  ok &= Write(out / "manifest", "seed0", EncodeManifest(Manifest()));
  ok &= Write(out / "manifest", "seed1", EncodeManifest(CheckpointManifest{}));
  RecsysModelOptions recsys;
  recsys.num_users = 5;
  recsys.num_items = 4;
  recsys.embedding_dim = 2;
  recsys.hidden_units = 3;
  MlpModelOptions mlp;
  mlp.input_dim = 3;
  mlp.hidden_units = {4};
  mlp.num_classes = 2;
  for (const auto& [name, spec] :
       {std::pair{"recsys", RecsysModelSpec(recsys)}, std::pair{"mlp", MlpModelSpec(mlp)}}) {
    absl::StatusOr<ExportedModel> model =
        spec.ok() ? Model(*spec) : absl::StatusOr<ExportedModel>(spec.status());
    ok &= Write(
        out / "model", name,
        model.ok() ? EncodeExportedModel(*model) : absl::StatusOr<std::string>(model.status()));
  }
  // Text: byte 0 picks Criteo's layout (even) or the short spec (odd); bit 1 skips bad lines.
  const std::string criteo_line =
      "1\t5\t\t3\t0\t1382\t4\t15\t2\t181\t1\t2\t\t2\t68fd1e64\t80e26c9b\tfb936136\t"
      "7b4723c4\t25c83c98\t7e0ccccf\tde7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t"
      "37c9c164\t2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t21ddcdc9\t"
      "b1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407\t9727dd16\n";
  const std::vector<std::pair<std::string, std::string>> texts = {
      {"criteo", std::string(1, '\0') + criteo_line + criteo_line},
      {"criteo_skip", std::string(1, '\2') + criteo_line + "1\t2\tbad\n" + criteo_line},
      {"spec", std::string(1, '\1') + "1,0.5,2,alice,a|b|c,x\n0,,-1,,,\r\n1,3,4,bob,z,"},
  };
  for (const auto& [name, text] : texts) {
    const std::filesystem::path dir = out / "text";
    std::filesystem::create_directories(dir);
    std::ofstream file(dir / name, std::ios::binary);
    file << text;
    ok &= static_cast<bool>(file);
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::Main(argc, argv); }
