#include "serving/model_server.h"

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "schema/serving/model_io.h"
#include "serving/json.h"
#include "serving/load_predictor.h"
#include "serving/model_service.h"
#include "tests/cli/cli_test_util.h"
// Last: see Note [httplib after Eigen] in tests/cli/cli_test_util.h.
#include <httplib.h>

namespace tessera::serving {
namespace {

using testing::TempDir;
using testing::TinyRecsysModel;

// A ModelServer on a free loopback port, serving on its own thread for the test's duration.
class RunningServer {
 public:
  explicit RunningServer(const ModelService& service) : server_(service) {
    auto port = server_.Bind("127.0.0.1", 0);
    REQUIRE(port.ok());
    port_ = *port;
    thread_ = std::thread([this] { status_ = server_.Run(); });
  }
  ~RunningServer() { Shutdown().IgnoreError(); }

  int port() const { return port_; }
  absl::Status Shutdown() {
    if (thread_.joinable()) {
      server_.Stop();
      thread_.join();
    }
    return status_;
  }

 private:
  ModelServer server_;
  int port_ = 0;
  std::thread thread_;
  absl::Status status_;
};

Json Parse(const std::string& text) {
  auto json = ParseJson(text);
  REQUIRE_MESSAGE(json.ok(), text);
  return *json;
}

std::string Error(const httplib::Result& result) {
  return Parse(result->body)["error"].get<std::string>();
}

TEST_CASE("an exported model served over HTTP predicts what its Predictor predicts") {
  // Export to files and load back, as `tessera serve` does.
  TempDir dir;
  REQUIRE(WriteExportedModel(dir.path(), TinyRecsysModel()).ok());
  auto loaded = LoadPredictor(dir.path());
  REQUIRE_MESSAGE(loaded.ok(), loaded.status().message());
  auto reference = LoadPredictor(dir.path());
  REQUIRE(reference.ok());
  auto service = ModelService::Create(std::move(*loaded), "recsys");
  REQUIRE(service.ok());
  RunningServer server(**service);

  httplib::Client client("127.0.0.1", server.port());
  Json request = {{"instances", Json::array()}};
  Batch batch;
  for (int64_t u = 0; u < 5; ++u) {
    for (int64_t i = 0; i < 4; ++i) {
      request["instances"].push_back({{"user", u}, {"item", i}});
      batch.ids["user"].push_back(u);
      batch.ids["item"].push_back(i);
    }
  }
  batch.size = 20;
  auto result = client.Post("/v1/models/recsys:predict", DumpJson(request), "application/json");
  REQUIRE(result);
  CHECK(result->status == 200);
  CHECK(result->get_header_value("Content-Type") == "application/json");
  const Json predictions = Parse(result->body)["predictions"];
  REQUIRE(predictions.size() == 20);
  auto want = (*reference)->Predict(batch);
  REQUIRE(want.ok());
  for (int b = 0; b < 20; ++b) {
    for (const char* output : {"logits", "probability"}) {
      CAPTURE(b);
      CAPTURE(output);
      CHECK(predictions[b][output][0].get<float>() ==
            doctest::Approx(want->at(output).row(b)[0]).epsilon(1e-5));
    }
  }

  auto status = client.Get("/v1/models/recsys");
  REQUIRE(status);
  CHECK(status->status == 200);
  CHECK(Parse(status->body)["model_version_status"][0]["version"] == "42");
  auto metadata = client.Get("/v1/models/recsys/metadata");
  REQUIRE(metadata);
  CHECK(metadata->status == 200);
  CHECK(Parse(metadata->body)["metadata"]["signature_def"]["signature_def"].contains(
      "serving_default"));

  CHECK(server.Shutdown().ok());
}

TEST_CASE("the server answers bad requests with 4xx JSON errors") {
  auto service = ModelService::Create(testing::TinyRecsysPredictor(), "recsys");
  REQUIRE(service.ok());
  RunningServer server(**service);
  httplib::Client client("127.0.0.1", server.port());
  const std::string predict = "/v1/models/recsys:predict";

  auto malformed = client.Post(predict, "{\"instances\": [", "application/json");
  REQUIRE(malformed);
  CHECK(malformed->status == 400);
  CHECK(Error(malformed).find("malformed JSON") != std::string::npos);

  auto missing = client.Post(predict, "{}", "application/json");
  REQUIRE(missing);
  CHECK(missing->status == 400);
  CHECK(Error(missing).find("no \"instances\"") != std::string::npos);

  auto wrong_input = client.Post(predict, R"({"instances": [{"user": 1, "item": 1, "age": 3}]})",
                                 "application/json");
  REQUIRE(wrong_input);
  CHECK(wrong_input->status == 400);
  CHECK(Error(wrong_input).find("instance 0: unknown input 'age'") != std::string::npos);

  auto wrong_shape =
      client.Post(predict, R"({"instances": [{"user": [1, 2], "item": 1}]})", "application/json");
  REQUIRE(wrong_shape);
  CHECK(wrong_shape->status == 400);
  CHECK(Error(wrong_shape).find("must be an integer id") != std::string::npos);

  auto out_of_range =
      client.Post(predict, R"({"instances": [{"user": 1, "item": 4}]})", "application/json");
  REQUIRE(out_of_range);
  CHECK(out_of_range->status == 400);
  CHECK(Error(out_of_range).find("id 4 is out of range [0, 4)") != std::string::npos);

  auto wrong_model = client.Post("/v1/models/other:predict", "{}", "application/json");
  REQUIRE(wrong_model);
  CHECK(wrong_model->status == 404);
  CHECK(Error(wrong_model).find("model 'other' not found") != std::string::npos);

  auto wrong_method = client.Get(predict);
  REQUIRE(wrong_method);
  CHECK(wrong_method->status == 405);
  CHECK(wrong_method->get_header_value("Allow") == "POST");
  auto wrong_method_put = client.Put("/v1/models/recsys", "{}", "application/json");
  REQUIRE(wrong_method_put);
  CHECK(wrong_method_put->status == 405);
  CHECK(wrong_method_put->get_header_value("Allow") == "GET");

  auto elsewhere = client.Get("/index.html");
  REQUIRE(elsewhere);
  CHECK(elsewhere->status == 404);
  CHECK(Error(elsewhere).find("no resource") != std::string::npos);

  CHECK(server.Shutdown().ok());
}

TEST_CASE("a body over the limit is refused with 413 and a JSON error") {
  auto service = ModelService::Create(testing::TinyRecsysPredictor(), "recsys");
  REQUIRE(service.ok());
  HttpServerOptions options;
  options.max_body_bytes = 64;
  ModelServer server(**service, options);
  auto port = server.Bind("127.0.0.1", 0);
  REQUIRE(port.ok());
  std::thread thread([&] { CHECK(server.Run().ok()); });
  httplib::Client client("127.0.0.1", *port);
  auto result =
      client.Post("/v1/models/recsys:predict", std::string(1000, ' '), "application/json");
  REQUIRE(result);
  CHECK(result->status == 413);
  CHECK(Error(result) == "request body of 1000 bytes is over the limit of 64 bytes");
  server.Stop();
  thread.join();
}

TEST_CASE("the metrics page counts requests by model and status, latency by API, and codes") {
  auto service = ModelService::Create(testing::TinyRecsysPredictor(), "recsys");
  REQUIRE(service.ok());
  HttpServerOptions options;
  options.max_body_bytes = 256;
  ModelServer server(**service, options);
  auto port = server.Bind("127.0.0.1", 0);
  REQUIRE(port.ok());
  std::thread thread([&] { CHECK(server.Run().ok()); });
  httplib::Client client("127.0.0.1", *port);
  const std::string good = R"({"instances": [{"user": 1, "item": 2}]})";
  for (int i = 0; i < 3; ++i) {
    auto result = client.Post("/v1/models/recsys:predict", good, "application/json");
    REQUIRE(result);
    CHECK(result->status == 200);
  }
  CHECK(client.Post("/v1/models/recsys:predict", "{", "application/json")->status == 400);
  CHECK(client.Get("/v1/models/recsys/metadata")->status == 200);
  // Made-up model names are not labels (a client cannot grow the page); they count as 404s.
  for (int i = 0; i < 5; ++i) {
    CHECK(client.Get(absl::StrCat("/v1/models/made_up_", i))->status == 404);
  }
  CHECK(client.Post("/v1/models/recsys:predict", std::string(1000, ' '), "application/json")
            ->status == 413);  // the HTTP server's own answer

  auto page = client.Get(ServingMetrics::kPath);
  REQUIRE(page);
  CHECK(page->status == 200);
  CHECK(absl::StartsWith(page->get_header_value("Content-Type"), "text/plain; version=0.0.4"));
  const std::string& text = page->body;
  CAPTURE(text);
  CHECK(absl::StrContains(
      text, ":tensorflow:serving:request_count{model_name=\"recsys\",status=\"OK\"} 4\n"));
  CHECK(absl::StrContains(
      text,
      ":tensorflow:serving:request_count{model_name=\"recsys\",status=\"INVALID_ARGUMENT\"} 1\n"));
  CHECK(absl::StrContains(text,
                          ":tensorflow:serving:request_latency_count{model_name=\"recsys\",API="
                          "\"predict\",entrypoint=\"REST\"} 4\n"));
  CHECK(absl::StrContains(text,
                          ":tensorflow:serving:request_latency_count{model_name=\"recsys\",API="
                          "\"metadata\",entrypoint=\"REST\"} 1\n"));
  CHECK_FALSE(absl::StrContains(text, "made_up"));
  CHECK(absl::StrContains(text, "tessera_serving_http_responses_total{code=\"200\"} 4\n"));
  CHECK(absl::StrContains(text, "tessera_serving_http_responses_total{code=\"404\"} 5\n"));
  CHECK(absl::StrContains(text, "tessera_serving_http_responses_total{code=\"413\"} 1\n"));
  CHECK(absl::StrContains(
      text, "tessera_serving_model_versions{model_name=\"recsys\",state=\"available\"} 1\n"));
  CHECK(absl::StrContains(text, "tessera_serving_newest_version{model_name=\"recsys\"} 42\n"));
  CHECK(absl::StrContains(text, "\nprocess_resident_memory_bytes "));

  // The page itself is read with GET only, and counts as an answer.
  auto post = client.Post(ServingMetrics::kPath, "", "text/plain");
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK(post->get_header_value("Allow") == "GET");
  CHECK(absl::StrContains(client.Get(ServingMetrics::kPath)->body,
                          "tessera_serving_http_responses_total{code=\"200\"} 5\n"));
  server.Stop();
  thread.join();
}

TEST_CASE("concurrent clients all get their own predictions") {
  auto service = ModelService::Create(testing::TinyRecsysPredictor(), "recsys");
  REQUIRE(service.ok());
  RunningServer server(**service);
  std::vector<std::string> bodies(8);
  std::vector<std::thread> clients;
  for (int c = 0; c < 8; ++c) {
    clients.emplace_back([&, c] {
      httplib::Client client("127.0.0.1", server.port());
      for (int r = 0; r < 10; ++r) {
        const std::string request =
            absl::StrCat(R"({"instances": [{"user": )", c % 5, R"(, "item": )", c % 4, "}]}");
        auto result = client.Post("/v1/models/recsys:predict", request, "application/json");
        if (!result || result->status != 200) return;
        if (r == 0) bodies[c] = result->body;
        if (bodies[c] != result->body) return;  // the same request must give the same answer
      }
    });
  }
  for (std::thread& client : clients) client.join();
  for (int c = 0; c < 8; ++c) {
    CAPTURE(c);
    CHECK_FALSE(bodies[c].empty());
  }
  CHECK(bodies[0] != bodies[1]);
  CHECK(server.Shutdown().ok());
}

TEST_CASE("stopping before or while the server starts still stops it") {
  auto service = ModelService::Create(testing::TinyRecsysPredictor(), "recsys");
  REQUIRE(service.ok());
  for (int i = 0; i < 20; ++i) {
    ModelServer server(**service);
    REQUIRE(server.Bind("127.0.0.1", 0).ok());
    std::thread thread([&] { CHECK(server.Run().ok()); });
    if (i % 2 == 0) std::this_thread::yield();
    server.Stop();
    thread.join();
  }
  ModelServer unbound(**service);
  CHECK(unbound.Run().code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("binding a port already in use is Unavailable") {
  auto service = ModelService::Create(testing::TinyRecsysPredictor(), "recsys");
  REQUIRE(service.ok());
  ModelServer first(**service);
  auto port = first.Bind("127.0.0.1", 0);
  REQUIRE(port.ok());
  ModelServer second(**service);
  CHECK(second.Bind("127.0.0.1", *port).status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera::serving
