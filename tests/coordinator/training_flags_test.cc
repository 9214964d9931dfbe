// ReadTrainingFlags: the shared flags of a training program and their validation.
#include "coordinator/training_flags.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"

ABSL_DECLARE_FLAG(std::string, mode);
ABSL_DECLARE_FLAG(std::string, checkpoint_dir);
ABSL_DECLARE_FLAG(bool, resume);
ABSL_DECLARE_FLAG(bool, overwrite_checkpoints);
ABSL_DECLARE_FLAG(std::string, cluster_spec);
ABSL_DECLARE_FLAG(std::string, role);
ABSL_DECLARE_FLAG(int32_t, task);
ABSL_DECLARE_FLAG(int32_t, min_workers);
ABSL_DECLARE_FLAG(int32_t, threads);
ABSL_DECLARE_FLAG(int32_t, ps);
ABSL_DECLARE_FLAG(int32_t, workers);
ABSL_DECLARE_FLAG(int32_t, closures_per_worker);
ABSL_DECLARE_FLAG(int64_t, checkpoint_every);
ABSL_DECLARE_FLAG(int32_t, inject_worker_failures);
ABSL_DECLARE_FLAG(int64_t, restart_delay_ms);
ABSL_DECLARE_FLAG(uint64_t, seed);
ABSL_DECLARE_FLAG(std::string, tls_cert);

namespace tessera {
namespace {

// A cluster spec of 2 PS and 3 workers in a temporary file, removed at the end of the scope.
class SpecFile {
 public:
  SpecFile()
      : path_((std::filesystem::temp_directory_path() /
               ("tessera_training_flags_test_" + std::to_string(getpid()) + ".json"))
                  .string()) {
    std::ofstream(path_) << R"({"cluster": {"ps": ["127.0.0.1:7001", "127.0.0.1:7002"],
        "worker": ["127.0.0.1:7101", "127.0.0.1:7102", "127.0.0.1:7103"],
        "coordinator": ["127.0.0.1:7000"]}})";
  }
  ~SpecFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

void CheckInvalid(const absl::StatusOr<TrainingFlags>& flags, const char* message_part) {
  CHECK(flags.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(absl::StrContains(flags.status().message(), message_part),
                flags.status().ToString());
}

TEST_CASE("the default flags train in the simulation as the coordinator") {
  absl::FlagSaver saver;
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
  CHECK(flags->parameter_servers.cluster->coordinator.ToString() == "127.0.0.1:7000");
}

TEST_CASE("inconsistent flags are InvalidArgument saying which") {
  struct Case {
    const char* what;
    void (*set)(const std::string& spec);
    const char* message_part;
  };
  const Case cases[] = {
      {"unknown mode", [](const std::string&) { absl::SetFlag(&FLAGS_mode, "cloud"); },
       "--mode must be sim or local, not cloud"},
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
         absl::SetFlag(&FLAGS_role, "chief");
       },
       "--role must be coordinator or worker, not chief"},
      {"more workers to wait for than the spec has",
       [](const std::string& spec) {
         absl::SetFlag(&FLAGS_cluster_spec, spec);
         absl::SetFlag(&FLAGS_min_workers, 4);
       },
       "--min_workers must be in 1..3"},
      {"a negative checkpoint cadence",
       [](const std::string&) { absl::SetFlag(&FLAGS_checkpoint_every, -5); },
       "--checkpoint_every must be >= 0, not -5"},
      {"no parameter servers",
       [](const std::string&) { absl::SetFlag(&FLAGS_ps, 0); }, "--ps must be >= 1, not 0"},
      {"no workers",
       [](const std::string&) { absl::SetFlag(&FLAGS_workers, -2); },
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
  for (const Case& c : cases) {
    CAPTURE(c.what);
    absl::FlagSaver saver;
    c.set(spec.path());
    CheckInvalid(ReadTrainingFlags(), c.message_part);
  }
}

TEST_CASE("a cluster spec that cannot be read is an error naming it") {
  absl::FlagSaver saver;
  absl::SetFlag(&FLAGS_cluster_spec, "/nonexistent/spec.json");
  const absl::StatusOr<TrainingFlags> flags = ReadTrainingFlags();
  CHECK(absl::IsNotFound(flags.status()));
  CHECK(absl::StrContains(flags.status().message(), "/nonexistent/spec.json"));
}

}  // namespace
}  // namespace tessera
