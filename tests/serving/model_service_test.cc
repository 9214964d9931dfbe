#include "serving/model_service.h"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "serving/json.h"
#include "tests/cli/cli_test_util.h"
#include "tests/mangle.h"

namespace tessera::serving {
namespace {

using testing::TinyRecsysModel;
using testing::TinyRecsysPredictor;

std::unique_ptr<ModelService> RecsysService() {
  auto service = ModelService::Create(TinyRecsysPredictor(), "recsys");
  REQUIRE(service.ok());
  return std::move(*service);
}

Json Body(const HttpReply& reply) {
  auto json = ParseJson(reply.body);
  REQUIRE_MESSAGE(json.ok(), reply.body);
  return *json;
}

TEST_CASE("predict answers TF Serving's row format with the predictor's values") {
  const auto service = RecsysService();
  const HttpReply reply = service->Handle(
      "POST", "/v1/models/recsys:predict",
      R"({"instances": [{"user": 0, "item": 3}, {"user": 4, "item": 1}, {"user": 0, "item": 3}]})");
  REQUIRE(reply.status == 200);
  const Json body = Body(reply);
  REQUIRE(body.contains("predictions"));
  const Json& predictions = body["predictions"];
  REQUIRE(predictions.size() == 3);

  Batch batch;
  batch.size = 3;
  batch.ids["user"] = {0, 4, 0};
  batch.ids["item"] = {3, 1, 3};
  auto want = TinyRecsysPredictor()->Predict(batch);
  REQUIRE(want.ok());
  for (int b = 0; b < 3; ++b) {
    for (const char* output : {"logits", "probability"}) {
      CAPTURE(b);
      CAPTURE(output);
      REQUIRE(predictions[b][output].size() == 1);
      CHECK(predictions[b][output][0].get<float>() == want->at(output).row(b)[0]);
    }
  }
  CHECK(predictions[0] == predictions[2]);
}

TEST_CASE("a signature with one output gives bare rows and signature_name picks it") {
  ExportedModel model = TinyRecsysModel();
  Signature scores = model.signatures[0];
  scores.name = "scores";
  scores.outputs = {scores.outputs[1]};  // probability
  model.signatures.push_back(scores);
  auto service = ModelService::Create(*Predictor::Create(model), "recsys");
  REQUIRE(service.ok());
  const HttpReply reply =
      (*service)->Handle("POST", "/v1/models/recsys/versions/42:predict",
                         R"({"signature_name": "scores", "instances": [{"user": 1, "item": 2}]})");
  REQUIRE(reply.status == 200);
  const Json body = Body(reply);
  REQUIRE(body["predictions"].size() == 1);
  CHECK(body["predictions"][0].is_array());
  CHECK(body["predictions"][0].size() == 1);
}

TEST_CASE("status and metadata follow TF Serving's shapes") {
  const auto service = RecsysService();
  const HttpReply status = service->Handle("GET", "/v1/models/recsys", "");
  REQUIRE(status.status == 200);
  CHECK(Body(status) == Json::parse(R"({"model_version_status": [{"version": "42",
      "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}]})"));
  CHECK(service->Handle("GET", "/v1/models/recsys/versions/42", "").status == 200);

  const HttpReply metadata = service->Handle("GET", "/v1/models/recsys/metadata", "");
  REQUIRE(metadata.status == 200);
  const Json body = Body(metadata);
  CHECK(body["model_spec"]["name"] == "recsys");
  CHECK(body["model_spec"]["version"] == "42");
  const Json& def = body["metadata"]["signature_def"]["signature_def"]["serving_default"];
  CHECK(def["method_name"] == "tensorflow/serving/predict");
  CHECK(def["inputs"]["user"]["dtype"] == "DT_INT64");
  CHECK(def["inputs"]["user"]["tensor_shape"]["dim"][0]["size"] == "-1");
  CHECK(def["outputs"]["probability"]["dtype"] == "DT_FLOAT");
  CHECK(def["outputs"]["probability"]["tensor_shape"]["dim"].size() == 2);
  CHECK(def["outputs"]["probability"]["tensor_shape"]["dim"][1]["size"] == "1");
}

TEST_CASE("bad requests get a 4xx JSON error saying what is wrong") {
  struct Case {
    const char* method;
    const char* path;
    const char* body;
    int status;
    const char* message;
  };
  const char* kPredict = "/v1/models/recsys:predict";
  const std::vector<Case> cases = {
      {"POST", kPredict, "{\"instances\": [", 400, "malformed JSON"},
      {"POST", kPredict, "", 400, "malformed JSON"},
      {"POST", kPredict, "[]", 400,
       "must be a JSON object with \"instances\" or \"inputs\", got an array"},
      {"POST", kPredict, "{}", 400, "no \"instances\""},
      {"POST", kPredict, R"({"instances": []})", 400, "non-empty array, got an empty array"},
      {"POST", kPredict, R"({"instances": {"user": 1}})", 400, "non-empty array, got an object"},
      {"POST", kPredict, R"({"inputs": {"user": [1]}})", 400, "\"inputs\" has no input 'item'"},
      {"POST", kPredict, R"({"inputs": {"user": [1], "item": [1, 2]}})", 400,
       "\"inputs\": input 'item' has 2 values, input 'user' has 1"},
      {"POST", kPredict, R"({"inputs": {"user": [1], "item": [1]}, "instances": [1]})", 400,
       "either \"instances\" (rows) or \"inputs\" (columns), not both"},
      {"POST", kPredict, R"({"instance": []})", 400, "unknown field \"instance\""},
      {"POST", kPredict, R"({"instances": [{"user": 1, "item": 1}], "signature_name": "x"})", 400,
       "unknown signature 'x'; the model's signatures are classification, regression, "
       "serving_default"},
      {"POST", kPredict, R"({"instances": [{"user": 1, "item": 1}], "signature_name": 3})", 400,
       "\"signature_name\" must be a string"},
      {"POST", kPredict, R"({"instances": [{"user": 1, "item": 1}, {"user": 1}]})", 400,
       "instance 1: missing input 'item'"},
      {"POST", kPredict, R"({"instances": [{"user": 1, "item": 1, "age": 30}]})", 400,
       "instance 0: unknown input 'age'"},
      {"POST", kPredict, R"({"instances": [{"user": 1, "item": [1, 2]}]})", 400,
       "instance 0: input 'item' must be an integer id, got an array"},
      {"POST", kPredict, R"({"instances": [{"user": 9, "item": 1}]})", 400,
       "instance 0: input 'user': id 9 is out of range [0, 5)"},
      {"POST", kPredict, R"({"instances": [7]})", 400, "must be an object mapping the inputs"},
      {"POST", "/v1/models/other:predict", R"({"instances": [{"user": 1, "item": 1}]})", 404,
       "model 'other' not found; this server serves 'recsys'"},
      {"GET", "/v1/models/other", "", 404, "model 'other' not found"},
      {"GET", "/v1/models/recsys/versions/7", "", 404, "no version '7'; it serves version 42"},
      {"POST", "/v1/models/recsys/versions/7:predict", "{}", 404, "no version '7'"},
      {"POST", "/v1/models/recsys:explain", "{}", 404, "answers :predict, :classify, :regress"},
      {"POST", "/v1/models/recsys/versions/42:predict/x", "{}", 404, "no version '42:predict'"},
      {"POST", "/v1/models/recsys/versions/42/x:predict", "{}", 404, "no resource"},
      {"GET", "/v1/models/recsys/labels/stable", "", 404, "version labels are not supported"},
      {"GET", "/v1/models/recsys/versions/x", "", 404, "no version 'x'; it serves version 42"},
      {"POST", "/v1/models/recsys:classify", "{}", 400, "the request has no \"examples\""},
      {"POST", "/v1/models/recsys:regress", R"({"examples": []})", 400,
       "\"examples\" must be a non-empty array, got an empty array"},
      {"GET", "/v1/models/recsys:classify", "", 405, "use POST"},
      {"GET", "/v2/models/recsys", "", 404, "no resource '/v2/models/recsys'"},
      {"GET", "/v1/models/", "", 404, "model '' not found"},
      {"GET", kPredict, "", 405,
       "method GET is not allowed on /v1/models/recsys:predict; use POST"},
      {"PUT", kPredict, "{}", 405, "use POST"},
      {"POST", "/v1/models/recsys", "{}", 405, "use GET"},
      {"DELETE", "/v1/models/recsys/metadata", "", 405, "use GET"},
  };
  const auto service = RecsysService();
  for (const Case& c : cases) {
    CAPTURE(c.method);
    CAPTURE(c.path);
    CAPTURE(c.body);
    const HttpReply reply = service->Handle(c.method, c.path, c.body);
    CHECK(reply.status == c.status);
    const Json body = Body(reply);
    REQUIRE(body.contains("error"));
    const std::string error = body["error"].get<std::string>();
    CHECK_MESSAGE(error.find(c.message) != std::string::npos, error);
    CHECK(reply.allow ==
          (c.status == 405 ? (std::string(c.path).find(':') != std::string::npos ? "POST" : "GET")
                           : ""));
  }
}

TEST_CASE("mangled predict bodies always get 200 or a 400 JSON error") {
  const auto service = RecsysService();
  const std::string valid =
      R"({"instances": [{"user": 1, "item": 2}, {"user": 4, "item": 0}], "signature_name": )"
      R"("serving_default"})";
  std::mt19937 random(7);
  const std::string alphabet = "{}[]\":,0123456789-.eE truefalsnuser item\\u";
  int ok = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string body = Mangle(valid, 1 + static_cast<int>(random() % 4), random, alphabet);
    CAPTURE(body);
    const HttpReply reply = service->Handle("POST", "/v1/models/recsys:predict", body);
    REQUIRE((reply.status == 200 || reply.status == 400));
    auto json = ParseJson(reply.body);
    REQUIRE(json.ok());
    if (reply.status == 200) {
      ++ok;
      CHECK(json->contains("predictions"));
    } else {
      CHECK((*json)["error"].is_string());
    }
  }
  CHECK(ok > 0);
}

TEST_CASE("more instances than the service takes is a 413 JSON error") {
  auto service = ModelService::Create(TinyRecsysPredictor(), "recsys", PredictLimits{2});
  REQUIRE(service.ok());
  const std::string two = R"({"user": 1, "item": 2}, {"user": 3, "item": 0})";
  CHECK((*service)
            ->Handle("POST", "/v1/models/recsys:predict", "{\"instances\": [" + two + "]}")
            .status == 200);
  const HttpReply reply =
      (*service)->Handle("POST", "/v1/models/recsys:predict",
                         "{\"instances\": [" + two + R"(, {"user": 0, "item": 0}]})");
  CHECK(reply.status == 413);
  CHECK(Body(reply)["error"] ==
        "the request has 3 instances; this server takes at most 2 per request");
}

TEST_CASE("predictions of many instances, made a batch at a time, are those of one batch") {
  const auto service = RecsysService();
  std::string request = "{\"instances\": [";
  Batch batch;
  const int64_t n = 2 * kInstancesPerBatch + 7;
  for (int64_t i = 0; i < n; ++i) {
    absl::StrAppend(&request, i == 0 ? "" : ",", "{\"user\": ", i % 5, ", \"item\": ", i % 4, "}");
    batch.ids["user"].push_back(i % 5);
    batch.ids["item"].push_back(i % 4);
  }
  request += "]}";
  batch.size = n;
  const HttpReply reply = service->Handle("POST", "/v1/models/recsys:predict", request);
  REQUIRE(reply.status == 200);
  const Json predictions = Body(reply)["predictions"];
  REQUIRE(static_cast<int64_t>(predictions.size()) == n);
  auto want = TinyRecsysPredictor()->Predict(batch);
  REQUIRE(want.ok());
  for (int64_t b = 0; b < n; ++b) {
    REQUIRE(predictions[b]["probability"][0].get<float>() == want->at("probability").row(b)[0]);
  }
}

TEST_CASE("a model name must be usable in a URL") {
  for (const char* name : {"", "a/b", "a:b"}) {
    CAPTURE(name);
    CHECK(ModelService::Create(TinyRecsysPredictor(), name).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("a model whose signature does not match it cannot be served") {
  ExportedModel model = TinyRecsysModel();
  model.signatures[0].inputs[0].name = "age";
  auto service = ModelService::Create(*Predictor::Create(model), "recsys");
  CHECK(service.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(service.status().message()).find("'age'") != std::string::npos);
}

TEST_CASE("an input that drives an output to infinity gets a 400 naming the output") {
  auto predictor = Predictor::Create(testing::OnesMlpModel());
  REQUIRE(predictor.ok());
  auto service = ModelService::Create(std::move(*predictor), "mlp");
  REQUIRE(service.ok());
  const HttpReply fine =
      (*service)->Handle("POST", "/v1/models/mlp:predict", R"({"instances": [[1, 2, 3]]})");
  CHECK(fine.status == 200);
  // 3e38 is a float32, but three of them summed by the hidden layer are not.
  const HttpReply overflow = (*service)->Handle(
      "POST", "/v1/models/mlp:predict", R"({"instances": [[1, 2, 3], [3e38, 3e38, 3e38]]})");
  CHECK(overflow.status == 400);
  const std::string error = Body(overflow)["error"].get<std::string>();
  CHECK_MESSAGE(error.find("output 'logits' of example 1 is not finite") != std::string::npos,
                error);
  CHECK(Body(overflow).size() == 1);  // TF Serving's {"error": ...}, no predictions
  // A number beyond float32 never reaches the model (the parser's floats are float32).
  const HttpReply beyond =
      (*service)->Handle("POST", "/v1/models/mlp:predict", R"({"instances": [[1, 2, 1e39]]})");
  CHECK(beyond.status == 400);
  CHECK(Body(beyond)["error"].get<std::string>() ==
        "malformed JSON: number overflow parsing '1e39'");
}

}  // namespace
}  // namespace tessera::serving
