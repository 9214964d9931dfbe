// `tessera serve` as a child process serving base paths of numbered versions and model config
// files: versions appearing, half-written and disappearing while it serves, several models, the
// request log, and JSON bodies whatever their Content-Type.
#include <doctest/doctest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"
#include "serving/json.h"
#include "tests/cli/cli_test_util.h"
#include "tests/cli/tessera_child.h"
// Last: see Note [httplib after Eigen] in tests/cli/cli_test_util.h.
#include <httplib.h>

#ifdef TESSERA_BINARY

namespace tessera::cli {

using serving::Json;
using serving::ParseJson;
namespace {

namespace fs = std::filesystem;
using testing::Child;
using testing::Finished;
using testing::Has;
using testing::PollUntil;
using testing::ReadFile;
using testing::RunTessera;
using testing::TempDir;
using testing::TinyRecsysModel;
using testing::WaitForPort;

ExportedModel VersionModel(int64_t version) {
  ExportedModel model = TinyRecsysModel();
  model.variables.at("item_embedding").data()[0] += static_cast<float>(version);
  return model;
}

// An export into base/version the way exports are written (the directory, then the file whole).
void Export(const std::string& base, int64_t version) {
  const std::string dir = absl::StrCat(base, "/", version);
  fs::create_directories(dir);
  REQUIRE(WriteExportedModel(dir, VersionModel(version)).ok());
}

float Want(int64_t version) {
  Batch batch;
  batch.size = 1;
  batch.ids["user"] = {0};
  batch.ids["item"] = {0};
  return (*Predictor::Create(VersionModel(version)))->Predict(batch)->at("probability").row(0)[0];
}

Json Get(httplib::Client& client, const std::string& path) {
  auto result = client.Get(path.c_str());
  REQUIRE(result);
  auto body = ParseJson(result->body);
  REQUIRE_MESSAGE(body.ok(), result->body);
  return *body;
}

float Probability(httplib::Client& client, const std::string& path) {
  auto result =
      client.Post(path.c_str(), R"({"instances": [{"user": 0, "item": 0}]})", "application/json");
  REQUIRE(result);
  REQUIRE_MESSAGE(result->status == 200, result->body);
  return (*ParseJson(result->body))["predictions"][0]["probability"][0].get<float>();
}

// "v:STATE" of each version in the model's status.
std::string States(httplib::Client& client, const std::string& model) {
  std::vector<std::string> states;
  const Json status = Get(client, "/v1/models/" + model);
  for (const Json& s : status["model_version_status"]) {
    states.push_back(
        absl::StrCat(s["version"].get<std::string>(), ":", s["state"].get<std::string>()));
  }
  return absl::StrJoin(states, " ");
}

// Waits (up to 15 s: polls are 1 s apart) until the model's status reads `want`.
bool WaitForStates(httplib::Client& client, const std::string& model, const std::string& want) {
  return PollUntil([&] { return States(client, model) == want; }, absl::Seconds(15),
                   absl::Milliseconds(100));  // each check is a request to the child
}

TEST_CASE(
    "serve a base path: new versions picked up, half-written ones ignored, removed unloaded") {
  TempDir dir;
  const std::string base = dir.MakeSub("recsys");
  Export(base, 1);
  const std::string log = dir.Sub("requests.log");
  Child child(dir,
              {"serve", "--model_base_path", base, "--port", "0", "--file_system_poll_wait_seconds",
               "1", "--request_log", log},
              "/dev/null");
  const int port = WaitForPort(child);
  REQUIRE_MESSAGE(port > 0, std::string(child.out() + child.err()));
  CHECK(Has(child.out(), "model 'recsys' version 1 at http://127.0.0.1:"));
  httplib::Client client("127.0.0.1", port);
  CHECK(States(client, "recsys") == "1:AVAILABLE");
  CHECK(Probability(client, "/v1/models/recsys:predict") == Want(1));

  // A new version, while serving.
  Export(base, 2);
  REQUIRE(WaitForStates(client, "recsys", "1:END 2:AVAILABLE"));
  CHECK(Probability(client, "/v1/models/recsys:predict") == Want(2));
  CHECK(Probability(client, "/v1/models/recsys/versions/2:predict") == Want(2));
  auto old = client.Post("/v1/models/recsys/versions/1:predict",
                         R"({"instances": [{"user": 0, "item": 0}]})", "application/json");
  REQUIRE(old);
  CHECK(old->status == 404);

  // Half-written: the directory and a temporary file, over several polls.
  fs::create_directories(base + "/3");
  std::ofstream(base + "/3/model.tsr.tmp-9-0") << "partial";
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  CHECK(States(client, "recsys") == "1:END 2:AVAILABLE");
  CHECK(Probability(client, "/v1/models/recsys:predict") == Want(2));

  // The newest removed: unloaded, and the one before it served again.
  fs::remove_all(base + "/3");
  fs::remove_all(base + "/2");
  REQUIRE(WaitForStates(client, "recsys", "1:AVAILABLE 2:END"));
  CHECK(Probability(client, "/v1/models/recsys:predict") == Want(1));

  child.Signal(SIGTERM);
  CHECK(child.Wait() == 0);
  CHECK(Has(child.err(), "model 'recsys': version 2 available"));
  CHECK(Has(child.err(), "model 'recsys': version 2 unloaded (removed from disk)"));
  // Every request is a line of the log: the status polls, the predictions, the 404.
  const std::string lines = ReadFile(log);
  CHECK(Has(lines, " GET /v1/models/recsys 200 0 "));
  CHECK(Has(lines, " POST /v1/models/recsys:predict 200 39 "));
  CHECK(Has(lines, " POST /v1/models/recsys/versions/1:predict 404 39 "));
}

TEST_CASE("serve a model config file: several models, each from its base path") {
  TempDir dir;
  const std::string a = dir.MakeSub("a");
  const std::string b = dir.MakeSub("b");
  Export(a, 1);
  Export(b, 3);
  Export(b, 4);
  const std::string config = dir.Sub("models.config");
  std::ofstream(config) << "model_config_list {\n"
                        << "  config { name: 'first' base_path: '" << a
                        << "' model_platform: 'tensorflow' }\n"
                        << "  config { name: \"second\" base_path: \"" << b << "\"\n"
                        << "           model_version_policy { all {} } }\n"
                        << "}\n";
  Child child(dir, {"serve", "--model_config_file", config, "--port", "0", "--request_log", "off"},
              "/dev/null");
  const int port = WaitForPort(child);
  REQUIRE_MESSAGE(port > 0, std::string(child.out() + child.err()));
  CHECK(Has(child.out(), "model 'first' version 1 at http://127.0.0.1:"));
  CHECK(Has(child.out(), "model 'second' versions 3, 4 at http://127.0.0.1:"));
  httplib::Client client("127.0.0.1", port);
  CHECK(Probability(client, "/v1/models/first:predict") == Want(1));
  CHECK(Probability(client, "/v1/models/second:predict") == Want(4));
  CHECK(Probability(client, "/v1/models/second/versions/3:predict") == Want(3));
  CHECK(States(client, "second") == "3:AVAILABLE 4:AVAILABLE");
  child.Signal(SIGINT);
  CHECK(child.Wait() == 0);
  CHECK(!Has(child.err(), "POST"));  // --request_log off
}

TEST_CASE("a JSON body is JSON whatever its Content-Type, a form's included, past 8 KiB") {
  TempDir dir;
  const std::string model_dir = dir.MakeSub("export");
  REQUIRE(WriteExportedModel(model_dir, TinyRecsysModel()).ok());
  Child child(dir, {"serve", "--model", model_dir, "--port", "0"}, "/dev/null");
  const int port = WaitForPort(child);
  REQUIRE(port > 0);
  std::string body = R"({"instances": [)";
  for (int i = 0; i < 1000; ++i)
    absl::StrAppend(&body, i == 0 ? "" : ",", R"({"user": 1, "item": 2})");
  body += "]}";
  REQUIRE(body.size() > 20'000);
  httplib::Client client("127.0.0.1", port);
  // What `curl -d` sends.
  for (const char* type : {"application/x-www-form-urlencoded", "text/plain", ""}) {
    CAPTURE(type);
    auto result = client.Post("/v1/models/recsys:predict", body, type);
    REQUIRE(result);
    CHECK(result->status == 200);
    auto json = ParseJson(result->body);
    REQUIRE(json.ok());
    CHECK((*json)["predictions"].size() == 1000);
  }
  // The only size bound is --max_body_bytes (64 MiB), for every Content-Type.
  child.Signal(SIGTERM);
  CHECK(child.Wait() == 0);
  Child small(dir, {"serve", "--model", model_dir, "--port", "0", "--max_body_bytes", "10000"},
              "/dev/null");
  const int small_port = WaitForPort(small);
  REQUIRE(small_port > 0);
  httplib::Client small_client("127.0.0.1", small_port);
  auto refused =
      small_client.Post("/v1/models/recsys:predict", body, "application/x-www-form-urlencoded");
  REQUIRE(refused);
  CHECK(refused->status == 413);
  CHECK(Has(refused->body, "\"error\""));
  small.Signal(SIGTERM);
  CHECK(small.Wait() == 0);
}

TEST_CASE("serve refuses a bad choice of models, naming the flag or the file") {
  TempDir dir;
  const std::string base = dir.MakeSub("m");
  Export(base, 1);
  const std::string config = dir.Sub("bad.config");
  std::ofstream(config) << "model_config_list { config { name: 'a' base_path: '/x' colour: 1 } }";
  struct Case {
    std::vector<std::string> args;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{"serve"}, "needs --model (an export), --model_base_path (numbered versions) or"},
      {{"serve", "--model", base + "/1", "--model_base_path", base}, "takes one of --model"},
      {{"serve", "--model_base_path", dir.Sub("none")}, "model 'none': cannot list its base path"},
      {{"serve", "--model_config_file", config}, config + " line 1: unknown field 'colour'"},
      {{"serve", "--model_config_file", dir.Sub("none.config")}, "cannot read the model config"},
      {{"serve", "--model_config_file", config, "--name", "x"}, "a --model_config_file names"},
      {{"serve", "--model_base_path", base, "--file_system_poll_wait_seconds", "-1"},
       "--file_system_poll_wait_seconds must be at least 0"},
      {{"serve", "--model_base_path", "/"}, "give --name"},
  };
  for (const Case& c : cases) {
    CAPTURE(absl::StrJoin(c.args, " "));
    const Finished run = RunTessera(dir, c.args);
    CHECK(run.code == 2);
    CHECK_MESSAGE(Has(run.err, c.error), run.err);
  }
}

}  // namespace
}  // namespace tessera::cli

#endif  // TESSERA_BINARY
