#include "serving/instances.h"

#include <doctest/doctest.h>

#include <limits>
#include <string>
#include <vector>

#include "core/base/hash.h"
#include "serving/json.h"
#include "serving/metadata.h"
#include "tessera/workloads/reference_models.h"
#include "tests/cli/cli_test_util.h"

namespace tessera::serving {
namespace {

using testing::TinyRecsysModel;

bool Contains(const absl::Status& status, const std::string& part) {
  return std::string(status.message()).find(part) != std::string::npos;
}

Json J(const std::string& text) {
  auto json = ParseJson(text);
  REQUIRE_MESSAGE(json.ok(), json.status().message());
  return *json;
}

// A model with one dense input "x" of 3 values and one output "y" [B, 2], and a second signature.
ExportedModel DenseModel() {
  ExportedModel model;
  model.spec.name = "dense";
  model.spec.inputs = {{"x", InputKind::kDense, 3}};
  model.spec.params = {{"w", Shape{3, 2}, {"glorot_uniform", {}, 7}},
                       {"b", Shape{2}, {"zeros", {}, 0}}};
  model.spec.nodes = {{"y", "dense", {"x"}, {"w", "b"}, {{"units", 2}}, {}}};
  model.spec.outputs = {{"y", "y"}};
  model.spec.loss = {"softmax_cross_entropy", "y"};
  model.variables["w"] = *Tensor::FromVector(Shape{3, 2}, {1, 0, 0, 1, 1, 1});
  model.variables["b"] = *Tensor::FromVector(Shape{2}, {0.5, -0.5});
  return model;
}

InstanceFormat RecsysFormat() {
  const ExportedModel model = TinyRecsysModel();
  auto format = MakeInstanceFormat(model.signatures[0], model.spec);
  REQUIRE(format.ok());
  return *format;
}

TEST_CASE("a text input takes a string and an integer as the same text, a raw one the integer") {
  InstanceFormat::Input text{"user", InputKind::kIds, 1, 0, 1000};
  text.text = true;
  int64_t from_number = 0, from_string = 0;
  REQUIRE(ParseIdValue(text, J("30440"), from_number).ok());
  REQUIRE(ParseIdValue(text, J("\"30440\""), from_string).ok());
  CHECK(from_number == from_string);  // as the training file's field 30440 was
  CHECK(from_number == StringId("30440"));
  int64_t id = 0;
  REQUIRE(ParseIdValue(text, J("-7"), id).ok());
  CHECK(id == StringId("-7"));
  REQUIRE(ParseIdValue(text, J("18446744073709551615"), id).ok());
  CHECK(id == StringId("18446744073709551615"));
  CHECK(Contains(ParseIdValue(text, J("1.5"), id), "must be a string"));
  CHECK(Contains(ParseIdValue(text, J("[1]"), id), "must be a string"));

  InstanceFormat::Input raw = text;  // a hashed input trained on raw ids
  raw.text = false;
  REQUIRE(ParseIdValue(raw, J("30440"), id).ok());
  CHECK(id == 30440);

  // The model's description names its text inputs; every signature's format follows it.
  ExportedModel model = TinyRecsysModel();
  model.spec.inputs.at(0).hash_buckets = 5;  // "user", looked up in its 5-row table
  model.text_inputs = {"user"};
  const auto formats = ModelInstanceFormats(model);
  REQUIRE(formats.ok());
  for (const auto& [name, format] : *formats) {
    CAPTURE(name);
    REQUIRE(format.inputs.size() == 2);
    CHECK(format.inputs[0].text);
    CHECK_FALSE(format.inputs[1].text);
  }
  // The metadata tells the truth: strings for the text input, int64 ids for the other.
  const Json metadata = ModelMetadataJson("recsys", 42, *formats);
  const Json& inputs =
      metadata["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"];
  CHECK(inputs["user"]["dtype"] == "DT_STRING");
  CHECK(inputs["item"]["dtype"] == "DT_INT64");
}

TEST_CASE("a serving signature resolves to its inputs, id ranges and output widths") {
  const InstanceFormat format = RecsysFormat();
  CHECK(format.signature == "serving_default");
  REQUIRE(format.inputs.size() == 2);
  CHECK(format.inputs[0].name == "user");
  CHECK(format.inputs[0].kind == InputKind::kIds);
  CHECK(format.inputs[0].id_limit == 5);
  CHECK(format.inputs[1].name == "item");
  CHECK(format.inputs[1].id_limit == 4);
  REQUIRE(format.outputs.size() == 2);
  CHECK(format.outputs[0].name == "logits");
  CHECK(format.outputs[1].name == "probability");
  CHECK(format.outputs[1].width == 1);

  auto dense = MakeInstanceFormat(*ServingSignature(DenseModel().spec), DenseModel().spec);
  REQUIRE(dense.ok());
  REQUIRE(dense->inputs.size() == 1);
  CHECK(dense->inputs[0].kind == InputKind::kDense);
  CHECK(dense->inputs[0].width == 3);
  CHECK(dense->outputs[0].width == 2);
}

TEST_CASE("a signature that does not match its model is InvalidArgument naming the tensor") {
  struct Case {
    const char* name;
    std::function<void(Signature&)> damage;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"an input the model lacks", [](Signature& s) { s.inputs[0].name = "age"; }, "'age'"},
      {"a model input left out", [](Signature& s) { s.inputs.pop_back(); }, "'item' is missing"},
      {"an input twice", [](Signature& s) { s.inputs[1] = s.inputs[0]; }, "appears twice"},
      {"an ids input as float", [](Signature& s) { s.inputs[0].dtype = DType::kFloat32; },
       "input 'user' is float32 [-1], expected int64 [-1]"},
      {"an ids input of rank 2",
       [](Signature& s) {
         s.inputs[1].shape = {-1, 1};
       },
       "expected int64 [-1]"},
      {"an output the model lacks", [](Signature& s) { s.outputs[0].name = "score"; }, "'score'"},
      {"an output of the wrong width",
       [](Signature& s) {
         s.outputs[1].shape = {-1, 2};
       },
       "output 'probability' is float32 [-1, 2], expected float32 [-1, 1]"},
      {"an output twice", [](Signature& s) { s.outputs[0] = s.outputs[1]; }, "appears twice"},
  };
  const ExportedModel model = TinyRecsysModel();
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Signature signature = model.signatures[0];
    signature.name = "custom";
    c.damage(signature);
    auto format = MakeInstanceFormat(signature, model.spec);
    CHECK(format.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(format.status(), "signature 'custom'"));
    CHECK(Contains(format.status(), c.message));
  }
}

TEST_CASE("a signature may serve a subset of the outputs, and serving_default is always there") {
  ExportedModel model = TinyRecsysModel();
  Signature scores = model.signatures[0];
  scores.name = "scores";
  scores.outputs.erase(scores.outputs.begin());  // only "probability"
  model.signatures = {scores};
  auto formats = ModelInstanceFormats(model);
  REQUIRE(formats.ok());
  REQUIRE(formats->size() == 4);  // and classification, regression (classify_signatures.h)
  CHECK(formats->at("scores").outputs.size() == 1);
  CHECK(formats->at("serving_default").outputs.size() == 2);  // derived from the spec
}

TEST_CASE("instances become a batch in order") {
  const InstanceFormat format = RecsysFormat();
  BatchBuilder builder(format);
  REQUIRE(builder.Add(J(R"({"user": 4, "item": 0})")).ok());
  REQUIRE(builder.Add(J(R"({"item": 3, "user": 0})")).ok());
  REQUIRE(builder.Add(J(R"({"user": 2, "item": 2})")).ok());
  CHECK(builder.size() == 3);
  const Batch batch = builder.Take();
  CHECK(batch.size == 3);
  CHECK(batch.ids.at("user") == Ids{4, 0, 2});
  CHECK(batch.ids.at("item") == Ids{0, 3, 2});
  CHECK(batch.dense.empty());
  CHECK(batch.labels.size() == 0);
  CHECK(builder.size() == 0);
  REQUIRE(builder.Add(J(R"({"user": 1, "item": 1})")).ok());
  CHECK(builder.Take().ids.at("user") == Ids{1});
}

TEST_CASE("dense instances, named or bare when the signature has one input") {
  const ExportedModel model = DenseModel();
  const InstanceFormat format = *MakeInstanceFormat(*ServingSignature(model.spec), model.spec);
  BatchBuilder builder(format);
  REQUIRE(builder.Add(J(R"({"x": [1, 2.5, -3]})")).ok());
  REQUIRE(builder.Add(J(R"([0.25, 0, 1e-3])")).ok());
  const Batch batch = builder.Take();
  REQUIRE(batch.dense.count("x") == 1);
  CHECK(batch.dense.at("x").shape() == Shape{2, 3});
  CHECK(std::vector<float>(batch.dense.at("x").values().begin(),
                           batch.dense.at("x").values().end()) ==
        std::vector<float>{1, 2.5f, -3, 0.25f, 0, 1e-3f});
}

TEST_CASE("a bad instance is InvalidArgument naming the input, and adds nothing") {
  struct Case {
    const char* instance;
    const char* message;
  };
  const std::vector<Case> recsys_cases = {
      {R"({"user": 1})", "missing input 'item'"},
      {R"({"user": 1, "item": 2, "age": 3})",
       "unknown input 'age'; the signature's inputs are "
       "user, item"},
      {R"({"user": "1", "item": 2})", "input 'user' must be an integer id, got a string"},
      {R"({"user": 1.5, "item": 2})", "must be an integer id, got a number (1.5)"},
      {R"({"user": [1], "item": 2})", "must be an integer id, got an array"},
      {R"({"user": null, "item": 2})", "got null"},
      {R"({"user": true, "item": 2})", "got a boolean"},
      {R"({"user": 5, "item": 2})", "input 'user': id 5 is out of range [0, 5)"},
      {R"({"user": -1, "item": 2})", "input 'user': id -1 is out of range [0, 5)"},
      {R"({"user": 0, "item": 18446744073709551615})", "id 18446744073709551615 is out of range"},
      {R"([1, 2])",
       "an instance must be an object mapping the inputs (user, item) to values, "
       "got an array"},
      {R"(3)", "got an integer"},
  };
  const InstanceFormat format = RecsysFormat();
  BatchBuilder builder(format);
  REQUIRE(builder.Add(J(R"({"user": 0, "item": 0})")).ok());
  for (const Case& c : recsys_cases) {
    CAPTURE(c.instance);
    const absl::Status status = builder.Add(J(c.instance));
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(status, c.message), status.message());
    CHECK(builder.size() == 1);
  }

  const std::vector<Case> dense_cases = {
      {R"({"x": [1, 2]})", "input 'x' must be an array of 3 numbers, got an array of 2"},
      {R"({"x": 1})", "input 'x' must be an array of 3 numbers, got an integer"},
      {R"({"x": [1, "2", 3]})", "input 'x': element 1 must be a number, got a string"},
      {R"({"x": [1, [2], 3]})", "element 1 must be a number, got an array"},
      {R"([1, 2, 3, 4])", "got an array of 4"},
      {R"({})", "missing input 'x'"},
  };
  const ExportedModel dense = DenseModel();
  const InstanceFormat dense_format =
      *MakeInstanceFormat(*ServingSignature(dense.spec), dense.spec);
  BatchBuilder dense_builder(dense_format);
  for (const Case& c : dense_cases) {
    CAPTURE(c.instance);
    const absl::Status status = dense_builder.Add(J(c.instance));
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(status, c.message), status.message());
    CHECK(dense_builder.size() == 0);
  }
}

TEST_CASE("malformed JSON is InvalidArgument with its position, never an exception") {
  const std::vector<std::string> bad = {"",    "{",         "{\"user\": }", "[1, 2",
                                        "nul", "{\"a\" 1}", "1e999",        "\"\\ud800\""};
  for (const std::string& text : bad) {
    CAPTURE(text);
    auto json = ParseJson(text);
    CHECK(json.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(json.status(), "malformed JSON: "));
    CHECK_FALSE(Contains(json.status(), "[json.exception"));
  }
  CHECK(Contains(ParseJson("{\n  \"a\": x}").status(), "line 2"));
}

InstanceFormat::Output Out(const std::string& name, int64_t width) {
  return {name, width, InstanceFormat::Output::Kind::kModel, name};
}

TEST_CASE("predictions become rows: objects, or the bare row for a single output") {
  InstanceFormat format;
  format.outputs = {Out("a", 2), Out("b", 1)};
  std::map<std::string, Tensor> outputs;
  outputs["a"] = *Tensor::FromVector(Shape{2, 2}, {0.1f, 0.2f, 0.3f, 0.4f});
  outputs["b"] = *Tensor::FromVector(Shape{2, 1}, {-1, 2.5f});
  outputs["unlisted"] = Tensor(Shape{2, 1});

  auto rows = PredictionRows(outputs, format, 2, /*bare_single_output=*/true);
  REQUIRE(rows.ok());
  CHECK(DumpJson(*rows) == R"([{"a":[0.1,0.2],"b":[-1.0]},{"a":[0.3,0.4],"b":[2.5]}])");

  format.outputs = {Out("b", 1)};
  rows = PredictionRows(outputs, format, 2, /*bare_single_output=*/true);
  REQUIRE(rows.ok());
  CHECK(DumpJson(*rows) == R"([[-1.0],[2.5]])");
  rows = PredictionRows(outputs, format, 2, /*bare_single_output=*/false);
  REQUIRE(rows.ok());
  CHECK(DumpJson(*rows) == R"([{"b":[-1.0]},{"b":[2.5]}])");

  format.outputs = {Out("missing", 1)};
  CHECK(PredictionRows(outputs, format, 2, true).status().code() == absl::StatusCode::kInternal);
  format.outputs = {Out("a", 3)};
  CHECK(PredictionRows(outputs, format, 2, true).status().code() == absl::StatusCode::kInternal);

  // JSON has no NaN or infinity: such an output is an error naming it, never a null.
  format.outputs = {Out("b", 1)};
  outputs["b"].data()[1] = std::numeric_limits<float>::infinity();
  const absl::Status infinite = PredictionRows(outputs, format, 2, false).status();
  CHECK(infinite.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(infinite.message()) == "output 'b' of instance 1 is not finite (inf)");
}

TEST_CASE("computed outputs: a binary model's scores [1 - p, p] and class labels as strings") {
  InstanceFormat format;
  format.outputs = {{"classes", 2, InstanceFormat::Output::Kind::kClassLabels, ""},
                    {"scores", 2, InstanceFormat::Output::Kind::kBinaryScores, "p"},
                    {"outputs", 1, InstanceFormat::Output::Kind::kModel, "p"}};
  std::map<std::string, Tensor> outputs;
  outputs["p"] = *Tensor::FromVector(Shape{2, 1}, {0.25f, 1.0f});
  auto rows = PredictionRows(outputs, format, 2, /*bare_single_output=*/true);
  REQUIRE(rows.ok());
  CHECK(DumpJson(*rows) == R"([{"classes":["0","1"],"outputs":[0.25],"scores":[0.75,0.25]},)"
                           R"({"classes":["0","1"],"outputs":[1.0],"scores":[0.0,1.0]}])");
  auto predictions = Predictions::Of(outputs, format, 2);
  REQUIRE(predictions.ok());
  CHECK(*predictions->Number(2, 0) == 0.25f);
  CHECK(predictions->Number(0, 0).status().code() == absl::StatusCode::kInternal);  // strings
  outputs["p"] = *Tensor::FromVector(Shape{2, 2}, {0.25f, 1.0f, 0, 0});
  CHECK(Predictions::Of(outputs, format, 2).status().code() == absl::StatusCode::kInternal);
}

TEST_CASE("floats print in their shortest round-trip form") {
  const float value = 0.1f + 0.2f;
  const std::string text = DumpJson(Json(value));
  CHECK(text == "0.3");  // float 0.1f + 0.2f is exactly float 0.3f
  auto back = ParseJson(DumpJson(Json(1.0f / 3.0f)));
  REQUIRE(back.ok());
  CHECK(back->get<float>() == 1.0f / 3.0f);
}

}  // namespace
}  // namespace tessera::serving
