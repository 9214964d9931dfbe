// The JSON summary of a training run (--summary): what tests/e2e and bench/ scripts read.
//
// Fields: workload, steps, examples, wall_seconds, startup_seconds, examples_per_sec, final_loss,
// checkpoint_pause_seconds (training's wait for checkpoints' cuts) and evaluations ([{step, loss,
// examples, auc, accuracy}], auc and accuracy when the model has them) (RecordRun); the run's
// record from its TrainingMonitor (RecordMonitor): version, configuration, start_time, end_time
// (ISO-8601 UTC) and their _unix_time twins, status, history (the monitor's points: [{step, time,
// seconds, interval_seconds, steps, examples, examples_per_sec, loss, and queue_depth, running,
// closures_completed, worker_failures, worker_restarts on parameter servers}], at most
// kSummaryPoints, merged beyond), events (checkpoints and PS recoveries), and evaluations again
// with each validation's time and seconds; peak_rss_bytes (RunTrainingJob, once the run is over);
// mode, ps, workers, the closure and worker statistics, and each shard's optimizer step and
// repeated updates dropped (shards:
// [{name, ps_task, step, duplicate_updates}], duplicate_updates: their sum)
// (TrainOnParameterServers, TrainLocally); and a program's evaluation fields
// (test_loss, test_auc, ...).
//
// Thread-safety: pure functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "coordinator/monitoring/training_monitor.h"
#include "coordinator/training/training_run.h"

namespace tessera {

// Records `run` in `summary` as workload `workload`: steps, examples, wall_seconds,
// startup_seconds, examples_per_sec, final_loss and evaluations (the --eval_every validations).
void RecordRun(const TrainingRun& run, const std::string& workload, nlohmann::json& summary);

// The most points the summary's history holds (TrainingMonitor::Snapshot's cap).
constexpr int64_t kSummaryPoints = 2000;

// Records the monitor's `snapshot` of a finished run in `summary`: version, configuration,
// start_time, start_unix_time, end_time, end_unix_time, status, history and events; and
// evaluations (the validations, not the final evaluation) with the fields RecordRun writes plus
// time and seconds.
void RecordMonitor(const MonitorSnapshot& snapshot, nlohmann::json& summary);

// The run's training throughput: examples per second of the training loop.
double ExamplesPerSecond(const TrainingRun& run);

// Writes `summary` to `path`, pretty-printed (nothing when path is empty). Unavailable when the
// file cannot be written.
absl::Status WriteSummary(const std::string& path, const nlohmann::json& summary);

}  // namespace tessera
