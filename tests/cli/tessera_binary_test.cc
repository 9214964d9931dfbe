// End-to-end tests of the built `tessera` binary, run as a child process: the command line, exit
// codes, stdout / stderr, and serve's shutdown on SIGINT / SIGTERM.
#include <doctest/doctest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/internal/json.h"
#include "cli/internal/predict_command.h"
#include "core/exported_model.h"
#include "schema/model_io.h"
#include "tests/cli/cli_test_util.h"
#include "tests/cli/tessera_child.h"
// Last: see Note [httplib after Eigen] in tests/cli/cli_test_util.h.
#include <httplib.h>

#ifdef TESSERA_BINARY

namespace tessera::cli {
namespace {

using testing::Child;
using testing::Finished;
using testing::Has;
using testing::ReadFile;
using testing::RunTessera;
using testing::TempDir;
using testing::TinyRecsysModel;
using testing::WaitForPort;

TEST_CASE("tessera serve answers predictions and exits cleanly on SIGTERM and SIGINT") {
  TempDir dir;
  const std::string model_dir = dir.MakeSub("export");
  REQUIRE(WriteExportedModel(model_dir, TinyRecsysModel()).ok());
  auto predictor = Predictor::Create(TinyRecsysModel());
  REQUIRE(predictor.ok());

  for (const int signal : {SIGTERM, SIGINT}) {
    CAPTURE(signal);
    Child child(dir, {"serve", "--model", model_dir, "--port", "0", "--name", "ctr"}, "/dev/null");
    const int port = WaitForPort(child);
    REQUIRE_MESSAGE(port > 0, std::string(child.out() + child.err()));
    CHECK(Has(child.out(), "model 'ctr' version 42 at http://127.0.0.1:"));

    httplib::Client client("127.0.0.1", port);
    auto result = client.Post("/v1/models/ctr:predict",
                              R"({"instances": [{"user": 2, "item": 1}, {"user": 4, "item": 3}]})",
                              "application/json");
    REQUIRE(result);
    REQUIRE(result->status == 200);
    auto body = ParseJson(result->body);
    REQUIRE(body.ok());
    Batch batch;
    batch.size = 2;
    batch.ids["user"] = {2, 4};
    batch.ids["item"] = {1, 3};
    auto want = (*predictor)->Predict(batch);
    REQUIRE(want.ok());
    for (int b = 0; b < 2; ++b) {
      CHECK((*body)["predictions"][b]["probability"][0].get<float>() ==
            doctest::Approx(want->at("probability").row(b)[0]).epsilon(1e-5));
    }
    auto wrong = client.Get("/v1/models/recsys");
    REQUIRE(wrong);
    CHECK(wrong->status == 404);

    child.Signal(signal);
    CHECK(child.Wait() == 0);
    CHECK(Has(child.out(), signal == SIGTERM ? "stopped on SIGTERM" : "stopped on SIGINT"));
  }
}

TEST_CASE("tessera serve refuses a missing model and a busy port") {
  TempDir dir;
  const Finished missing = RunTessera(dir, {"serve", "--model", dir.Sub("none"), "--port", "0"});
  CHECK(missing.code == 2);
  CHECK(Has(missing.err, "tessera serve: model '" + dir.Sub("none") + "'"));

  const std::string model_dir = dir.MakeSub("export");
  REQUIRE(WriteExportedModel(model_dir, TinyRecsysModel()).ok());
  Child first(dir, {"serve", "--model", model_dir, "--port", "0"}, "/dev/null");
  const int port = WaitForPort(first);
  REQUIRE(port > 0);
  TempDir other;
  const Finished busy =
      RunTessera(other, {"serve", "--model", model_dir, "--port", std::to_string(port)});
  CHECK(busy.code == 1);
  CHECK(Has(busy.err, "cannot listen on 127.0.0.1:" + std::to_string(port)));
  first.Signal(SIGTERM);
  CHECK(first.Wait() == 0);
}

TEST_CASE("tessera predict writes JSON lines, and exits 2 naming a bad line") {
  TempDir dir;
  const std::string model_dir = dir.MakeSub("export");
  REQUIRE(WriteExportedModel(model_dir, TinyRecsysModel()).ok());
  const std::string good = dir.Sub("good.jsonl");
  std::ofstream(good) << "{\"user\": 0, \"item\": 1}\n{\"user\": 3, \"item\": 2}\n";

  std::istringstream in(ReadFile(good));
  std::ostringstream want;
  REQUIRE(PredictJsonLines(**Predictor::Create(TinyRecsysModel()), in, want).ok());

  const Finished from_file = RunTessera(dir, {"predict", "--model", model_dir, "--input", good});
  CHECK(from_file.code == 0);
  CHECK(from_file.out == want.str());
  CHECK(from_file.err.empty());

  const Finished from_stdin =
      RunTessera(dir, {"predict", "--model", model_dir, "--input", "-"}, good);
  CHECK(from_stdin.code == 0);
  CHECK(from_stdin.out == want.str());
  CHECK(from_stdin.err.empty());  // no absl warning about the value '-'

  const std::string bad = dir.Sub("bad.jsonl");
  std::ofstream(bad) << "{\"user\": 0, \"item\": 1}\n{\"user\": 0, \"item\": 9}\n";
  const Finished failed = RunTessera(dir, {"predict", "--model", model_dir, "--input", bad});
  CHECK(failed.code == 2);
  CHECK(failed.out.empty());
  CHECK(Has(failed.err,
            "tessera predict: " + bad + ": line 2: input 'item': id 9 is out of range [0, 4)"));

  const Finished no_input = RunTessera(dir, {"predict", "--model", model_dir});
  CHECK(no_input.code == 2);
  CHECK(Has(no_input.err, "tessera predict: needs --input"));

  const std::string bad_stdin = dir.Sub("bad_stdin.jsonl");
  std::ofstream(bad_stdin) << "{\"user\": 0, \"item\": 1}\n[1, 2]\n";
  const Finished failed_stdin =
      RunTessera(dir, {"predict", "--model", model_dir, "--input", "-"}, bad_stdin);
  CHECK(failed_stdin.code == 2);
  CHECK(failed_stdin.out.empty());
  CHECK(failed_stdin.err ==
        "tessera predict: stdin: line 2: an instance must be an object "
        "mapping the inputs (user, item) to values, got an array\n");
}

// A 15 GiB sparse model.tsr whose header and message are a real export's, sized to the file.
void WriteSparseGiant(const std::string& path) {
  std::string head = *EncodeExportedModel(TinyRecsysModel());
  uint32_t tail_words = 0;
  std::memcpy(&tail_words, head.data() + 20, 4);
  const uint64_t message = head.size() - 24 - uint64_t{tail_words} * 8;
  const uint64_t size = uint64_t{15} << 30;
  const uint64_t body = size - 24;
  tail_words = static_cast<uint32_t>((body - message) / 8);
  std::memcpy(head.data() + 8, &body, 8);
  std::memcpy(head.data() + 20, &tail_words, 4);
  std::ofstream(path, std::ios::binary) << head;
  REQUIRE(::truncate(path.c_str(), static_cast<off_t>(size)) == 0);
}

TEST_CASE("tessera predict and serve refuse a FIFO, a directory or a sparse giant at once") {
  TempDir dir;
  const std::string input = dir.Sub("in.jsonl");
  std::ofstream(input) << "{\"user\": 0, \"item\": 1}\n";
  struct Case {
    std::string name;
    std::function<void(const std::string&)> make;  // makes model.tsr at the path
    std::string error;
  };
  const std::vector<Case> cases = {
      {"fifo", [](const std::string& p) { REQUIRE(::mkfifo(p.c_str(), 0644) == 0); },
       "is not a regular file"},
      {"directory", [](const std::string& p) { REQUIRE(::mkdir(p.c_str(), 0755) == 0); },
       "is not a regular file"},
      {"sparse", WriteSparseGiant, "truncated or extended"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    const std::string model_dir = dir.MakeSub(c.name);
    c.make(model_dir + "/" + kModelFile);
    // Wait's limit (30 s) turns a hang into a failure: a FIFO used to block its reader forever.
    const Finished predicted = RunTessera(dir, {"predict", "--model", model_dir, "--input", input});
    CHECK(predicted.code == 2);
    CHECK(predicted.out.empty());
    CHECK_MESSAGE(Has(predicted.err, c.error), predicted.err);
    const Finished served = RunTessera(dir, {"serve", "--model", model_dir, "--port", "0"});
    CHECK(served.code == 2);
    CHECK_MESSAGE(Has(served.err, c.error), served.err);
    const Finished inspected = RunTessera(dir, {"inspect", model_dir});
    CHECK(inspected.code == 2);
  }
}

TEST_CASE("tessera predict exits 2 naming the output when an input drives it out of range") {
  TempDir dir;
  const std::string model_dir = dir.MakeSub("export");
  REQUIRE(WriteExportedModel(model_dir, testing::OnesMlpModel()).ok());
  const std::string input = dir.Sub("in.jsonl");
  std::ofstream(input) << "{\"pixels\": [1, 2, 3]}\n{\"pixels\": [3e38, 3e38, 3e38]}\n";
  const Finished failed = RunTessera(dir, {"predict", "--model", model_dir, "--input", input});
  CHECK(failed.code == 2);
  CHECK(failed.out.empty());  // not even the first line's prediction
  CHECK_MESSAGE(Has(failed.err, "lines 1-2: output 'logits' of example 1 is not finite"),
                failed.err);
}

TEST_CASE("tessera inspect, help and bad command lines") {
  TempDir dir;
  const std::string model_dir = dir.MakeSub("export");
  REQUIRE(WriteExportedModel(model_dir, TinyRecsysModel()).ok());

  const Finished inspect = RunTessera(dir, {"inspect", model_dir});
  CHECK(inspect.code == 0);
  CHECK(Has(inspect.out, "exported model " + model_dir));
  CHECK(Has(inspect.out, "serving_default"));

  const Finished neither = RunTessera(dir, {"inspect", dir.Sub("nothing")});
  CHECK(neither.code == 2);
  CHECK(Has(neither.err, "tessera inspect: no such file or directory: " + dir.Sub("nothing")));

  const Finished help = RunTessera(dir, {"help"});
  CHECK(help.code == 0);
  CHECK(Has(help.out, "usage: tessera <command>"));

  const Finished bare = RunTessera(dir, {});
  CHECK(bare.code == 2);
  CHECK(Has(bare.err, "usage: tessera <command>"));

  const Finished unknown = RunTessera(dir, {"train"});
  CHECK(unknown.code == 2);
  CHECK(Has(unknown.err, "unknown command 'train'"));

  const Finished extra = RunTessera(dir, {"inspect", "a", "b"});
  CHECK(extra.code == 2);

  // A standby gets its task from the coordinator that adopts it.
  const Finished standby_task = RunTessera(dir, {"ps", "--standby", "--task=2", "--port=0"});
  CHECK(standby_task.code == 2);
  CHECK(Has(standby_task.err, "a --standby PS has no --task"));
}

}  // namespace
}  // namespace tessera::cli

#endif  // TESSERA_BINARY
