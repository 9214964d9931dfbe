#include "coordinator/training/training_summary.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace tessera {

double ExamplesPerSecond(const TrainingRun& run) {
  return run.examples / std::max(run.wall_seconds, 1e-9);
}

void RecordRun(const TrainingRun& run, const std::string& workload, nlohmann::json& summary) {
  summary["workload"] = workload;
  summary["steps"] = run.steps;
  summary["examples"] = run.examples;
  summary["wall_seconds"] = run.wall_seconds;
  summary["startup_seconds"] = run.startup_seconds;
  summary["examples_per_sec"] = ExamplesPerSecond(run);
  if (!run.examples_per_sec_by_pass.empty()) {
    summary["examples_per_sec_by_pass"] = run.examples_per_sec_by_pass;
  }
  summary["final_loss"] = run.final_loss;
  summary["checkpoint_pause_seconds"] = run.checkpoint_pause_seconds;
  summary["checkpoint_wait_seconds"] = run.checkpoint_wait_seconds;
  nlohmann::json evaluations = nlohmann::json::array();
  for (const StepEvaluation& e : run.evaluations) {
    nlohmann::json point = {{"step", e.step}, {"loss", e.result.loss},
                            {"examples", e.result.examples}};
    if (e.result.auc.has_value()) point["auc"] = *e.result.auc;
    if (e.result.accuracy.has_value()) point["accuracy"] = *e.result.accuracy;
    if (e.result.rmse.has_value()) point["rmse"] = *e.result.rmse;
    if (e.result.mae.has_value()) point["mae"] = *e.result.mae;
    evaluations.push_back(std::move(point));
  }
  summary["evaluations"] = std::move(evaluations);
}

void RecordMonitor(const MonitorSnapshot& snapshot, nlohmann::json& summary) {
  const nlohmann::json record = TrainingMonitor::ToJson(snapshot);
  for (const char* key : {"version", "configuration", "start_time", "start_unix_time", "end_time",
                          "end_unix_time", "status", "events"}) {
    summary[key] = record[key];
  }
  summary["history"] = record["points"];
  nlohmann::json evaluations = nlohmann::json::array();
  for (const MonitorEvaluation& e : snapshot.evaluations) {
    if (!e.final) evaluations.push_back(TrainingMonitor::ToJson(e));
  }
  summary["evaluations"] = std::move(evaluations);
}

absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream out(path);
  out << summary.dump(2) << "\n";
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write the summary to ", path));
  return absl::OkStatus();
}

}  // namespace tessera
