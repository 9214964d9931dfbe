#include "schema/serving/model_io.h"

#include <doctest/doctest.h>

#include <functional>
#include <string>
#include <vector>

#include "tests/schema/schema_test_util.h"

namespace tessera {
namespace {

using namespace schema_test;  // NOLINT: the test helpers

ExportedModel SmallMlpModel() {
  MlpModelOptions options;
  options.input_dim = 784;
  options.hidden_units = {300};  // a 784 x 300 kernel: 940 KB, plus the rest: two chunks
  options.num_classes = 10;
  options.seed = 5;
  return SampleModel(Must(MlpModelSpec(options)));
}

TEST_CASE("exported models round trip exactly and re-export to the same bytes") {
  struct Case {
    std::string name;
    ExportedModel model;
  };
  ExportedModel extra_signature = SmallRecsysModel();
  extra_signature.signatures.push_back(
      {"scores", {{"user", DType::kInt64, {-1}}}, {{"probability", DType::kFloat32, {-1, 1}}}});
  ExportedModel with_attrs = SmallRecsysModel();
  with_attrs.spec.name = "with every kind of field";
  with_attrs.spec.params[0].trainable = false;
  with_attrs.spec.params[0].partitioned = !with_attrs.spec.params[0].partitioned;
  with_attrs.spec.params[0].initializer.seed = ~uint64_t{0};
  ExportedModel text = SmallRecsysModel();  // user ids hashed from texts (a file's cat: column)
  text.spec.inputs.at(0).hash_buckets = 5;
  text.text_inputs = {"user"};
  const std::vector<Case> cases = {
      {"recsys", SmallRecsysModel()}, {"mlp", SmallMlpModel()}, {"two signatures", extra_signature},
      {"edited fields", with_attrs},  {"text inputs", text},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string bytes = Must(EncodeExportedModel(c.model));
    const ExportedModel decoded = Must(DecodeExportedModel(bytes));
    CHECK(SameModel(decoded, c.model));
    CHECK(Must(EncodeExportedModel(decoded)) == bytes);
  }
}

TEST_CASE("exported models are written atomically into their directory and read back") {
  TempDir dir;
  const absl::Status missing = ReadExportedModel(dir.path()).status();
  CHECK(absl::IsNotFound(missing));
  CHECK(Contains(missing, "no exported model in"));
  const ExportedModel model = SmallRecsysModel();
  REQUIRE(WriteExportedModel(dir.path(), model).ok());
  CHECK(SameModel(Must(ReadExportedModel(dir.path())), model));
  CHECK(dir.Files() == std::vector<std::string>{kModelFile});
}

TEST_CASE("an invalid model is refused before anything is written") {
  struct Case {
    std::string name;
    std::function<void(ExportedModel&)> corrupt;
  };
  const std::vector<Case> cases = {
      {"missing variable", [](ExportedModel& m) { m.variables.erase(m.variables.begin()); }},
      {"extra variable", [](ExportedModel& m) { m.variables.emplace("zzz", Tensor(Shape{1})); }},
      {"mis-shaped variable",
       [](ExportedModel& m) {
         m.variables.begin()->second = Tensor(Shape{1, 1});
       }},
      {"dangling node input", [](ExportedModel& m) { m.spec.nodes[0].inputs[0] = "nowhere"; }},
      {"duplicate signature", [](ExportedModel& m) { m.signatures.push_back(m.signatures[0]); }},
      {"negative step", [](ExportedModel& m) { m.step = -1; }},
      {"signature dtype",
       [](ExportedModel& m) { m.signatures[0].inputs[0].dtype = static_cast<DType>(0); }},
      {"signature dims", [](ExportedModel& m) { m.signatures[0].outputs[0].shape = {-2}; }},
      {"text input not hashed", [](ExportedModel& m) { m.text_inputs = {"user"}; }},
      {"text input unknown",
       [](ExportedModel& m) {
         m.spec.inputs.at(0).hash_buckets = 5;
         m.text_inputs = {"nobody"};
       }},
      {"text inputs repeated",
       [](ExportedModel& m) {
         m.spec.inputs.at(0).hash_buckets = 5;
         m.text_inputs = {"user", "user"};
       }},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    TempDir dir;
    ExportedModel model = SmallRecsysModel();
    c.corrupt(model);
    CHECK(absl::IsInvalidArgument(EncodeExportedModel(model).status()));
    CHECK(absl::IsInvalidArgument(WriteExportedModel(dir.path(), model)));
    CHECK(dir.Files().empty());
  }
}

TEST_CASE("a decoded model is validated like a new one") {
  const ExportedModel model = SmallRecsysModel();
  const std::string file = Must(EncodeExportedModel(model));
  const std::string body = BodyOf(file);
  const uint64_t tail = TailBytesOf(file);
  // The step, negated.
  const absl::Status step =
      DecodeExportedModel(
          Reseal(FileKind::kModel,
                 ReplaceUnique(body, Int64Bytes({model.step}), Int64Bytes({-model.step})), tail))
          .status();
  CHECK(absl::IsInvalidArgument(step));
  // The format version (the root's first field in a one-segment message).
  std::string future = body;
  REQUIRE(future[16] == 2);
  future[16] = 3;
  const absl::Status version = DecodeExportedModel(Reseal(FileKind::kModel, future, tail)).status();
  CHECK(absl::IsInvalidArgument(version));
  CHECK(Contains(version, "format version 3; this build reads format versions 1 and 2"));
}

}  // namespace
}  // namespace tessera
