// TrainOnParameterServers (coordinator/ps/parameter_server_training.h) in the simulation: a tiny
// recsys job trained on in-process PS nodes and workers, its summary, its validations, its
// checkpoints (a fresh run refusing a directory that holds some, resuming from the latest), the
// export, the cluster hook, and the errors its header names. training_job_test.cc drives the same
// function through RunTrainingJob's flags.
#include "coordinator/ps/parameter_server_training.h"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"
#include "tests/coordinator/coordinator_test_util.h"
#include "tests/temp_dir.h"

namespace tessera {
namespace {

using testing::TempDir;
using testing::ValueOrDie;

// 600 training examples in batches of 100: 6 steps a pass.
TrainingJob SmallJob(int64_t steps = 6) {
  RecsysConfig config;
  config.num_users = 60;
  config.num_items = 20;
  config.num_train = 600;
  config.num_test = 200;
  const RecsysData data = ValueOrDie(GenerateRecsysData(config));
  RecsysModelOptions options;
  options.num_users = config.num_users;
  options.num_items = config.num_items;
  options.embedding_dim = 4;
  options.hidden_units = 8;
  TrainingJob job;
  job.name = "ps training test";
  job.model = ValueOrDie(RecsysModelSpec(options));
  job.optimizer = {"adagrad", {{"learning_rate", 0.1}}};
  job.train = data.train;
  job.test = data.test;
  job.batch_size = 100;
  job.steps = steps;
  return job;
}

ParameterServerTrainingOptions Options() {
  ParameterServerTrainingOptions options;
  options.ps = 2;
  options.workers = 2;
  return options;
}

TEST_CASE("a job trains on parameter servers, evaluates at the end and records its summary") {
  const TrainingJob job = SmallJob();
  nlohmann::json summary;
  const TrainingRun run =
      ValueOrDie(TrainOnParameterServers(job, Options(), /*eval_every=*/0, summary));
  CHECK(run.steps == 6);
  CHECK(run.examples == 600);
  REQUIRE(run.eval.has_value());
  CHECK(run.eval->examples == 200);
  CHECK(run.evaluations.empty());
  CHECK(run.examples_per_sec_by_pass.size() == 1);

  CHECK(summary["mode"] == "sim");
  CHECK(summary["ps"] == 2);
  CHECK(summary["workers"] == 2);
  CHECK(summary["closures_per_worker"] == 1);
  CHECK(summary["first_step"] == 0);
  CHECK(summary["global_step"] == 6);
  CHECK(summary["closures_completed"].get<int64_t>() >= 6);
  for (const char* field : {"partitioner", "closures_scheduled", "closures_retried",
                            "closures_cancelled", "worker_failures", "worker_restarts",
                            "ps_recoveries"}) {
    CAPTURE(field);
    CHECK(summary.contains(field));
  }
  CHECK_FALSE(summary.contains("checkpoint_seconds"));  // no checkpoint_dir
  CHECK_FALSE(summary.contains("restore_seconds"));     // not resumed
}

TEST_CASE("a job validates every eval_every steps, but not at the last, which it evaluates") {
  const TrainingJob job = SmallJob(/*steps=*/6);
  nlohmann::json summary;
  const TrainingRun run = ValueOrDie(TrainOnParameterServers(job, Options(), 2, summary));
  std::vector<int64_t> at;
  for (const StepEvaluation& e : run.evaluations) at.push_back(e.step);
  CHECK(at == std::vector<int64_t>{2, 4});
  REQUIRE(run.eval.has_value());
}

TEST_CASE("a job whose model or optimizer does not validate, or resumes from nowhere, is refused") {
  nlohmann::json summary;
  TrainingJob bad_optimizer = SmallJob();
  bad_optimizer.optimizer = {"no_such_rule", {}};
  CHECK(absl::IsInvalidArgument(
      TrainOnParameterServers(bad_optimizer, Options(), 0, summary).status()));
  TrainingJob bad_model = SmallJob();
  bad_model.model.params.clear();
  CHECK(absl::IsInvalidArgument(
      TrainOnParameterServers(bad_model, Options(), 0, summary).status()));
  ParameterServerTrainingOptions resume = Options();
  resume.resume = true;
  const absl::Status refused = TrainOnParameterServers(SmallJob(), resume, 0, summary).status();
  CHECK(absl::IsInvalidArgument(refused));
  CHECK(absl::StrContains(refused.message(), "--resume needs --checkpoint_dir"));
}

TEST_CASE("checkpoints are written as the cadence says and at the end, and a run resumes the latest") {
  TempDir dir;
  ParameterServerTrainingOptions options = Options();
  options.checkpoint_dir = dir.Sub("ckpt");
  options.checkpoint_every = 4;
  nlohmann::json summary;
  CHECK(ValueOrDie(TrainOnParameterServers(SmallJob(6), options, 0, summary)).steps == 6);
  CHECK(std::filesystem::is_directory(dir.Sub("ckpt/ckpt-4")));
  CHECK(std::filesystem::is_directory(dir.Sub("ckpt/ckpt-6")));
  CHECK(summary.contains("checkpoint_seconds"));

  // A fresh run refuses the directory that holds them, saying how to go on.
  nlohmann::json refused_summary;
  const absl::Status refused =
      TrainOnParameterServers(SmallJob(6), options, 0, refused_summary).status();
  CHECK_FALSE(refused.ok());
  CHECK(absl::StrContains(refused.message(), "--overwrite_checkpoints"));

  // Resumed for 3 more steps (on another PS count), it starts at the latest checkpoint's step.
  ParameterServerTrainingOptions resume = options;
  resume.resume = true;
  resume.ps = 1;
  nlohmann::json resumed;
  const TrainingRun run = ValueOrDie(TrainOnParameterServers(SmallJob(9), resume, 0, resumed));
  CHECK(run.steps == 3);
  CHECK(resumed["first_step"] == 6);
  CHECK(resumed["global_step"] == 9);
  CHECK(resumed.contains("restore_seconds"));
  CHECK(std::filesystem::is_directory(dir.Sub("ckpt/ckpt-9")));

  // With overwrite_checkpoints a fresh run deletes them and starts over.
  ParameterServerTrainingOptions overwrite = options;
  overwrite.overwrite_checkpoints = true;
  overwrite.checkpoint_every = 0;
  nlohmann::json fresh;
  CHECK(ValueOrDie(TrainOnParameterServers(SmallJob(2), overwrite, 0, fresh)).steps == 2);
  CHECK(fresh["first_step"] == 0);
  CHECK_FALSE(std::filesystem::exists(dir.Sub("ckpt/ckpt-9")));
  CHECK(std::filesystem::is_directory(dir.Sub("ckpt/ckpt-2")));
}

TEST_CASE("the trained model is exported when an export directory is given") {
  TempDir dir;
  ParameterServerTrainingOptions options = Options();
  options.export_dir = dir.Sub("export");
  nlohmann::json summary;
  REQUIRE(TrainOnParameterServers(SmallJob(2), options, 0, summary).ok());
  REQUIRE(std::filesystem::is_directory(options.export_dir));
  CHECK_FALSE(std::filesystem::is_empty(options.export_dir));
}

TEST_CASE("the cluster hook sees the cluster, then its coordinator, then both going") {
  struct Call {
    bool cluster;
    bool coordinator;
  };
  std::vector<Call> calls;
  const ParameterServerTrainingOptions options = Options();
  RunObservers observers;
  observers.on_cluster = [&calls](Cluster* cluster, ClusterCoordinator* coordinator) {
    calls.push_back({cluster != nullptr, coordinator != nullptr});
  };
  nlohmann::json summary;
  REQUIRE(TrainOnParameterServers(SmallJob(2), options, 0, summary, observers).ok());
  REQUIRE(calls.size() >= 3);
  CHECK(calls[0].cluster);
  CHECK_FALSE(calls[0].coordinator);
  CHECK(calls[1].cluster);
  CHECK(calls[1].coordinator);
  for (size_t i = 2; i < calls.size(); ++i) {
    CHECK_FALSE(calls[i].cluster);
    CHECK_FALSE(calls[i].coordinator);
  }

  // A run that fails after the cluster started still says it is going: its export cannot be
  // written (the export directory is a file).
  calls.clear();
  TempDir dir;
  ParameterServerTrainingOptions failing = options;
  failing.export_dir = dir.Sub("a_file");
  { std::ofstream(failing.export_dir) << "not a directory"; }
  CHECK_FALSE(TrainOnParameterServers(SmallJob(2), failing, 0, summary, observers).ok());
  REQUIRE_FALSE(calls.empty());
  CHECK(calls.front().cluster);
  CHECK_FALSE(calls.back().cluster);
  CHECK_FALSE(calls.back().coordinator);
}

TEST_CASE("a batch size below 1 is refused before any cluster starts") {
  // It once divided by the batch size after the cluster had started: a SIGFPE, not an error.
  int calls = 0;
  RunObservers observers;
  observers.on_cluster = [&calls](Cluster*, ClusterCoordinator*) { ++calls; };
  TrainingJob job = SmallJob(2);
  job.batch_size = 0;
  nlohmann::json summary;
  const absl::StatusOr<TrainingRun> run =
      TrainOnParameterServers(job, Options(), 0, summary, observers);
  REQUIRE_FALSE(run.ok());
  CHECK(run.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(run.status().message(), "batch size must be >= 1, got 0"));
  CHECK(calls == 0);
}

}  // namespace
}  // namespace tessera
