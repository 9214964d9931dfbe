// TF Serving's REST API beyond row-format :predict: columns, :classify, :regress, string outputs,
// several models and versions (ModelService over a ModelRegistry).
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "serving/json.h"
#include "serving/model_registry.h"
#include "serving/model_service.h"
#include "tests/cli/cli_test_util.h"
#include "tests/mangle.h"

namespace tessera::serving {
namespace {

using testing::TinyRecsysModel;
using testing::TinyRecsysPredictor;

std::unique_ptr<ModelService> RecsysService(PredictLimits limits = {}) {
  auto service = ModelService::Create(TinyRecsysPredictor(), "recsys", limits);
  REQUIRE(service.ok());
  return std::move(*service);
}

Json Body(const HttpReply& reply) {
  auto json = ParseJson(reply.body);
  REQUIRE_MESSAGE(json.ok(), reply.body);
  return *json;
}

// The predictor's probabilities for (user, item) pairs.
std::vector<float> Probabilities(const std::vector<std::pair<int64_t, int64_t>>& pairs) {
  Batch batch;
  batch.size = static_cast<int64_t>(pairs.size());
  for (const auto& [user, item] : pairs) {
    batch.ids["user"].push_back(user);
    batch.ids["item"].push_back(item);
  }
  auto outputs = TinyRecsysPredictor()->Predict(batch);
  REQUIRE(outputs.ok());
  const auto values = outputs->at("probability").values();
  return std::vector<float>(values.begin(), values.end());
}

std::string ErrorOf(const HttpReply& reply) { return Body(reply)["error"].get<std::string>(); }

TEST_CASE("columnar predict answers each output's column under \"outputs\"") {
  const auto service = RecsysService();
  const HttpReply rows =
      service->Handle("POST", "/v1/models/recsys:predict",
                      R"({"instances": [{"user": 0, "item": 3}, {"user": 4, "item": 1}]})");
  const HttpReply columns = service->Handle("POST", "/v1/models/recsys:predict",
                                            R"({"inputs": {"user": [0, 4], "item": [3, 1]}})");
  REQUIRE(rows.status == 200);
  REQUIRE(columns.status == 200);
  const Json predictions = Body(rows)["predictions"];
  const Json outputs = Body(columns)["outputs"];
  REQUIRE(outputs.is_object());
  CHECK(outputs.size() == 2);
  for (const char* output : {"logits", "probability"}) {
    CAPTURE(output);
    REQUIRE(outputs[output].size() == 2);
    for (int b = 0; b < 2; ++b) CHECK(outputs[output][b] == predictions[b][output]);
  }
  const std::vector<float> want = Probabilities({{0, 3}, {4, 1}});
  CHECK(outputs["probability"][1][0].get<float>() == want[1]);
}

TEST_CASE("a signature of one output answers its column bare, and string outputs as strings") {
  ExportedModel model = TinyRecsysModel();
  Signature scores = model.signatures[0];
  scores.name = "scores";
  scores.outputs = {scores.outputs[1]};  // probability
  model.signatures.push_back(scores);
  auto service = ModelService::Create(*Predictor::Create(model), "recsys");
  REQUIRE(service.ok());
  const HttpReply bare = (*service)->Handle(
      "POST", "/v1/models/recsys:predict",
      R"({"signature_name": "scores", "inputs": {"user": [1, 2], "item": [2, 0]}})");
  REQUIRE(bare.status == 200);
  const std::vector<float> want = Probabilities({{1, 2}, {2, 0}});
  const Json outputs = Body(bare)["outputs"];
  REQUIRE(outputs.is_array());
  REQUIRE(outputs.size() == 2);
  CHECK(outputs[0] == Json::array({want[0]}));
  CHECK(outputs[1] == Json::array({want[1]}));

  // The classification signature through :predict: its labels are strings.
  const HttpReply classes = (*service)->Handle(
      "POST", "/v1/models/recsys:predict",
      R"({"signature_name": "classification", "instances": [{"user": 1, "item": 2}]})");
  REQUIRE(classes.status == 200);
  const Json row = Body(classes)["predictions"][0];
  CHECK(row["classes"] == Json::parse(R"(["0", "1"])"));
  CHECK(row["scores"][0].get<float>() == 1.0f - want[0]);
  CHECK(row["scores"][1].get<float>() == want[0]);
}

TEST_CASE(":classify answers [label, score] pairs per example, :regress one number each") {
  const auto service = RecsysService();
  const std::vector<float> want = Probabilities({{1, 2}, {3, 0}, {3, 2}});
  const HttpReply classify = service->Handle(
      "POST", "/v1/models/recsys:classify",
      R"({"examples": [{"user": 1, "item": 2}, {"user": [3], "item": 0}, {"user": 3, "item": [2]}]})");
  REQUIRE_MESSAGE(classify.status == 200, classify.body);
  const Json results = Body(classify)["results"];
  REQUIRE(results.size() == 3);
  for (size_t e = 0; e < 3; ++e) {
    CAPTURE(e);
    REQUIRE(results[e].size() == 2);
    CHECK(results[e][0][0] == "0");
    CHECK(results[e][0][1].get<float>() == 1.0f - want[e]);
    CHECK(results[e][1][0] == "1");
    CHECK(results[e][1][1].get<float>() == want[e]);
  }

  // The context's features are every example's.
  const HttpReply regress =
      service->Handle("POST", "/v1/models/recsys/versions/42:regress",
                      R"({"context": {"user": 3}, "examples": [{"item": 0}, {"item": [2]}],
          "signature_name": "regression"})");
  REQUIRE_MESSAGE(regress.status == 200, regress.body);
  const Json values = Body(regress)["results"];
  REQUIRE(values.size() == 2);
  CHECK(values[0].get<float>() == want[1]);
  CHECK(values[1].get<float>() == want[2]);
  CHECK(Body(regress).size() == 1);
}

TEST_CASE(":classify and :regress refuse what TF Serving refuses, saying why") {
  struct Case {
    const char* path;
    const char* body;
    int status;
    const char* message;
  };
  const std::vector<Case> cases = {
      {":classify", "[]", 400, "must be a JSON object with \"examples\", got an array"},
      {":classify", R"({"examples": [{"user": 1, "item": 1}], "instances": []})", 400,
       "unknown field \"instances\"; a classify request has \"examples\""},
      {":classify", R"({"examples": {"user": 1}})", 400, "\"examples\" must be a non-empty array"},
      {":classify", R"({"examples": [{"user": 1, "item": 1}], "context": [1]})", 400,
       "\"context\" must be an object mapping features to values, got an array"},
      {":classify", R"({"examples": [{"user": 1, "item": 1}], "context": {"age": 1}})", 400,
       "context: unknown feature 'age'; the signature's inputs are user, item"},
      {":classify", R"({"examples": [{"item": 1}], "context": {"user": 7}})", 400,
       "context: input 'user': id 7 is out of range [0, 5)"},
      {":classify", R"({"examples": [{"user": 1, "item": 1}], "context": {"user": 2}})", 400,
       "example 0: feature 'user' is in \"context\" too"},
      {":classify", R"({"examples": [{"user": 1, "item": 1}, [1, 1]]})", 400,
       "example 1: an example must be an object mapping features to values, got an array"},
      {":classify", R"({"examples": [{"user": [1, 2], "item": 1}]})", 400,
       "example 0: feature 'user' must be one integer id (or a list of one), got an array of 2"},
      {":classify", R"({"examples": [{"user": 1}]})", 400, "example 0: missing input 'item'"},
      {":classify", R"({"examples": [{"user": 1, "item": 1, "age": 3}]})", 400,
       "example 0: unknown feature 'age'"},
      {":classify",
       R"({"examples": [{"user": 1, "item": 1}], "signature_name": "serving_default"})", 400,
       "signature 'serving_default' is a predict signature; :classify needs a classify signature "
       "(this model's: classification)"},
      {":regress", R"({"examples": [{"user": 1, "item": 1}], "signature_name": "classification"})",
       400, "signature 'classification' is a classify signature; :regress needs a regress"},
      {":regress", R"({"examples": [{"user": 1, "item": 1}], "signature_name": "nope"})", 400,
       "unknown signature 'nope'"},
      {":regress",
       R"({"examples": [{"user": 1, "item": 1}, {"user": 1, "item": 1},)"
       R"( {"user": 1, "item": 1}]})",
       413, "the request has 3 examples; this server takes at most 2 per request"},
  };
  const auto service = RecsysService(PredictLimits{2});
  for (const Case& c : cases) {
    CAPTURE(std::string(c.path));
    CAPTURE(std::string(c.body));
    const HttpReply reply =
        service->Handle("POST", absl::StrCat("/v1/models/recsys", c.path), c.body);
    CHECK(reply.status == c.status);
    CHECK_MESSAGE(ErrorOf(reply).find(c.message) != std::string::npos, ErrorOf(reply));
    CHECK(Body(reply).size() == 1);
  }

  // A softmax model classifies but does not regress.
  auto mlp = ModelService::Create(*Predictor::Create(testing::OnesMlpModel()), "mlp");
  REQUIRE(mlp.ok());
  const HttpReply classes =
      (*mlp)->Handle("POST", "/v1/models/mlp:classify", R"({"examples": [{"pixels": [1, 2, 3]}]})");
  REQUIRE_MESSAGE(classes.status == 200, classes.body);
  CHECK(Body(classes)["results"][0].size() == 2);
  CHECK(Body(classes)["results"][0][1][1].get<float>() == doctest::Approx(0.5f));
  const HttpReply regress =
      (*mlp)->Handle("POST", "/v1/models/mlp:regress", R"({"examples": [{"pixels": [1, 2, 3]}]})");
  CHECK(regress.status == 400);
  CHECK(ErrorOf(regress) ==
        ":regress needs a regress signature; this model has none: only classifiers do (a sigmoid "
        "or softmax output over their loss's logits)");
}

TEST_CASE("metadata shows each signature's method and its string outputs") {
  const auto service = RecsysService();
  const Json defs = Body(service->Handle("GET", "/v1/models/recsys/metadata",
                                         ""))["metadata"]["signature_def"]["signature_def"];
  CHECK(defs["serving_default"]["method_name"] == "tensorflow/serving/predict");
  CHECK(defs["classification"]["method_name"] == "tensorflow/serving/classify");
  CHECK(defs["classification"]["outputs"]["classes"]["dtype"] == "DT_STRING");
  CHECK(defs["classification"]["outputs"]["scores"]["dtype"] == "DT_FLOAT");
  CHECK(defs["regression"]["method_name"] == "tensorflow/serving/regress");
  CHECK(defs["regression"]["outputs"]["outputs"]["tensor_shape"]["dim"][1]["size"] == "1");
}

std::shared_ptr<const ServedVersion> Version(int64_t number, ExportedModel model) {
  auto version = ServedVersion::Create(*Predictor::Create(std::move(model)), number);
  REQUIRE(version.ok());
  return *version;
}

TEST_CASE("several models and versions: the newest by default, /versions/N for another") {
  ExportedModel other = TinyRecsysModel();
  other.variables.at("item_embedding").data()[0] += 1.0f;  // version 2 predicts differently
  auto registry = std::make_shared<ModelRegistry>();
  registry->Set({"a",
                 {{1, Version(1, TinyRecsysModel())}, {2, Version(2, other)}},
                 {{1, VersionState::kAvailable, absl::OkStatus()},
                  {2, VersionState::kAvailable, absl::OkStatus()},
                  {3, VersionState::kEnd, absl::DataLossError("model.tsr is corrupt")}}});
  registry->Set({"b", {}, {}});
  const ModelService service(registry);

  const std::string body = R"({"instances": [{"user": 0, "item": 0}]})";
  const HttpReply newest = service.Handle("POST", "/v1/models/a:predict", body);
  const HttpReply two = service.Handle("POST", "/v1/models/a/versions/2:predict", body);
  const HttpReply one = service.Handle("POST", "/v1/models/a/versions/1:predict", body);
  REQUIRE(newest.status == 200);
  CHECK(newest.body == two.body);
  REQUIRE(one.status == 200);
  CHECK(one.body != two.body);
  CHECK(Body(one)["predictions"][0]["probability"][0].get<float>() == Probabilities({{0, 0}})[0]);

  const HttpReply three = service.Handle("POST", "/v1/models/a/versions/3:predict", body);
  CHECK(three.status == 404);
  CHECK(ErrorOf(three) == "model 'a' has no version '3' available; it serves versions 1, 2");
  CHECK(Body(service.Handle("GET", "/v1/models/a/versions/1/metadata",
                            ""))["model_spec"]["version"] == "1");
  CHECK(Body(service.Handle("GET", "/v1/models/a/metadata", ""))["model_spec"]["version"] == "2");

  CHECK(Body(service.Handle("GET", "/v1/models/a", "")) == Json::parse(R"({"model_version_status": [
      {"version": "1", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
      {"version": "2", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}},
      {"version": "3", "state": "END",
       "status": {"error_code": "DATA_LOSS", "error_message": "model.tsr is corrupt"}}]})"));
  CHECK(Body(service.Handle("GET", "/v1/models/a/versions/3", ""))["model_version_status"].size() ==
        1);
  CHECK(service.Handle("GET", "/v1/models/a/versions/4", "").status == 404);

  // A model with no version yet: its status is empty, its predictions 404.
  CHECK(Body(service.Handle("GET", "/v1/models/b", "")) ==
        Json::parse(R"({"model_version_status": []})"));
  const HttpReply none = service.Handle("POST", "/v1/models/b:predict", body);
  CHECK(none.status == 404);
  CHECK(ErrorOf(none) == "model 'b' has no version available yet (its status: GET /v1/models/b)");
  CHECK(ErrorOf(service.Handle("GET", "/v1/models/c", "")) ==
        "model 'c' not found; this server serves 'a', 'b'");
  CHECK(ErrorOf(service.Handle("GET", "/v2", "")) ==
        "no resource '/v2'; this server answers under /v1/models/ (models 'a', 'b')");
}

TEST_CASE("mangled classify, regress and columnar bodies always get 200 or a 400 JSON error") {
  const auto service = RecsysService();
  const std::vector<std::pair<std::string, std::string>> valid = {
      {"/v1/models/recsys:classify",
       R"({"context": {"user": [1]}, "examples": [{"item": 2}, {"item": [0]}],)"
       R"( "signature_name": "classification"})"},
      {"/v1/models/recsys:regress",
       R"({"examples": [{"user": 1, "item": 2}, {"user": 4, "item": 0}]})"},
      {"/v1/models/recsys:predict",
       R"({"inputs": {"user": [1, 4], "item": [2, 0]}, "signature_name": "classification"})"},
  };
  std::mt19937 random(3);
  const std::string alphabet = "{}[]\":,0123456789-.eE truefalsnuser item context examples\\u";
  int ok = 0;
  for (int trial = 0; trial < 4500; ++trial) {
    const auto& [path, original] = valid[trial % valid.size()];
    const std::string body = Mangle(original, 1 + static_cast<int>(random() % 4), random, alphabet);
    CAPTURE(body);
    const HttpReply reply = service->Handle("POST", path, body);
    REQUIRE((reply.status == 200 || reply.status == 400));
    auto json = ParseJson(reply.body);
    REQUIRE(json.ok());
    if (reply.status == 200) {
      ++ok;
      CHECK((json->contains("results") || json->contains("outputs")));
    } else {
      CHECK((*json)["error"].is_string());
    }
  }
  CHECK(ok > 0);
}

}  // namespace
}  // namespace tessera::serving
