// RunTrainingJob end to end on a tiny recsys problem: the single-thread baseline and the
// in-process parameter servers, each evaluated, reported and summarized.
#include "coordinator/training/training_job.h"

#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "coordinator/checkpoint/checkpoint_manager.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/training/training_summary.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "tessera/version.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"
#include "tests/status_util.h"
#include "tests/temp_dir.h"

namespace tessera {
namespace {

// A small recsys job whose report records the evaluation it was handed.
TrainingJob SmallRecsysJob(EvalResult* reported) {
  RecsysConfig config;
  config.num_users = 200;
  config.num_items = 50;
  config.num_train = 4000;
  config.num_test = 1000;
  absl::StatusOr<RecsysData> data = GenerateRecsysData(config);
  REQUIRE(data.ok());
  RecsysModelOptions options;
  options.num_users = config.num_users;
  options.num_items = config.num_items;
  options.embedding_dim = 8;
  options.hidden_units = 16;
  absl::StatusOr<ModelSpec> spec = RecsysModelSpec(options);
  REQUIRE(spec.ok());

  TrainingJob job;
  job.name = "tiny";
  job.model = *spec;
  job.optimizer = {"adagrad", {{"learning_rate", 0.1}}};
  job.train = data->train;
  job.test = data->test;
  job.batch_size = 256;
  job.steps = *TrainingSteps(0, 1, job.train, job.batch_size);
  job.report = [reported](const EvalResult& eval, nlohmann::json& summary) {
    *reported = eval;
    summary["test_loss"] = eval.loss;
  };
  return job;
}

std::string SummaryPath(const char* mode) {
  return (std::filesystem::temp_directory_path() /
          ("tessera_training_job_test_" + std::to_string(getpid()) + "_" + mode + ".json"))
      .string();
}

TEST_CASE("a job without training examples is refused before it starts, not trained for 0 steps") {
  const Dataset empty;
  REQUIRE(empty.size() == 0);
  const absl::StatusOr<int64_t> steps = TrainingSteps(0, 1, empty, 32);
  CHECK(absl::IsInvalidArgument(steps.status()));
  CHECK(absl::StrContains(steps.status().message(), "no examples"));
  CHECK(absl::IsInvalidArgument(TrainingSteps(10, 1, empty, 32).status()));

  EvalResult reported;
  reported.examples = -1;  // a report would overwrite it
  TrainingJob job = SmallRecsysJob(&reported);
  job.train = empty;
  job.steps = 10;
  TrainingFlags flags;
  flags.mode = TrainingMode::kLocal;
  const absl::Status status = RunTrainingJob(job, flags);
  CHECK(absl::IsInvalidArgument(status));
  CHECK(absl::StrContains(status.message(), "no examples"));
  CHECK(reported.examples == -1);  // no evaluation reported as if it had trained
}

TEST_CASE("a model input the data does not provide is refused before the start, listing the data") {
  struct Case {
    const char* name;
    std::function<void(ModelSpec&)> change;
    const char* says;
  };
  const Case cases[] = {
      {"a typo", [](ModelSpec& m) { m.inputs.at(0).name = "usr"; }, "'usr' (ids) is not in it"},
      {"another kind", [](ModelSpec& m) { m.inputs.at(0).kind = InputKind::kIdList; },
       "'user' is id_list in the model but ids in it"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    EvalResult reported;
    reported.examples = -1;
    TrainingJob job = SmallRecsysJob(&reported);
    REQUIRE(job.model.inputs.at(0).name == "user");
    c.change(job.model);
    TrainingFlags flags;
    flags.mode = TrainingMode::kLocal;
    const absl::Status status = RunTrainingJob(job, flags);
    CHECK_MESSAGE(absl::IsInvalidArgument(status), status.ToString());
    CHECK_MESSAGE(absl::StrContains(status.message(), c.says), status.message());
    CHECK_MESSAGE(absl::StrContains(status.message(), "training data"), status.message());
    CHECK_MESSAGE(absl::StrContains(status.message(), "The data has ids [item, user]"),
                  status.message());
    CHECK(reported.examples == -1);  // refused before training
  }
  // The test set is checked too: one without the item column.
  EvalResult reported;
  TrainingJob job = SmallRecsysJob(&reported);
  Batch rows = testing::ValueOrDie(job.test.Slice(0, job.test.size()));
  rows.ids.erase("item");
  job.test = testing::ValueOrDie(Dataset::Create(std::move(rows)));
  TrainingFlags flags;
  flags.mode = TrainingMode::kLocal;
  const absl::Status status = RunTrainingJob(job, flags);
  CHECK(absl::IsInvalidArgument(status));
  CHECK_MESSAGE(absl::StrContains(status.message(), "the test data does not provide: 'item' (ids)"),
                status.message());
}

TEST_CASE("a label the loss does not take is refused before the start, naming where it is") {
  EvalResult reported;
  reported.examples = -1;
  TrainingJob job = SmallRecsysJob(&reported);
  Batch rows = testing::ValueOrDie(job.train.Slice(0, job.train.size()));
  rows.labels.values()[17] = 2;  // a binary model's label
  job.train = testing::ValueOrDie(Dataset::Create(std::move(rows)));
  TrainingFlags flags;
  flags.mode = TrainingMode::kLocal;
  const absl::Status status = RunTrainingJob(job, flags);
  CHECK(absl::IsInvalidArgument(status));
  CHECK_MESSAGE(absl::StrContains(status.message(),
                                  "the training data's label 2 at example 17 is not in [0, 1], "
                                  "which sigmoid_cross_entropy takes"),
                status.message());
  CHECK(reported.examples == -1);
}

TEST_CASE("every output path is checked before the first step, naming its flag") {
  testing::TempDir dir;
  const std::string file = dir.path() + "/a_file";
  std::ofstream(file) << "in the way";
  struct Case {
    const char* flag;
    std::function<void(TrainingFlags&)> set;
  };
  const Case cases[] = {
      {"--export_dir", [&](TrainingFlags& f) { f.parameter_servers.export_dir = file + "/model"; }},
      {"--checkpoint_dir",
       [&](TrainingFlags& f) { f.parameter_servers.checkpoint_dir = file + "/ckpt/deeper"; }},
      {"--summary", [&](TrainingFlags& f) { f.summary = file + "/summary.json"; }},
  };
  for (const Case& c : cases) {
    EvalResult reported;
    reported.examples = -1;
    const TrainingJob job = SmallRecsysJob(&reported);
    TrainingFlags flags;
    flags.mode = TrainingMode::kLocal;
    c.set(flags);
    const absl::Status status = RunTrainingJob(job, flags);
    CHECK_MESSAGE(absl::IsInvalidArgument(status), c.flag, ": ", status.ToString());
    CHECK_MESSAGE(absl::StartsWith(status.message(), c.flag), status.message());
    CHECK(reported.examples == -1);  // refused before training, not at its end
  }
  // A path that can be written passes, and the check leaves nothing behind: no probe file, no
  // directory made (local training writes no checkpoints, so nothing else makes it).
  TrainingFlags flags;
  flags.mode = TrainingMode::kLocal;
  flags.parameter_servers.checkpoint_dir = dir.path() + "/not/yet";
  EvalResult reported;
  testing::CheckOk(RunTrainingJob(SmallRecsysJob(&reported), flags));
  CHECK_FALSE(std::filesystem::exists(dir.path() + "/not"));
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    CHECK_MESSAGE(entry.path().filename() == "a_file", entry.path().string());
  }
}

TEST_CASE("TrainingSteps counts a partial last batch and refuses a schedule that is no schedule") {
  absl::StatusOr<RecsysData> data = GenerateRecsysData({200, 50, 8, 0.5, 1000, 10});
  REQUIRE(data.ok());
  CHECK(*TrainingSteps(0, 1, data->train, 256) == 4);
  CHECK(*TrainingSteps(0, 3, data->train, 250) == 12);
  CHECK(*TrainingSteps(7, 3, data->train, 250) == 7);  // --steps wins over --epochs
  CHECK(*TrainingSteps(0, 1, data->train, std::numeric_limits<int64_t>::max()) == 1);
  struct Case {
    int64_t steps, epochs, batch_size;
    const char* message;
  };
  const Case cases[] = {
      {0, 1, 0, "--batch_size must be >= 1, not 0"},
      {0, 1, -3, "--batch_size must be >= 1, not -3"},
      {-5, 1, 256, "--steps must be >= 0 (0: --epochs passes), not -5"},
      {0, 0, 256, "--epochs must be >= 1, not 0"},
      {0, -1, 256, "--epochs must be >= 1, not -1"},
      {0, std::numeric_limits<int64_t>::max(), 256, "is more steps than can be counted"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.message);
    const absl::StatusOr<int64_t> steps = TrainingSteps(c.steps, c.epochs, data->train, c.batch_size);
    CHECK(steps.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(absl::StrContains(steps.status().message(), c.message));
  }
}

TEST_CASE("a job trains, validates every --eval_every steps, evaluates, reports and writes its "
          "summary in every mode") {
  for (const TrainingMode mode : {TrainingMode::kLocal, TrainingMode::kSimulation}) {
    const bool local = mode == TrainingMode::kLocal;
    CAPTURE(local);
    EvalResult reported;
    reported.examples = -1;
    const TrainingJob job = SmallRecsysJob(&reported);
    TrainingFlags flags;
    flags.mode = mode;
    flags.parameter_servers.ps = 2;
    flags.parameter_servers.workers = 2;
    flags.summary = SummaryPath(local ? "local" : "sim");
    flags.metrics_file = SummaryPath(local ? "local_metrics" : "sim_metrics");
    flags.eval_every = 5;
    const absl::Status status = RunTrainingJob(job, flags);
    REQUIRE_MESSAGE(status.ok(), status.ToString());

    CHECK(reported.examples == 1000);  // the whole test set, once
    std::ifstream in(flags.summary);
    const nlohmann::json summary = nlohmann::json::parse(in);
    std::filesystem::remove(flags.summary);
    CHECK(summary["workload"] == "tiny");
    CHECK(summary["mode"] == (local ? "local" : "sim"));
    CHECK(summary["steps"] == 16);
    CHECK(summary["examples"] == 4000);
    CHECK(summary["test_loss"] == reported.loss);
    // Validations at steps 5, 10 and 15 (not 16: the final evaluation is the report's), each over
    // the whole test set; on parameter servers each is one closure per test batch (1000 examples:
    // two batches of kEvalBatchSize), beside the 16 train steps and the final evaluation's.
    REQUIRE(summary["evaluations"].size() == 3);
    for (int k = 0; k < 3; ++k) {
      CAPTURE(k);
      const nlohmann::json& point = summary["evaluations"][k];
      CHECK(point["step"] == 5 * (k + 1));
      CHECK(point["examples"] == 1000);
      CHECK(point["auc"].get<double>() > 0.4);
      CHECK(point["loss"].get<double>() > 0);
    }
    CHECK(summary["closures_completed"] == (local ? 0 : 16 + 4 * 2));
    // One whole pass over the training set (16 steps of 256 of 4000 examples), counted the same
    // way in every mode (one training loop).
    REQUIRE(summary["examples_per_sec_by_pass"].size() == 1);
    CHECK(summary["examples_per_sec_by_pass"][0].get<double>() > 0);

    // The monitor's record: the configuration, the version, the times, the history.
    CHECK(summary["version"] == std::string(Version()));
    CHECK(summary["status"] == "finished");
    CHECK(summary["configuration"]["workload"] == "tiny");
    CHECK(summary["configuration"]["mode"] == (local ? "local" : "sim"));
    CHECK(summary["configuration"]["batch_size"] == 256);
    CHECK(summary["configuration"]["steps"] == 16);
    CHECK(summary["configuration"]["optimizer"]["name"] == "adagrad");
    CHECK(summary["configuration"]["model"]["parameters"].get<int64_t>() > 0);
    CHECK(summary["configuration"].contains("ps") == !local);
    CHECK(summary["start_time"].get<std::string>().size() == 24);  // 2026-11-23T12:15:49.123Z
    CHECK(summary["end_unix_time"].get<double>() >= summary["start_unix_time"].get<double>());
    int64_t history_examples = 0, last_step = 0;
    for (const nlohmann::json& point : summary["history"]) {
      history_examples += point["examples"].get<int64_t>();
      CHECK(point["step"].get<int64_t>() > last_step);
      last_step = point["step"];
      CHECK(point.contains("queue_depth") == !local);
    }
    CHECK(history_examples == 4000);  // every step in one point
    CHECK(last_step == 16);
    CHECK(summary["evaluations"][0]["time"].get<double>() >=
          summary["start_unix_time"].get<double>());

    // The metrics file: the same intervals and the evaluations (the final one too), a line each.
    std::ifstream metrics(flags.metrics_file);
    std::vector<nlohmann::json> lines;
    for (std::string line; std::getline(metrics, line);) lines.push_back(nlohmann::json::parse(line));
    std::filesystem::remove(flags.metrics_file);
    int64_t intervals = 0, evaluations = 0, finals = 0;
    for (const nlohmann::json& line : lines) {
      if (line["kind"] == "interval") {
        ++intervals;
        CHECK(line.contains("examples_per_sec"));
        CHECK(line.contains("closures_completed") == !local);
      } else {
        CHECK(line["kind"] == "evaluation");
        ++evaluations;
        if (line["final"] == true) {
          ++finals;
          CHECK(line["step"] == 16);
          CHECK(line["loss"] == reported.loss);
        }
      }
    }
    CHECK(intervals == static_cast<int64_t>(summary["history"].size()));
    CHECK(evaluations == 4);
    CHECK(finals == 1);
  }
}

TEST_CASE("a run on parameter servers records the examples/s of each whole pass, in order") {
  EvalResult reported;
  TrainingJob job = SmallRecsysJob(&reported);
  job.steps = 40;  // two passes of 16 steps, and half of a third: not recorded
  TrainingFlags flags;
  flags.mode = TrainingMode::kSimulation;
  flags.parameter_servers.ps = 2;
  flags.parameter_servers.workers = 2;
  flags.summary = SummaryPath("passes");
  REQUIRE(RunTrainingJob(job, flags).ok());
  std::ifstream in(flags.summary);
  const nlohmann::json summary = nlohmann::json::parse(in);
  std::filesystem::remove(flags.summary);
  REQUIRE(summary["examples_per_sec_by_pass"].size() == 2);
  // Each pass is 4000 examples; the two took disjoint spans of the training loop.
  double pass_seconds = 0;
  for (const nlohmann::json& eps : summary["examples_per_sec_by_pass"]) {
    REQUIRE(eps.get<double>() > 0);
    pass_seconds += 4000 / eps.get<double>();
  }
  CHECK(pass_seconds <= summary["wall_seconds"].get<double>() + 1e-3);
  CHECK(pass_seconds >= summary["wall_seconds"].get<double>() * 0.3);  // 32 of its 40 steps
}

TEST_CASE("a run records into the monitor its caller holds, and a metrics file that cannot be "
          "written stops the run before it trains") {
  EvalResult reported;
  const TrainingJob job = SmallRecsysJob(&reported);
  TrainingFlags flags;
  auto monitor = std::make_shared<TrainingMonitor>();
  REQUIRE(RunTrainingJob(job, flags, monitor).ok());
  const MonitorSnapshot snapshot = monitor->Snapshot();
  CHECK(snapshot.status == "finished");
  CHECK(snapshot.step == 16);
  CHECK(snapshot.examples == 4000);
  CHECK(snapshot.configuration["workload"] == "tiny");
  REQUIRE_FALSE(snapshot.evaluations.empty());
  CHECK(snapshot.evaluations.back().final);

  monitor = std::make_shared<TrainingMonitor>();
  flags.metrics_file = "/nonexistent/dir/metrics.jsonl";
  const absl::Status refused = RunTrainingJob(job, flags, monitor);
  CHECK(absl::IsInvalidArgument(refused));
  CHECK_MESSAGE(absl::StrContains(refused.message(), "--metrics_file"), refused.ToString());
  CHECK(absl::StrContains(refused.message(), "/nonexistent/dir/metrics.jsonl"));
  CHECK(monitor->Snapshot().status == "starting");  // never trained
}

RunId RunOf(const std::string& checkpoint) {
  absl::StatusOr<CheckpointManifest> manifest = ReadManifest(checkpoint);
  REQUIRE_MESSAGE(manifest.ok(), manifest.status().ToString());
  return manifest->run_id;
}

// 2 PS and 2 workers, checkpointing into `dir`.
TrainingFlags CheckpointingFlags(const std::string& dir) {
  TrainingFlags flags;
  flags.parameter_servers.ps = 2;
  flags.parameter_servers.workers = 2;
  flags.parameter_servers.checkpoint_dir = dir;
  return flags;
}

TEST_CASE(
    "a new run refuses another run's checkpoints unless told to overwrite them, and a "
    "resume then continues the new run") {
  testing::TempDir root;
  const std::string dir = root.path() + "/ckpt";
  EvalResult reported;
  const TrainingJob job = SmallRecsysJob(&reported);  // 16 steps
  TrainingFlags flags = CheckpointingFlags(dir);
  flags.parameter_servers.checkpoint_every = 8;
  REQUIRE(RunTrainingJob(job, flags).ok());
  const std::vector<std::string> old_checkpoints = {dir + "/ckpt-8", dir + "/ckpt-16"};
  CHECK(CheckpointManager(dir, 3).Checkpoints() == old_checkpoints);
  const RunId old_run = RunOf(dir + "/ckpt-16");

  // A new, shorter run pointed at the same directory. It used to write its ckpt-4 next to the
  // old run's, retention then deleted it (the old steps were higher), and a resume continued the
  // old run from step 16.
  TrainingJob shorter = job;
  shorter.steps = 4;
  const absl::Status refused = RunTrainingJob(shorter, flags);
  CHECK(absl::IsFailedPrecondition(refused));
  CHECK_MESSAGE(absl::StrContains(refused.message(), dir + " already holds 2 checkpoint(s)"),
                refused.ToString());
  CHECK(absl::StrContains(refused.message(), "--overwrite_checkpoints"));
  CHECK(absl::StrContains(refused.message(), "--resume"));
  CHECK(CheckpointManager(dir, 3).Checkpoints() == old_checkpoints);  // untouched
  CHECK(RunOf(dir + "/ckpt-16") == old_run);

  flags.parameter_servers.overwrite_checkpoints = true;
  REQUIRE(RunTrainingJob(shorter, flags).ok());
  CHECK(CheckpointManager(dir, 3).Checkpoints() == std::vector<std::string>{dir + "/ckpt-4"});
  const RunId new_run = RunOf(dir + "/ckpt-4");
  CHECK(new_run != old_run);

  flags.parameter_servers.overwrite_checkpoints = false;
  flags.parameter_servers.resume = true;
  flags.summary = SummaryPath("resumed");
  REQUIRE(RunTrainingJob(job, flags).ok());
  std::ifstream in(flags.summary);
  const nlohmann::json summary = nlohmann::json::parse(in);
  std::filesystem::remove(flags.summary);
  CHECK(summary["first_step"] == 4);  // the new run's step, not the old run's 16
  CHECK(summary["global_step"] == 16);
  // The resumed run's history holds its own 12 steps, from step 5 to 16, and its final checkpoint.
  int64_t history_steps = 0;
  for (const nlohmann::json& point : summary["history"]) history_steps += point["steps"].get<int64_t>();
  CHECK(history_steps == 12);
  CHECK(summary["history"].back()["step"] == 16);
  REQUIRE(summary["events"].size() == 2);  // the checkpoint at step 8 and the final one at 16
  CHECK(summary["events"][0]["kind"] == "checkpoint");
  CHECK(summary["events"][0]["step"] == 8);
  CHECK(summary["events"][1]["dir"] == dir + "/ckpt-16");
  CHECK(CheckpointManager(dir, 3).Checkpoints() ==
        std::vector<std::string>{dir + "/ckpt-4", dir + "/ckpt-8", dir + "/ckpt-16"});
  CHECK(RunOf(dir + "/ckpt-16") == new_run);  // one run, continued
}

TEST_CASE("a checkpoint cadence in seconds checkpoints once that much training has passed") {
  testing::TempDir root;
  const std::string dir = root.path() + "/ckpt";
  EvalResult reported;
  const TrainingJob job = SmallRecsysJob(&reported);  // 16 steps
  TrainingFlags flags = CheckpointingFlags(dir);
  // An hour: only the final checkpoint.
  flags.parameter_servers.checkpoint_every_seconds = 3600;
  REQUIRE(RunTrainingJob(job, flags).ok());
  CHECK(CheckpointManager(dir, 3).Checkpoints() == std::vector<std::string>{dir + "/ckpt-16"});
  // A nanosecond: one after every step (each begins once the one before is written), of which
  // the last 3 are kept.
  flags.parameter_servers.overwrite_checkpoints = true;
  flags.parameter_servers.checkpoint_every_seconds = 1e-9;
  flags.summary = SummaryPath("every_nanosecond");
  REQUIRE(RunTrainingJob(job, flags).ok());
  CHECK(CheckpointManager(dir, 3).Checkpoints() ==
        std::vector<std::string>{dir + "/ckpt-14", dir + "/ckpt-15", dir + "/ckpt-16"});
  std::ifstream in(flags.summary);
  const nlohmann::json summary = nlohmann::json::parse(in);
  std::filesystem::remove(flags.summary);
  CHECK(summary["events"].size() == 16);  // steps 1 to 15 by time, and the final one
  // With a step cadence too, whichever comes first: every 8 steps, or after an hour.
  flags.parameter_servers.checkpoint_every = 8;
  flags.parameter_servers.checkpoint_every_seconds = 3600;
  flags.summary.clear();
  REQUIRE(RunTrainingJob(job, flags).ok());
  CHECK(CheckpointManager(dir, 3).Checkpoints() ==
        std::vector<std::string>{dir + "/ckpt-8", dir + "/ckpt-16"});
}

TEST_CASE("WriteSummary writes nothing without a path and fails on an unwritable one") {
  CHECK(WriteSummary("", nlohmann::json{{"a", 1}}).ok());
  CHECK(absl::IsUnavailable(WriteSummary("/nonexistent/dir/summary.json", {{"a", 1}})));
}

}  // namespace
}  // namespace tessera
