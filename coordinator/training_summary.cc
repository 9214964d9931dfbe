#include "coordinator/training_summary.h"

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
  summary["examples_per_sec"] = ExamplesPerSecond(run);
  summary["final_loss"] = run.final_loss;
}

absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary) {
  if (path.empty()) return absl::OkStatus();
  std::ofstream out(path);
  out << summary.dump(2) << "\n";
  if (!out) return absl::UnavailableError(absl::StrCat("cannot write the summary to ", path));
  return absl::OkStatus();
}

}  // namespace tessera
