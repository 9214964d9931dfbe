// ReadTrainingFlags: the shared flags of a training program and their validation, and where a
// networked cluster comes from: --cluster_spec, TF_CONFIG, and the flags that override them.
#include "coordinator/training/training_flags.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tessera/command_line.h"
#include "tests/captured_log.h"
#include "tests/listener.h"

ABSL_DECLARE_FLAG(std::optional<std::string>, mode);
ABSL_DECLARE_FLAG(std::string, log_level);
ABSL_DECLARE_FLAG(bool, v);
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(bool, resume);
ABSL_DECLARE_FLAG(bool, overwrite_checkpoints);
ABSL_DECLARE_FLAG(std::string, cluster_spec);
ABSL_DECLARE_FLAG(std::string, strategy);
ABSL_DECLARE_FLAG(std::optional<std::string>, role);
ABSL_DECLARE_FLAG(std::optional<int32_t>, task);
ABSL_DECLARE_FLAG(int32_t, min_workers);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(int32_t, ps);
ABSL_DECLARE_FLAG(int32_t, workers);
ABSL_DECLARE_FLAG(int32_t, closures_per_worker);
ABSL_DECLARE_FLAG(std::optional<int32_t>, shard_copies);
ABSL_DECLARE_FLAG(std::optional<int32_t>, replicas);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every);
ABSL_DECLARE_FLAG(double, checkpoint_every_seconds);
ABSL_DECLARE_FLAG(int32_t, inject_worker_failures);
ABSL_DECLARE_FLAG(int64_t, restart_delay_ms);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, tls_cert);
ABSL_DECLARE_FLAG(int32_t, dashboard_port);
ABSL_DECLARE_FLAG(std::string, dashboard_host);
ABSL_DECLARE_FLAG(bool, dashboard_keep_serving);

namespace tessera {
namespace {

// A port of 127.0.0.1 that nobody listens on now.
uint16_t FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

// The cluster of 2 PS and 3 workers the tests use, its coordinator on `coordinator_port`.
std::string Cluster(uint16_t coordinator_port) {
  return absl::StrCat(R"({"ps": ["127.0.0.1:7001", "127.0.0.1:7002"],
      "worker": ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"],
      "chief": ["127.0.0.1:)", coordinator_port, R"("]})");
}

// That cluster in a temporary spec file, with an optional "task" entry (its JSON); removed at
// the end of the scope.
class SpecFile {
 public:
  explicit SpecFile(const std::string& task = "", uint16_t coordinator_port = FreePort())
      : path_((std::filesystem::temp_directory_path() /
               ("tessera_training_flags_test_" + std::to_string(getpid()) + ".json"))
                  .string()) {
    std::ofstream(path_) << R"({"cluster": )" << Cluster(coordinator_port)
                         << (task.empty() ? "" : R"(, "task": )" + task) << "}";
  }
  ~SpecFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Sets TF_CONFIG (nullopt: unsets it) for the scope, then puts the environment back.
class TfConfig {
 public:
  explicit TfConfig(const std::optional<std::string>& value) {
    if (const char* saved = std::getenv("TF_CONFIG")) saved_ = saved;
    if (value.has_value()) {
      ::setenv("TF_CONFIG", value->c_str(), 1);
    } else {
      ::unsetenv("TF_CONFIG");
    }
  }
  ~TfConfig() {
    if (saved_.has_value()) {
      ::setenv("TF_CONFIG", saved_->c_str(), 1);
    } else {
      ::unsetenv("TF_CONFIG");
    }
  }
  TfConfig(const TfConfig&) = delete;
  TfConfig& operator=(const TfConfig&) = delete;

 private:
  std::optional<std::string> saved_;
};

// A TF_CONFIG document of the tests' cluster with `task` (JSON).
std::string TfConfigOf(const std::string& task, uint16_t coordinator_port = FreePort()) {
  return absl::StrCat(R"({"cluster": )", Cluster(coordinator_port), R"(, "task": )", task, "}");
}

void CheckInvalid(const absl::StatusOr<TrainingFlags>& flags, const char* message_part) {
  CHECK(flags.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(absl::StrContains(flags.status().message(), message_part),
                flags.status().ToString());
}

TEST_CASE("the default flags train in the simulation as the coordinator") {
  absl::FlagSaver saver;
  TfConfig no_tf_config(std::nullopt);
  absl::SetFlag(&FLAGS_ps, 3);
  absl::SetFlag(&FLAGS_seed, 9);
  const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
  REQUIRE(flags.ok());
  CHECK(flags->mode == TrainingMode::kSimulation);
  CHECK(flags->role == TrainingRole::kCoordinator);
  CHECK(flags->parameter_servers.ps == 3);
  CHECK(flags->parameter_servers.workers == 2);
  CHECK(flags->parameter_servers.seed == 9);
  CHECK(flags->seed == 9);
  CHECK_FALSE(flags->parameter_servers.cluster.has_value());
  CHECK_FALSE(flags->parameter_servers.overwrite_checkpoints);
}

TEST_CASE("--shard_copies gives every shard a backup, and --replicas is its deprecated alias") {
  TfConfig no_tf_config(std::nullopt);
  const auto copies = [] {
    const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
    REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
    return flags->parameter_servers.shard_copies;
  };
  {
    absl::FlagSaver saver;
    CHECK(copies() == 1);  // the default: no backup
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_shard_copies, 2);
    CHECK(copies() == 2);
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_replicas, 2);
    CHECK(copies() == 2);
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_shard_copies, 2);
    absl::SetFlag(&FLAGS_replicas, 2);
    CHECK(copies() == 2);
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_shard_copies, 1);
    absl::SetFlag(&FLAGS_replicas, 2);
    CheckInvalid(ReadTrainingFlags(), "--shard_copies=1 and --replicas=2 disagree");
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_shard_copies, 3);
    CheckInvalid(ReadTrainingFlags(), "--shard_copies must be 1 or 2");
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_replicas, 0);
    CheckInvalid(ReadTrainingFlags(), "--replicas must be 1 or 2");
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_replicas, 2);
    absl::SetFlag(&FLAGS_ps, 1);
    CheckInvalid(ReadTrainingFlags(), "--shard_copies=2 needs --ps >= 2");
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_shard_copies, 2);
    absl::SetFlag(&FLAGS_strategy, "mirrored");
    CheckInvalid(ReadTrainingFlags(), "--shard_copies is for parameter servers");
  }
  // --help lists the alias as deprecated, next to the flag it names.
  ProgramHelp help;
  help.name = "trainer";
  help.usage = "trainer [flags]";
  help.groups = TrainingFlagGroups();
  const std::string text = FormatHelp(help);
  const size_t flag = text.find("--shard_copies");
  const size_t alias = text.find("--replicas");
  REQUIRE(flag != std::string::npos);
  REQUIRE(alias != std::string::npos);
  CHECK(flag < alias);
  CHECK(text.find("deprecated: the old name of --shard_copies", alias) != std::string::npos);
}

TEST_CASE("--log_level and -v set the level of the process's log, and a wrong level is refused") {
  absl::FlagSaver saver;
  TfConfig no_tf_config(std::nullopt);
  testing::CapturedLog log;
  absl::SetFlag(&FLAGS_log_level, "warning");
  REQUIRE(ReadTrainingFlags().ok());
  Log().info("an info line");
  Log().warn("a warning line");
  CHECK(log.text().find("an info line") == std::string::npos);
  CHECK(log.text().find("a warning line") != std::string::npos);

  absl::SetFlag(&FLAGS_log_level, "");
  absl::SetFlag(&FLAGS_v, true);
  REQUIRE(ReadTrainingFlags().ok());
  Log().debug("a debug line");
  CHECK(log.text().find("a debug line") != std::string::npos);

  absl::SetFlag(&FLAGS_log_level, "error");  // with -v
  absl::Status refused = ReadTrainingFlags().status();
  CHECK(absl::IsInvalidArgument(refused));
  CHECK_MESSAGE(absl::StrContains(refused.message(), "-v is --log_level=debug"), refused);
  absl::SetFlag(&FLAGS_v, false);
  absl::SetFlag(&FLAGS_log_level, "loud");
  refused = ReadTrainingFlags().status();
  CHECK(absl::IsInvalidArgument(refused));
  CHECK_MESSAGE(absl::StrContains(refused.message(), "--log_level"), refused);
}

TEST_CASE("--overwrite_checkpoints reaches the options of a fresh run") {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_checkpoint_dir, "/tmp/ckpt");
  absl::SetFlag(&FLAGS_overwrite_checkpoints, true);
  const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
  REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
  CHECK(flags->parameter_servers.overwrite_checkpoints);
  CHECK_FALSE(flags->parameter_servers.resume);
}

TEST_CASE("a cluster spec makes the run networked, with the spec's PS and worker counts") {
  absl::FlagSaver saver;
  TfConfig no_tf_config(std::nullopt);
  SpecFile spec;
  absl::SetFlag(&FLAGS_cluster_spec, spec.path());
  absl::SetFlag(&FLAGS_role, "worker");
  absl::SetFlag(&FLAGS_task, 2);
  absl::SetFlag(&FLAGS_min_workers, 3);
  const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
  REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
  CHECK(flags->mode == TrainingMode::kNetworked);
  CHECK(flags->role == TrainingRole::kWorker);
  CHECK(flags->task == 2);
  CHECK(flags->parameter_servers.ps == 2);
  CHECK(flags->parameter_servers.workers == 3);
  REQUIRE(flags->parameter_servers.cluster.has_value());
  CHECK(absl::StartsWith(flags->parameter_servers.cluster->coordinator.ToString(), "127.0.0.1:"));
  CHECK(flags->parameter_servers.cluster->source == "the cluster spec " + spec.path());
}

TEST_CASE("a cluster spec without parameter servers serves the mirrored strategy only") {
  absl::FlagSaver saver;
  TfConfig no_tf_config(std::nullopt);
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("tessera_training_flags_no_ps_" + std::to_string(getpid()) + ".json"))
                               .string();
  std::ofstream(path) << R"({"cluster": {"worker": ["127.0.0.1:7101", "127.0.0.1:7102"],
                                         "chief": ["127.0.0.1:)"
                      << FreePort() << R"("]}})";
  absl::SetFlag(&FLAGS_cluster_spec, path);
  const absl::StatusOr<TrainingFlags> ps = ReadTrainingFlags();
  CHECK(absl::IsInvalidArgument(ps.status()));
  CHECK(absl::StrContains(ps.status().message(), path));
  CHECK(absl::StrContains(ps.status().message(),
                          "no \"ps\" address: the parameter-server strategy needs one"));
  absl::SetFlag(&FLAGS_strategy, "mirrored");
  const absl::StatusOr<TrainingFlags> mirrored = ReadTrainingFlags();
  std::remove(path.c_str());
  REQUIRE_MESSAGE(mirrored.ok(), mirrored.status().ToString());
  CHECK(mirrored->strategy == TrainingStrategy::kMirrored);
  CHECK(mirrored->parameter_servers.workers == 2);
  CHECK(mirrored->parameter_servers.ps == 0);
}

TEST_CASE("inconsistent flags are InvalidArgument saying which") {
  struct Case {
    const char* what;
    void (*set)(const std::string& spec);
    const char* message_part;
  };
  const Case cases[] = {
      {"unknown mode", [](const std::string&) { absl::SetFlag(&FLAGS_mode, "cloud"); },
       "--mode must be sim, local or net, not cloud"},
      {"checkpoints in local mode",
       [](const std::string&) {
         absl::SetFlag(&FLAGS_mode, "local");
         absl::SetFlag(&FLAGS_checkpoint_dir, "/tmp/ckpt");
       },
       "work on parameter servers"},
      {"resume in local mode",
       [](const std::string&) {
         absl::SetFlag(&FLAGS_mode, "local");
         absl::SetFlag(&FLAGS_resume, true);
       },
       "work on parameter servers"},
      {"overwriting checkpoints in local mode",
       [](const std::string&) {
         absl::SetFlag(&FLAGS_mode, "local");
         absl::SetFlag(&FLAGS_overwrite_checkpoints, true);
       },
       "work on parameter servers"},
      {"overwriting checkpoints and resuming them",
       [](const std::string&) {
         absl::SetFlag(&FLAGS_checkpoint_dir, "/tmp/ckpt");
         absl::SetFlag(&FLAGS_resume, true);
         absl::SetFlag(&FLAGS_overwrite_checkpoints, true);
       },
       "--overwrite_checkpoints starts a new run, --resume continues one"},
      {"overwriting checkpoints without a checkpoint directory",
       [](const std::string&) { absl::SetFlag(&FLAGS_overwrite_checkpoints, true); },
       "--overwrite_checkpoints needs --checkpoint_dir"},
      {"a cluster spec in local mode",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_mode, "local");
         absl::SetFlag(&FLAGS_cluster_spec, spec);
       },
       "drop --mode=local"},
      {"unknown role",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_cluster_spec, spec);
         absl::SetFlag(&FLAGS_role, "ps");
       },
       "--role must be coordinator (or chief) or worker, not ps (a parameter server is `tessera "
       "ps`)"},
      {"a worker task past the spec's workers",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_cluster_spec, spec);
         absl::SetFlag(&FLAGS_role, "worker");
         absl::SetFlag(&FLAGS_task, 3);
       },
       "--task: task {\"type\": \"worker\", \"index\": 3} is not in the cluster"},
      {"a negative worker task",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_cluster_spec, spec);
         absl::SetFlag(&FLAGS_role, "worker");
         absl::SetFlag(&FLAGS_task, -1);
       },
       "--task must be >= 0, not -1"},
      {"a cluster spec in the simulation",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_mode, "sim");
         absl::SetFlag(&FLAGS_cluster_spec, spec);
       },
       "--cluster_spec is for a networked cluster: drop --mode=sim (or pass --mode=net)"},
      {"a role in the simulation",
       [](const std::string&) {
         absl::SetFlag(&FLAGS_mode, "sim");
         absl::SetFlag(&FLAGS_role, "worker");
       },
       "--role and --task are for a networked cluster: drop --mode=sim"},
      {"--mode=net without a cluster",
       [](const std::string&) { absl::SetFlag(&FLAGS_mode, "net"); },
       "--mode=net needs a cluster: --cluster_spec=FILE or the TF_CONFIG environment variable"},
      {"a task without a cluster", [](const std::string&) { absl::SetFlag(&FLAGS_task, 1); },
       "--role and --task need a cluster"},
      {"more workers to wait for than the spec has",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_cluster_spec, spec);
         absl::SetFlag(&FLAGS_min_workers, 4);
       },
       "--min_workers must be in 1..3"},
      {"a negative checkpoint cadence",
       [](const std::string&) { absl::SetFlag(&FLAGS_checkpoint_every, -5); },
       "--checkpoint_every must be >= 0, not -5"},
      {"a negative checkpoint cadence in seconds",
       [](const std::string&) { absl::SetFlag(&FLAGS_checkpoint_every_seconds, -0.5); },
       "--checkpoint_every_seconds must be a number of seconds >= 0, not -0.5"},
      {"a checkpoint cadence of no number of seconds",
       [](const std::string&) {
         absl::SetFlag(&FLAGS_checkpoint_every_seconds, std::numeric_limits<double>::quiet_NaN());
       },
       "--checkpoint_every_seconds must be a number of seconds >= 0, not nan"},
      {"no parameter servers", [](const std::string&) { absl::SetFlag(&FLAGS_ps, 0); },
       "--ps must be >= 1, not 0"},
      {"no workers", [](const std::string&) { absl::SetFlag(&FLAGS_workers, -2); },
       "--workers must be >= 1, not -2"},
      {"no closures per worker",
       [](const std::string&) { absl::SetFlag(&FLAGS_closures_per_worker, 0); },
       "--closures_per_worker must be >= 1, not 0"},
      {"negative failures to inject",
       [](const std::string&) { absl::SetFlag(&FLAGS_inject_worker_failures, -1); },
       "--inject_worker_failures must be >= 0, not -1"},
      {"a negative restart delay",
       [](const std::string&) { absl::SetFlag(&FLAGS_restart_delay_ms, -100); },
       "--restart_delay_ms must be >= 0, not -100"},
      {"negative threads",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_cluster_spec, spec);
         absl::SetFlag(&FLAGS_threads, -1);
       },
       "--threads must be >= 0"},
      {"only some TLS files",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_cluster_spec, spec);
         absl::SetFlag(&FLAGS_tls_cert, "/tmp/cert.pem");
       },
       "TLS"},
  };
  SpecFile spec;
  TfConfig no_tf_config(std::nullopt);
  for (const Case& c : cases) {
    CAPTURE(c.what);
    absl::FlagSaver saver;
    c.set(spec.path());
    CheckInvalid(ReadTrainingFlags(), c.message_part);
  }
}

TEST_CASE("a cluster spec that cannot be read is an error naming it") {
  absl::FlagSaver saver;
  TfConfig no_tf_config(std::nullopt);
  absl::SetFlag(&FLAGS_cluster_spec, "/nonexistent/spec.json");
  const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
  CHECK(absl::IsNotFound(flags.status()));
  CHECK(absl::StrContains(flags.status().message(), "/nonexistent/spec.json"));
}

TEST_CASE("TF_CONFIG alone makes a networked run, its task naming the role") {
  struct Case {
    const char* task;
    TrainingRole role;
    int32_t index;
  };
  const Case cases[] = {
      {R"({"type": "chief", "index": 0})", TrainingRole::kCoordinator, 0},
      {R"({"type": "coordinator"})", TrainingRole::kCoordinator, 0},
      {"{}", TrainingRole::kCoordinator, 0},  // no task: the coordinator, as without TF_CONFIG
      {R"({"type": "worker", "index": 2})", TrainingRole::kWorker, 2},
  };
  for (const Case& c : cases) {
    CAPTURE(c.task);
    absl::FlagSaver saver;
    TfConfig tf_config(TfConfigOf(c.task));
    const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
    REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
    CHECK(flags->mode == TrainingMode::kNetworked);
    CHECK(flags->role == c.role);
    CHECK(flags->task == c.index);
    CHECK(flags->parameter_servers.ps == 2);
    CHECK(flags->parameter_servers.workers == 3);
    REQUIRE(flags->parameter_servers.cluster.has_value());
    CHECK(flags->parameter_servers.cluster->source == "TF_CONFIG");
  }
}

TEST_CASE("--mode=net takes TF_CONFIG's cluster, and --mode=sim or local ignores it") {
  absl::FlagSaver saver;
  TfConfig tf_config(TfConfigOf(R"({"type": "worker", "index": 1})"));
  absl::SetFlag(&FLAGS_mode, "net");
  absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
  REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
  CHECK(flags->mode == TrainingMode::kNetworked);
  CHECK(flags->role == TrainingRole::kWorker);
  CHECK(flags->task == 1);
  for (const char* mode : {"sim", "local"}) {
    CAPTURE(mode);
    absl::SetFlag(&FLAGS_mode, mode);
    flags = ReadTrainingFlags();
    REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
    CHECK(flags->mode == (std::string(mode) == "sim" ? TrainingMode::kSimulation
                                                     : TrainingMode::kLocal));
    CHECK_FALSE(flags->parameter_servers.cluster.has_value());
  }
}

TEST_CASE("--role and --task override TF_CONFIG's task") {
  absl::FlagSaver saver;
  TfConfig tf_config(TfConfigOf(R"({"type": "worker", "index": 2})"));
  SUBCASE("--task alone: the worker role of TF_CONFIG, the flag's index") {
    absl::SetFlag(&FLAGS_task, 0);
    const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
    REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
    CHECK(flags->role == TrainingRole::kWorker);
    CHECK(flags->task == 0);
  }
  SUBCASE("--role=worker alone keeps TF_CONFIG's worker index") {
    absl::SetFlag(&FLAGS_role, "worker");
    const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
    REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
    CHECK(flags->task == 2);
  }
  SUBCASE("--role=coordinator makes it the coordinator") {
    absl::SetFlag(&FLAGS_role, "coordinator");
    const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
    REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
    CHECK(flags->role == TrainingRole::kCoordinator);
  }
}

TEST_CASE("--cluster_spec comes before TF_CONFIG, and its \"task\" before TF_CONFIG's") {
  absl::FlagSaver saver;
  TfConfig tf_config(
      R"({"cluster": {"ps": ["h:1"], "worker": ["h:2"], "chief": ["h:3"]},
          "task": {"type": "worker", "index": 0}})");
  {
    SpecFile spec(R"({"type": "worker", "index": 1})");
    absl::SetFlag(&FLAGS_cluster_spec, spec.path());
    const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
    REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
    CHECK(flags->parameter_servers.ps == 2);  // the file's cluster
    CHECK(flags->parameter_servers.workers == 3);
    CHECK(flags->role == TrainingRole::kWorker);
    CHECK(flags->task == 1);  // the file's task
  }
  {
    SpecFile spec;  // no task: TF_CONFIG's
    absl::SetFlag(&FLAGS_cluster_spec, spec.path());
    const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
    REQUIRE_MESSAGE(flags.ok(), flags.status().ToString());
    CHECK(flags->parameter_servers.workers == 3);
    CHECK(flags->role == TrainingRole::kWorker);
    CHECK(flags->task == 0);
  }
}

TEST_CASE("a TF_CONFIG that cannot be used is InvalidArgument naming TF_CONFIG") {
  struct Case {
    std::string tf_config;
    const char* message_part;
  };
  const Case cases[] = {
      {R"({"cluster": )", "TF_CONFIG: not valid JSON"},
      {TfConfigOf(R"({"type": "ps", "index": 1})"),
       "TF_CONFIG: task {\"type\": \"ps\", \"index\": 1} is a parameter server: start `tessera "
       "ps` for it"},
      {R"({"cluster": {"ps": ["h:1"], "worker": ["h:2"], "chief": ["h:3"], "ps_standby": ["h:4"]},
          "task": {"type": "ps_standby", "index": 0}})",
       "TF_CONFIG: task {\"type\": \"ps_standby\", \"index\": 0} is a parameter server"},
      {TfConfigOf(R"({"type": "evaluator", "index": 0})"),
       "TF_CONFIG: task type \"evaluator\" has no Tessera process"},
      {TfConfigOf(R"({"type": "master", "index": 0})"), "TF_CONFIG: unknown task type \"master\""},
      {TfConfigOf(R"({"type": "worker", "index": 5})"),
       "TF_CONFIG: task {\"type\": \"worker\", \"index\": 5} is not in the cluster: TF_CONFIG has "
       "3 \"worker\" addresses"},
      {R"({"task": {"type": "worker", "index": 0}})", "TF_CONFIG: task"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.tf_config);
    absl::FlagSaver saver;
    TfConfig tf_config(c.tf_config);
    CheckInvalid(ReadTrainingFlags(), c.message_part);
  }
}

TEST_CASE("a coordinator whose port another process listens on is refused at once, naming it") {
  absl::FlagSaver saver;
  std::optional<testing::Listener> listener(std::in_place);
  const auto port = static_cast<uint16_t>(listener->port());
  TfConfig tf_config(TfConfigOf(R"({"type": "chief", "index": 0})", port));
  const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
  listener.reset();
  CHECK(flags.status().code() == absl::StatusCode::kUnavailable);
  CHECK_MESSAGE(absl::StrContains(flags.status().message(),
                                  absl::StrCat("the coordinator cannot listen on 127.0.0.1:", port,
                                               ": another process listens on port ", port)),
                flags.status());
  CHECK_MESSAGE(absl::StrContains(flags.status().message(),
                                  absl::StrCat("change the coordinator's (\"chief\") address "
                                               "127.0.0.1:", port, " in TF_CONFIG")),
                flags.status());
  // A worker does not listen: the same TF_CONFIG with a worker task is fine.
  TfConfig worker(TfConfigOf(R"({"type": "worker", "index": 0})", port));
  CHECK(ReadTrainingFlags().ok());
}

TEST_CASE("--dashboard_port asks for a dashboard, and bad ports, a busy one and misuse are refused") {
  TfConfig no_tf_config(std::nullopt);
  {
    absl::FlagSaver saver;
    const absl::StatusOr<TrainingFlags> none = ReadTrainingFlags();
    REQUIRE(none.ok());
    CHECK_FALSE(none->dashboard.has_value());
    absl::SetFlag(&FLAGS_dashboard_port, 0);
    absl::SetFlag(&FLAGS_dashboard_keep_serving, true);
    const absl::StatusOr<TrainingFlags> free = ReadTrainingFlags();
    REQUIRE(free.ok());
    REQUIRE(free->dashboard.has_value());
    CHECK(free->dashboard->port == 0);
    CHECK(free->dashboard->host == "127.0.0.1");
    CHECK(free->dashboard_keep_serving);
  }
  for (const int32_t port : {-2, 65536}) {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_dashboard_port, port);
    CheckInvalid(ReadTrainingFlags(), "--dashboard_port must be -1 (none), 0");
  }
  {
    absl::FlagSaver saver;
    absl::SetFlag(&FLAGS_dashboard_keep_serving, true);
    CheckInvalid(ReadTrainingFlags(), "--dashboard_keep_serving keeps the dashboard up: it needs");
  }
  {
    absl::FlagSaver saver;  // a worker process serves no dashboard
    TfConfig worker(TfConfigOf(R"({"type": "worker", "index": 0})"));
    absl::SetFlag(&FLAGS_dashboard_port, 0);
    CheckInvalid(ReadTrainingFlags(), "a worker process serves no dashboard");
  }
  {
    absl::FlagSaver saver;  // a port another process listens on: at once, naming the flag
    testing::Listener listener;
    absl::SetFlag(&FLAGS_dashboard_port, listener.port());
    const absl::StatusOr<TrainingFlags> busy = ReadTrainingFlags();
    CHECK(busy.status().code() == absl::StatusCode::kUnavailable);
    CHECK_MESSAGE(absl::StrContains(busy.status().message(), "--dashboard_port"), busy.status());
  }
  CHECK(IsLoopbackHost("127.0.0.1"));
  CHECK(IsLoopbackHost("localhost"));
  CHECK(IsLoopbackHost("::1"));
  CHECK_FALSE(IsLoopbackHost("0.0.0.0"));
  CHECK_FALSE(IsLoopbackHost("10.0.0.5"));
}

TEST_CASE("the help groups name every shared flag once") {
  std::vector<std::string> names;
  for (const FlagGroup& group : TrainingFlagGroups()) {
    for (const std::string& flag : group.flags) {
      CHECK_MESSAGE(absl::FindCommandLineFlag(flag) != nullptr, flag);
      names.push_back(flag);
    }
  }
  std::sort(names.begin(), names.end());
  CHECK(std::adjacent_find(names.begin(), names.end()) == names.end());
  // Every flag defined in training_flags.cc is in a group.
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (absl::EndsWith(flag->Filename(), "coordinator/training/training_flags.cc")) {
      CHECK_MESSAGE(std::binary_search(names.begin(), names.end(), std::string(name)), name);
    }
  }
}

}  // namespace
}  // namespace tessera
