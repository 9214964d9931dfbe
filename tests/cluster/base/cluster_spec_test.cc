// Who is where and which process this is (tessera/cluster.h): the cluster spec file and
// TF_CONFIG, their "task" entry with TF's task types, malformed documents named in the error,
// and the precedence of the spec file over TF_CONFIG.
#include "tessera/cluster.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "tests/cluster/network_test_util.h"

namespace tessera {
namespace {

using testing::ScratchDir;

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

// The cluster of a spec file's contents.
absl::StatusOr<ClusterSpec> ParseClusterSpec(absl::string_view json) {
  absl::StatusOr<ClusterConfig> config = ParseClusterConfig(json, "the cluster spec");
  if (!config.ok()) return config.status();
  return *config->cluster;
}

// The cluster of a spec file, as a process given --cluster_spec=`path` reads it.
absl::StatusOr<ClusterSpec> ReadClusterSpec(const std::string& path) {
  absl::StatusOr<ClusterConfig> config = ResolveClusterConfig({path, std::nullopt});
  if (!config.ok()) return config.status();
  return *config->cluster;
}

TEST_CASE("cluster spec: a cluster spec lists its ps, worker and coordinator addresses in order") {
  absl::StatusOr<ClusterSpec> spec = ParseClusterSpec(R"({"cluster": {
      "ps": ["10.0.0.1:7001", "10.0.0.2:7002"],
      "worker": ["10.0.0.3:7101", "w4:7102", "w5:7103"],
      "coordinator": ["10.0.0.5:7000"]}})");
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  REQUIRE(spec->ps.size() == 2);
  CHECK(spec->ps[0].ToString() == "10.0.0.1:7001");
  CHECK(spec->ps[1].ToString() == "10.0.0.2:7002");
  REQUIRE(spec->workers.size() == 3);
  CHECK(spec->workers[1].host == "w4");
  CHECK(spec->workers[2].port == 7103);
  CHECK(spec->coordinator.ToString() == "10.0.0.5:7000");
  CHECK(spec->ps_standby.empty());

  // Standby PS processes, optional.
  spec = ParseClusterSpec(R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"],
      "coordinator": ["c:3"], "ps_standby": ["s1:7009", "s2:7009"]}})");
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  REQUIRE(spec->ps_standby.size() == 2);
  CHECK(spec->ps_standby[1].ToString() == "s2:7009");

  // No PS: a spec of the mirrored strategy's (the parameter-server strategy refuses it, naming
  // the spec: training_flags_test).
  for (const char* no_ps :
       {R"({"cluster": {"worker": ["b:2", "b:3"], "coordinator": ["c:3"]}})",
        R"({"cluster": {"ps": [], "worker": ["b:2"], "coordinator": ["c:3"]}})"}) {
    spec = ParseClusterSpec(no_ps);
    REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
    CHECK(spec->ps.empty());
    CHECK_FALSE(spec->workers.empty());
  }

  // TF_CONFIG's "chief" names the coordinator too.
  spec = ParseClusterSpec(
      R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "chief": ["c:3"]}, "task": {}})");
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  CHECK(spec->coordinator.ToString() == "c:3");
}

TEST_CASE("cluster spec: a malformed cluster spec is InvalidArgument saying what is wrong") {
  struct Case {
    const char* json;
    const char* error_contains;
  };
  const Case cases[] = {
      {"", "not valid JSON: parse error at line 1, column 1"},
      {R"({"cluster": {"ps": ["a:1"],)", "not valid JSON: parse error at line 1, column 28"},
      {"{\n  \"cluster\": {\n    \"ps\": [\"a:1\"]\n    \"worker\": []}}",
       "parse error at line 4, column 12"},  // a missing comma: the line after it
      {R"(["a:1"])", "not a JSON object but an array"},
      {R"("a:1")", "not a JSON object but a string"},
      {R"({"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3"]})", "no \"cluster\""},
      {R"({"cluster": ["a:1"]})", "\"cluster\" must be an object"},
      {R"({"cluster": {"ps": ["a:1"], "coordinator": ["c:3"]}})", "no \"worker\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": [], "coordinator": ["c:3"]}})", "no \"worker\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"]}})",
       "exactly one \"chief\" (or \"coordinator\")"},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": []}})", "has 0"},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3", "d:4"]}})",
       "has 2"},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3"],
                       "chief": ["d:4"]}})",
       "has 2"},
      {R"({"cluster": {"ps": "a:1", "worker": ["b:2"], "coordinator": ["c:3"]}})",
       "\"ps\" must be a list"},
      {R"({"cluster": {"ps": ["host"], "worker": ["b:2"], "coordinator": ["c:3"]}})",
       "\"ps\": \"host\" is not a \"host:port\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["host:0"], "coordinator": ["c:3"]}})",
       "\"worker\": \"host:0\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["host:70000"]}})",
       "\"coordinator\": \"host:70000\""},
      {R"({"cluster": {"ps": [":80"], "worker": ["b:2"], "coordinator": ["c:3"]}})",
       "\":80\" is not"},
      {R"({"cluster": {"ps": ["a:1", 7001], "worker": ["b:2"], "coordinator": ["c:3"]}})",
       "\"ps\" holds 7001, not a string"},
      {R"({"cluster": {"ps": ["a:1"], "worker": [null], "coordinator": ["c:3"]}})",
       "\"worker\" holds null, not a string"},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3"],
                       "ps_standby": ["s:0"]}})",
       "\"ps_standby\": \"s:0\""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.json);
    const absl::StatusOr<ClusterSpec> spec = ParseClusterSpec(c.json);
    REQUIRE_FALSE(spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(spec.status().message(), "cluster spec"), spec.status());
    CHECK_MESSAGE(Contains(spec.status().message(), c.error_contains), spec.status());
  }
}

TEST_CASE("cluster spec: a spec file is read, and a missing one is NotFound naming it") {
  ScratchDir dir("tessera-spec");
  const std::string path = dir.File("cluster.json");
  {
    std::ofstream out(path);
    out << R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3"]}})";
  }
  absl::StatusOr<ClusterSpec> spec = ReadClusterSpec(path);
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  CHECK(spec->ps[0].ToString() == "a:1");

  const std::string missing = dir.File("missing.json");
  spec = ReadClusterSpec(missing);
  CHECK(spec.status().code() == absl::StatusCode::kNotFound);
  CHECK_MESSAGE(Contains(spec.status().message(), missing), spec.status());

  // A bad file's error names the file.
  {
    std::ofstream out(path);
    out << R"({"cluster": {"ps": ["a:1"]}})";
  }
  spec = ReadClusterSpec(path);
  CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(Contains(spec.status().message(), path), spec.status());
}

TEST_CASE("cluster spec: ParseNodeAddress takes host:port with a port in 1..65535") {
  struct Good {
    const char* text;
    const char* host;
    uint16_t port;
  };
  for (const Good& g : {Good{"10.0.0.1:7001", "10.0.0.1", 7001}, Good{"localhost:1", "localhost", 1},
                        Good{"ps-0.example.com:65535", "ps-0.example.com", 65535}}) {
    CAPTURE(g.text);
    absl::StatusOr<NodeAddress> address = ParseNodeAddress(g.text);
    REQUIRE_MESSAGE(address.ok(), address.status().ToString());
    CHECK(address->host == g.host);
    CHECK(address->port == g.port);
    CHECK(address->ToString() == g.text);
  }
  for (const char* bad : {"", "host", "host:", "host:0", "host:70000", "host:65536", ":80",
                          "host:-1", "host:8x", "host:http"}) {
    CAPTURE(bad);
    const absl::StatusOr<NodeAddress> address = ParseNodeAddress(bad);
    REQUIRE_FALSE(address.ok());
    CHECK(address.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(address.status().message(), absl::StrCat("\"", bad, "\"")),
                  address.status());
  }
}

// -- TF_CONFIG and the task ----------------------------------------------------------------------

constexpr char kCluster[] = R"({"chief": ["10.0.0.5:7000"],
    "ps": ["10.0.0.1:7001", "10.0.0.2:7001"],
    "worker": ["10.0.0.3:7101", "10.0.0.4:7101", "10.0.0.7:7101"],
    "ps_standby": ["10.0.0.6:7001"],
    "evaluator": ["10.0.0.8:7201"]})";

std::string TfConfig(absl::string_view task) {
  return absl::StrCat(R"({"cluster": )", kCluster, R"(, "task": )", task,
                      R"(, "rpc_layer": "grpc", "environment": "cloud"})");
}

TEST_CASE("cluster spec: TF_CONFIG's task types map onto Tessera's processes") {
  struct Case {
    const char* task;
    TaskType type;
    int32_t index;
  };
  const Case cases[] = {
      {R"({"type": "chief", "index": 0})", TaskType::kCoordinator, 0},
      {R"({"type": "coordinator"})", TaskType::kCoordinator, 0},
      {R"({"type": "worker", "index": 2})", TaskType::kWorker, 2},
      {R"({"type": "worker"})", TaskType::kWorker, 0},  // TF's default index
      {R"({"type": "worker", "index": "1"})", TaskType::kWorker, 1},
      {R"({"type": "ps", "index": 1})", TaskType::kPs, 1},
      {R"({"type": "ps_standby", "index": 0})", TaskType::kPsStandby, 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.task);
    const absl::StatusOr<ClusterConfig> config = ParseClusterConfig(TfConfig(c.task), "TF_CONFIG");
    REQUIRE_MESSAGE(config.ok(), config.status());
    REQUIRE(config->cluster.has_value());
    CHECK(config->cluster->source == "TF_CONFIG");
    CHECK(config->cluster->coordinator.ToString() == "10.0.0.5:7000");
    CHECK(config->cluster->workers.size() == 3);  // the evaluator is no worker
    REQUIRE(config->task.has_value());
    CHECK(config->task->type == c.type);
    CHECK(config->task->index == c.index);
    CHECK(config->task_source == "TF_CONFIG");
  }
  // No task, or an empty one, is no task; a document with only a task is one when allowed.
  for (const char* task : {"{}", "null"}) {
    const absl::StatusOr<ClusterConfig> config = ParseClusterConfig(TfConfig(task), "TF_CONFIG");
    REQUIRE_MESSAGE(config.ok(), config.status());
    CHECK_FALSE(config->task.has_value());
  }
  const absl::StatusOr<ClusterConfig> only_task = ParseClusterConfig(
      R"({"task": {"type": "worker", "index": 7}})", "TF_CONFIG", /*require_cluster=*/false);
  REQUIRE_MESSAGE(only_task.ok(), only_task.status());
  CHECK_FALSE(only_task->cluster.has_value());
  CHECK(only_task->task->ToString() == R"({"type": "worker", "index": 7})");
  // TF's TF_CONFIG of a single process: an empty cluster is none (but not in a spec file).
  const absl::StatusOr<ClusterConfig> local =
      ParseClusterConfig(R"({"cluster": {}, "task": {}})", "TF_CONFIG", /*require_cluster=*/false);
  REQUIRE_MESSAGE(local.ok(), local.status());
  CHECK_FALSE(local->cluster.has_value());
  CHECK(ParseClusterConfig(R"({"cluster": {}})", "the cluster spec").status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("cluster spec: a malformed TF_CONFIG is InvalidArgument naming TF_CONFIG and the fault") {
  struct Case {
    std::string json;
    const char* error_contains;
  };
  const Case cases[] = {
      {R"({"cluster": {"ps": ["a:1"])", "TF_CONFIG: not valid JSON: parse error at line 1"},
      {"[]", "TF_CONFIG: not a JSON object but an array"},
      {TfConfig(R"({"type": "master", "index": 0})"), "TF_CONFIG: unknown task type \"master\""},
      {TfConfig(R"({"type": "evaluator", "index": 0})"),
       "TF_CONFIG: task type \"evaluator\" has no Tessera process"},
      {TfConfig(R"({"index": 0})"), "TF_CONFIG: \"task\" {\"index\":0} has no \"type\""},
      {TfConfig(R"({"type": 3})"), "has no \"type\""},
      {TfConfig(R"("worker")"), "TF_CONFIG: \"task\" must be an object"},
      {TfConfig(R"({"type": "worker", "index": -1})"),
       "TF_CONFIG: the task's \"index\" must be an integer >= 0, not -1"},
      {TfConfig(R"({"type": "worker", "index": 1.5})"), "must be an integer >= 0, not 1.5"},
      {TfConfig(R"({"type": "worker", "index": "x"})"), "must be an integer >= 0, not \"x\""},
      {TfConfig(R"({"type": "worker", "index": 3})"),
       "TF_CONFIG: task {\"type\": \"worker\", \"index\": 3} is not in the cluster: TF_CONFIG "
       "has 3 \"worker\" addresses"},
      {TfConfig(R"({"type": "ps", "index": 2})"), "has 2 \"ps\" addresses"},
      {TfConfig(R"({"type": "chief", "index": 1})"), "has 1 \"chief\" address"},
      {TfConfig(R"({"type": "ps_standby", "index": 1})"), "has 1 \"ps_standby\" address"},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"]}, "task": {"type": "worker"}})",
       "TF_CONFIG: needs exactly one \"chief\" (or \"coordinator\") address, has 0"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.json);
    const absl::StatusOr<ClusterConfig> config =
        ParseClusterConfig(c.json, "TF_CONFIG", /*require_cluster=*/false);
    REQUIRE_FALSE(config.ok());
    CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(config.status().message(), c.error_contains), config.status());
  }
}

// A spec file in a scratch directory.
std::string WriteSpec(const ScratchDir& dir, const std::string& json) {
  const std::string path = dir.File("cluster.json");
  std::ofstream(path) << json;
  return path;
}

TEST_CASE("cluster spec: the spec file's cluster and task come before TF_CONFIG's") {
  ScratchDir dir("tessera-spec");
  const std::string tf_config = TfConfig(R"({"type": "worker", "index": 2})");

  SUBCASE("TF_CONFIG alone") {
    const absl::StatusOr<ClusterConfig> config = ResolveClusterConfig({"", tf_config});
    REQUIRE_MESSAGE(config.ok(), config.status());
    CHECK(config->cluster->source == "TF_CONFIG");
    CHECK(config->cluster->ps.size() == 2);
    CHECK(config->task->ToString() == R"({"type": "worker", "index": 2})");
    CHECK(config->task_source == "TF_CONFIG");
  }
  SUBCASE("neither: no cluster") {
    const absl::StatusOr<ClusterConfig> config = ResolveClusterConfig({"", std::nullopt});
    REQUIRE_MESSAGE(config.ok(), config.status());
    CHECK_FALSE(config->cluster.has_value());
    CHECK_FALSE(config->task.has_value());
  }
  SUBCASE("a spec file with a task: both from the file") {
    const std::string path = WriteSpec(
        dir, R"({"cluster": {"ps": ["a:1"], "worker": ["b:2", "c:3"], "coordinator": ["d:4"]},
                 "task": {"type": "ps", "index": 0}})");
    const absl::StatusOr<ClusterConfig> config = ResolveClusterConfig({path, tf_config});
    REQUIRE_MESSAGE(config.ok(), config.status());
    CHECK(config->cluster->source == "the cluster spec " + path);
    CHECK(config->cluster->ps.size() == 1);
    CHECK(config->task->ToString() == R"({"type": "ps", "index": 0})");
    CHECK(config->task_source == "the cluster spec " + path);
  }
  SUBCASE("a spec file without a task: TF_CONFIG's task, checked against the file's cluster") {
    const std::string path = WriteSpec(
        dir, R"({"cluster": {"ps": ["a:1"], "worker": ["b:2", "c:3", "e:5"],
                             "coordinator": ["d:4"]}})");
    const absl::StatusOr<ClusterConfig> config = ResolveClusterConfig({path, tf_config});
    REQUIRE_MESSAGE(config.ok(), config.status());
    CHECK(config->cluster->workers[2].ToString() == "e:5");
    CHECK(config->task->ToString() == R"({"type": "worker", "index": 2})");
    CHECK(config->task_source == "TF_CONFIG");

    const std::string smaller = WriteSpec(
        dir, R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["d:4"]}})");
    const absl::StatusOr<ClusterConfig> out_of_range = ResolveClusterConfig({smaller, tf_config});
    CHECK(out_of_range.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(out_of_range.status().message(),
                           "TF_CONFIG: task {\"type\": \"worker\", \"index\": 2} is not in the "
                           "cluster: the cluster spec " + smaller + " has 1 \"worker\" address"),
                  out_of_range.status());
  }
  SUBCASE("a TF_CONFIG task without any cluster is refused") {
    const absl::StatusOr<ClusterConfig> config =
        ResolveClusterConfig({"", R"({"task": {"type": "worker", "index": 0}})"});
    CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(config.status().message(), "but no \"cluster\""), config.status());
  }
  SUBCASE("a broken TF_CONFIG is an error even beside a spec file") {
    const std::string path = WriteSpec(
        dir, R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["d:4"]}})");
    const absl::StatusOr<ClusterConfig> config = ResolveClusterConfig({path, "{oops"});
    CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(config.status().message(), "TF_CONFIG: not valid JSON"),
                  config.status());
  }
  SUBCASE("a missing spec file is NotFound naming it") {
    const absl::StatusOr<ClusterConfig> config =
        ResolveClusterConfig({dir.File("none.json"), tf_config});
    CHECK(config.status().code() == absl::StatusCode::kNotFound);
    CHECK(Contains(config.status().message(), dir.File("none.json")));
  }
}

TEST_CASE("cluster spec: TfConfigFromEnvironment reads TF_CONFIG, and unset or blank is none") {
  const char* saved = std::getenv("TF_CONFIG");
  const std::string kept = saved == nullptr ? "" : saved;
  ::unsetenv("TF_CONFIG");
  CHECK_FALSE(TfConfigFromEnvironment().has_value());
  ::setenv("TF_CONFIG", "  \n", 1);
  CHECK_FALSE(TfConfigFromEnvironment().has_value());
  ::setenv("TF_CONFIG", R"({"task": {}})", 1);
  CHECK(TfConfigFromEnvironment() == std::optional<std::string>(R"({"task": {}})"));
  if (saved != nullptr) {
    ::setenv("TF_CONFIG", kept.c_str(), 1);
  } else {
    ::unsetenv("TF_CONFIG");
  }
}

TEST_CASE("cluster spec: the coordinator's port advice names its address and the source") {
  const absl::StatusOr<ClusterConfig> config = ParseClusterConfig(TfConfig("{}"), "TF_CONFIG");
  REQUIRE_MESSAGE(config.ok(), config.status());
  CHECK(CoordinatorPortAdvice(*config->cluster) ==
        "change the coordinator's (\"chief\") address 10.0.0.5:7000 in TF_CONFIG");
}

}  // namespace
}  // namespace tessera
