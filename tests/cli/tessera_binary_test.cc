// End-to-end tests of the built `tessera` binary, run as a child process: the command line, exit
// codes, stdout / stderr, and serve's shutdown on SIGINT / SIGTERM.
#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cli/predict_command.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"
#include "serving/json.h"
#include "tests/cli/cli_test_util.h"
#include "tests/cli/tessera_child.h"
#include "tests/listener.h"
// Last: see Note [httplib after Eigen] in tests/cli/cli_test_util.h.
#include <httplib.h>

#ifdef TESSERA_BINARY

namespace tessera::cli {

using serving::ParseJson;
namespace {

using testing::Child;
using testing::Finished;
using testing::Has;
using testing::PollUntil;
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
    auto metrics = client.Get("/monitoring/prometheus/metrics");
    REQUIRE(metrics);
    CHECK(metrics->status == 200);
    CHECK(Has(metrics->body,
              ":tensorflow:serving:request_count{model_name=\"ctr\",status=\"OK\"} 1\n"));

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
  CHECK_MESSAGE(Has(busy.err, "tessera serve: tessera serve cannot listen on 127.0.0.1:" +
                                  std::to_string(port) + ": another process listens on port " +
                                  std::to_string(port)),
                busy.err);
  CHECK_MESSAGE(Has(busy.err, "give tessera serve another --port (or --host)"), busy.err);
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

using tessera::testing::Listener;

// Sets an environment variable for the scope (children inherit it), then unsets it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value) : name_(name) {
    REQUIRE(std::getenv(name) == nullptr);
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

TEST_CASE("tessera ps fails at once on a port another process listens on, naming it and --port") {
  TempDir dir;
  Listener other;
  const std::string port = std::to_string(other.port());
  const auto start = std::chrono::steady_clock::now();
  const Finished busy = RunTessera(dir, {"ps", "--port", port, "--threads", "1"});
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(busy.code == 1);
  CHECK_MESSAGE(Has(busy.err, "tessera ps: ps 0 cannot listen on 127.0.0.1:" + port +
                                  ": another process listens on port " + port +
                                  " (`ss -ltnp 'sport = :" + port +
                                  "'` names it); start tessera "
                                  "ps with another --port"),
                busy.err);
  CHECK(took < std::chrono::seconds(3));  // not ten seconds of silence

  // A port from TF_CONFIG names its address there.
  ScopedEnv tf_config("TF_CONFIG", R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["h:2"],
      "ps": ["h:3", "127.0.0.1:)" + port +
                                       R"("]}, "task": {"type": "ps", "index": 1}})");
  const Finished from_tf_config = RunTessera(dir, {"ps", "--threads", "1"});
  CHECK(from_tf_config.code == 1);
  CHECK_MESSAGE(Has(from_tf_config.err, "ps 1 cannot listen on 127.0.0.1:" + port),
                from_tf_config.err);
  CHECK_MESSAGE(Has(from_tf_config.err, "change its address (\"ps\"[1], 127.0.0.1:" + port +
                                            ") in TF_CONFIG, or start tessera ps with --port"),
                from_tf_config.err);
}

TEST_CASE("tessera ps listens on port 7733 without --port") {
  TempDir dir;
  Child ps(dir, {"ps", "--threads", "1"}, "/dev/null");
  PollUntil([&] { return !ps.Alive() || Has(ps.out(), "listening on"); }, absl::Seconds(5));
  // Another process may hold 7733 on a shared machine: then the error names it as the default.
  const bool listening = Has(ps.out(), "tessera ps: ps 0 listening on 127.0.0.1:7733 ");
  const bool taken = Has(ps.err(), "ps 0 cannot listen on 127.0.0.1:7733: another process") &&
                     Has(ps.err(), "with --port (the default port, 7733, is taken)");
  CHECK_MESSAGE((listening || taken), std::string(ps.out() + ps.err()));
  ps.Signal(SIGTERM);
  CHECK(ps.Wait() == (listening ? 0 : 1));
}

TEST_CASE("tessera ps takes its task and port from TF_CONFIG, and exits 2 on a bad one") {
  TempDir dir;
  int port = 0;
  {
    Listener probe;  // a port free a moment ago
    port = probe.port();
  }
  {
    ScopedEnv tf_config("TF_CONFIG",
                        R"({"cluster": {"chief": ["127.0.0.1:1"], "worker": ["h:2"],
                            "ps": ["h:3", "127.0.0.1:)" +
                            std::to_string(port) + R"("]}, "task": {"type": "ps", "index": 1}})");
    Child ps(dir, {"ps", "--threads", "1"}, "/dev/null");
    PollUntil([&] { return !ps.Alive() || Has(ps.out(), "listening on"); }, absl::Seconds(5));
    CHECK_MESSAGE(Has(ps.out(), "ps 1 listening on 127.0.0.1:" + std::to_string(port) + " "),
                  std::string(ps.out() + ps.err()));
    ps.Signal(SIGTERM);
    CHECK(ps.Wait() == 0);
  }
  struct Case {
    const char* tf_config;
    const char* error;
  };
  for (const Case& c :
       {Case{R"({"cluster": )", "tessera ps: TF_CONFIG: not valid JSON"},
        Case{R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]},
                 "task": {"type": "worker", "index": 0}})",
             "tessera ps: TF_CONFIG: task {\"type\": \"worker\", \"index\": 0} is a worker"},
        Case{R"({"cluster": {"chief": ["h:1"], "worker": ["h:2"], "ps": ["h:3"]},
                 "task": {"type": "ps", "index": 4}})",
             "TF_CONFIG has 1 \"ps\" address"},
        Case{R"({"task": {"type": "boss"}})", "TF_CONFIG: unknown task type \"boss\""}}) {
    CAPTURE(c.tf_config);
    ScopedEnv tf_config("TF_CONFIG", c.tf_config);
    const Finished refused = RunTessera(dir, {"ps"});
    CHECK(refused.code == 2);
    CHECK_MESSAGE(Has(refused.err, c.error), refused.err);
  }
}

TEST_CASE("tessera <command> --help prints that command's usage and flags and exits 0") {
  TempDir dir;
  const std::vector<std::pair<std::string, std::vector<std::string>>> commands = {
      {"predict", {"--model", "--input", "--log_level"}},
      {"serve",
       {"--model", "--model_base_path", "--model_config_file", "--file_system_poll_wait_seconds",
        "--request_log", "--port", "--host", "--name", "--threads", "--max_body_bytes",
        "--max_instances", "--max_connections", "--read_timeout_ms", "--idle_timeout_ms",
        "--write_timeout_ms"}},
      {"ps",
       {"--task", "--standby", "--port", "--cluster_spec", "--host", "--threads", "--tls_cert",
        "--tls_key", "--tls_ca", "--max_message_bytes"}},
      {"inspect", {"--verify"}},
  };
  for (const auto& [command, flags] : commands) {
    CAPTURE(command);
    const Finished help = RunTessera(dir, {command, "--help"});
    CHECK(help.code == 0);
    CHECK(help.err.empty());
    CHECK(Has(help.out, "usage: tessera " + command));
    for (const std::string& flag : flags) CHECK_MESSAGE(Has(help.out, "\n  " + flag), flag);
    CHECK(Has(help.out, "--flagfile=FILE"));
    CHECK_FALSE(Has(help.out, "usage: tessera <command>"));
    // `tessera help COMMAND` says the same; --help anywhere on the line does too.
    CHECK(RunTessera(dir, {"help", command}).out == help.out);
    CHECK(RunTessera(dir, {command, "--model=x", "--helpfull"}).out == help.out);
  }
  // Another command's flags are not listed as the command's.
  CHECK_FALSE(Has(RunTessera(dir, {"inspect", "--help"}).out, "--max_instances"));
  const Finished global = RunTessera(dir, {"--help"});
  CHECK(global.code == 0);
  CHECK(Has(global.out, "usage: tessera <command>"));
  for (const char* synopsis :
       {"tessera predict --model DIR --input FILE", "tessera ps [--task K",
        "tessera serve (--model DIR | --model_base_path DIR", "tessera inspect PATH"}) {
    CHECK_MESSAGE(Has(global.out, synopsis), synopsis);
  }
  const Finished unknown = RunTessera(dir, {"train", "--help"});
  CHECK(unknown.code == 2);
  CHECK(Has(unknown.err, "unknown command 'train'"));
}

TEST_CASE("a bad flag is bad usage: exit status 2 with Abseil's message") {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    const char* error;
  };
  const Case cases[] = {
      {{"serve", "--bogus"}, "Unknown command line flag 'bogus'"},
      {{"ps", "--port=seven"}, "Illegal value 'seven' specified for flag 'port'"},
      {{"ps", "--flagfile=" + dir.Sub("none")}, "Can't open flagfile"},
      {{"ps", "--port=70000"}, "--port=70000 is not a port"},
      {{"predict", "--model", "m", "extra"}, "unexpected argument 'extra'"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.error);
    const Finished refused = RunTessera(dir, c.args);
    CHECK(refused.code == 2);
    CHECK_MESSAGE(Has(refused.err, c.error), refused.err);
  }
}

}  // namespace
}  // namespace tessera::cli

#endif  // TESSERA_BINARY
