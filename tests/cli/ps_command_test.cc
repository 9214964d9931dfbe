// Which PS `tessera ps` is and where it listens (ResolvePsIdentity): --task, --standby and --port
// override the task of a cluster spec or TF_CONFIG, whose address gives the port; without either,
// task 0 on the default port.
#include "cli/ps_command.h"

#include <doctest/doctest.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "tessera/cluster.h"

namespace tessera::cli {
namespace {

// TF_CONFIG of a cluster with 2 PS, a standby and 2 workers, its task `task` ("": none).
ClusterConfig Config(const std::string& task) {
  const std::string json =
      R"({"cluster": {"chief": ["10.0.0.5:7000"], "ps": ["10.0.0.1:7001", "10.0.0.2:7002"],
                      "ps_standby": ["10.0.0.6:7009"],
                      "worker": ["10.0.0.3:7101", "10.0.0.4:7101"]})" +
      (task.empty() ? std::string("}") : ", \"task\": " + task + "}");
  absl::StatusOr<ClusterConfig> config = ParseClusterConfig(json, "TF_CONFIG");
  REQUIRE_MESSAGE(config.ok(), config.status());
  return *config;
}

PsOptions Resolve(const PsFlags& flags, const ClusterConfig& config) {
  PsOptions options;
  const absl::Status status = ResolvePsIdentity(flags, config, options);
  REQUIRE_MESSAGE(status.ok(), status);
  return options;
}

TEST_CASE("tessera ps: without flags or a cluster, task 0 on port 7733") {
  const PsOptions options = Resolve({}, ClusterConfig{});
  CHECK(kDefaultPsPort == 7733);
  CHECK(options.port == kDefaultPsPort);
  CHECK(options.task == 0);
  CHECK_FALSE(options.standby);
  CHECK(options.how_to_change_port ==
        "start tessera ps with --port (the default port, 7733, is taken)");
  CHECK(Resolve({std::nullopt, 3, false}, ClusterConfig{}).task == 3);
  CHECK(Resolve({8000, std::nullopt, true}, ClusterConfig{}).standby);
}

TEST_CASE("tessera ps: TF_CONFIG's task names the PS and its address the port") {
  PsOptions options = Resolve({}, Config(R"({"type": "ps", "index": 1})"));
  CHECK(options.task == 1);
  CHECK_FALSE(options.standby);
  CHECK(options.port == 7002);
  CHECK(options.how_to_change_port ==
        "change its address (\"ps\"[1], 10.0.0.2:7002) in TF_CONFIG, or start tessera ps with "
        "--port");

  options = Resolve({}, Config(R"({"type": "ps_standby", "index": 0})"));
  CHECK(options.standby);
  CHECK(options.port == 7009);

  // No task: PS task 0, at its address.
  options = Resolve({}, Config(""));
  CHECK(options.task == 0);
  CHECK(options.port == 7001);
}

TEST_CASE("tessera ps: --task, --standby and --port override TF_CONFIG") {
  const ClusterConfig config = Config(R"({"type": "ps", "index": 1})");
  PsOptions options = Resolve({std::nullopt, 0, false}, config);  // --task 0
  CHECK(options.task == 0);
  CHECK(options.port == 7001);  // task 0's address
  options = Resolve({7555, std::nullopt, false}, config);  // --port 7555
  CHECK(options.task == 1);
  CHECK(options.port == 7555);
  CHECK(options.how_to_change_port == "start tessera ps with another --port");
  options = Resolve({std::nullopt, std::nullopt, true}, config);  // --standby: not task 1's port
  CHECK(options.standby);
  CHECK(options.port == kDefaultPsPort);
  // --standby with a standby task keeps its address.
  options = Resolve({std::nullopt, std::nullopt, true},
                    Config(R"({"type": "ps_standby", "index": 0})"));
  CHECK(options.port == 7009);
}

TEST_CASE("tessera ps: a task that is not a PS, or not in the cluster, is refused naming it") {
  struct Case {
    PsFlags flags;
    std::string task;
    const char* message;
  };
  const Case cases[] = {
      {{}, R"({"type": "worker", "index": 1})",
       "TF_CONFIG: task {\"type\": \"worker\", \"index\": 1} is a worker: run the training "
       "program for it"},
      {{}, R"({"type": "chief", "index": 0})", "is the coordinator: run the training program"},
      {{std::nullopt, 2, false}, "",
       "--task: task {\"type\": \"ps\", \"index\": 2} is not in the cluster: TF_CONFIG has 2 "
       "\"ps\" addresses"},
      {{std::nullopt, -1, false}, "", "--task=-1 is negative"},
      {{std::nullopt, 0, true}, "", "a --standby PS has no --task"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    PsOptions options;
    const absl::Status status = ResolvePsIdentity(c.flags, Config(c.task), options);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(absl::StrContains(status.message(), c.message), status);
  }
}

}  // namespace
}  // namespace tessera::cli
