// The record of one training run as it goes: what the run is (its configuration, the version,
// when it started, the steps it runs), how it goes (one point per interval: the step, the
// throughput, the mean training loss, the cluster's queue and failures), its validations and its
// events (checkpoints written, parameter servers recovered), and how it ended. The one source the
// coordinator's dashboard, the --summary JSON and the --metrics_file lines all read.
//
// The driver writes (RunTrainingLoop records every completed step, validation and checkpoint);
// anything else reads a copy (Snapshot) at any time. Points are closed by the recording call
// itself once an interval (1 s by default) has passed: the monitor has no thread of its own.
//
// Example:
//   auto monitor = std::make_shared<TrainingMonitor>();
//   monitor->SetConfiguration({{"workload", "recsys"}, {"batch_size", 512}});
//   monitor->BeginTraining(/*first_step=*/0, /*total_steps=*/1954);
//   for (...) monitor->RecordStep(step, examples, loss, [&] { return ReadClusterFigures(c); });
//   monitor->RecordEvaluation(step, eval);
//   monitor->EndTraining();
//   monitor->Finish(absl::OkStatus());
//   // elsewhere, any thread: serve TrainingMonitor::ToJson(monitor->Snapshot(500))
//
// Thread-safety: every method may be called from any thread; recording is meant for one thread
// (the driver's), whose calls are then recorded in order. Recording a step takes a mutex and
// allocates nothing beyond the amortized growth of the points' vector.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "core/training/evaluation.h"

namespace tessera {

// What the cluster says at the close of an interval (ReadClusterFigures).
struct ClusterFigures {
  int64_t queue_depth = 0;         // closures waiting to run
  int64_t running = 0;             // closures running
  int64_t closures_completed = 0;  // since the coordinator started
  int64_t worker_failures = 0;
  int64_t worker_restarts = 0;
  std::vector<PsRecovery> recoveries;  // every PS recovery so far, oldest first
};

// The coordinator's figures: stats(), workers() (a request to its actor) and recoveries().
ClusterFigures ReadClusterFigures(const ClusterCoordinator& coordinator);

// One interval of training.
struct MonitorPoint {
  int64_t step = 0;               // the global step reached at the interval's close
  double unix_time = 0;           // the close, seconds since the Unix epoch
  double seconds = 0;             // the close, seconds since the run started
  double interval_seconds = 0;    // the interval's length
  int64_t steps = 0;              // steps completed in the interval
  int64_t examples = 0;           // examples those steps trained on
  double examples_per_sec = 0;    // examples / interval_seconds
  double loss = 0;                // their example-weighted mean training loss (0 without steps)
  std::optional<ClusterFigures> cluster;  // when the recorder supplied them (recoveries cleared)
};

// A validation (or, `final`, the trained model's evaluation) at a global step.
struct MonitorEvaluation {
  int64_t step = 0;
  double unix_time = 0;
  double seconds = 0;  // since the run started
  bool final = false;
  EvalResult result;
};

// Something that happened once: a checkpoint written, a parameter server recovered.
struct MonitorEvent {
  enum class Kind { kCheckpoint, kPsRecovery };
  Kind kind = Kind::kCheckpoint;
  int64_t step = 0;               // the checkpoint's step; for a recovery, the step trained then
  double unix_time = 0;
  double seconds = 0;             // since the run started
  double duration_seconds = 0;    // the save's, or the recovery's (PsRecovery::seconds)
  std::string where;              // the checkpoint's directory, or the recovered node
  int32_t ps_task = -1;           // a recovery's PS task
  int64_t lost_steps = 0;         // a recovery's steps lost (PsRecovery::lost_steps)
};

// A copy of the record at one moment.
struct MonitorSnapshot {
  nlohmann::json configuration = nlohmann::json::object();
  std::string version;            // tessera/version.h
  double start_unix_time = 0;     // when the monitor was made: the run's start
  std::string start_time;         // the same, ISO-8601 UTC ("2026-11-23T12:15:49.123Z")
  std::string status;             // "starting", "training", "finished" or "failed"
  std::string error;              // a failed run's error
  std::optional<double> end_unix_time;
  std::string end_time;           // ISO-8601 UTC once finished, else ""
  int64_t first_step = 0;         // where training started (a resumed run's checkpoint step)
  int64_t total_steps = 0;        // the step training ends at
  int64_t step = 0;               // the latest global step completed
  int64_t examples = 0;           // examples this run trained on so far
  double training_seconds = 0;    // since BeginTraining (until Finish)
  // Points, oldest first; with a cap, consecutive points merged (point_stride of them each).
  std::vector<MonitorPoint> points;
  int64_t points_recorded = 0;    // points before any merging
  int64_t point_stride = 1;
  std::vector<MonitorEvaluation> evaluations;
  std::vector<MonitorEvent> events;
  std::optional<ClusterFigures> cluster;  // the latest the recorder supplied (recoveries cleared)
};

class TrainingMonitor {
 public:
  struct Options {
    double interval_seconds = 1.0;  // a point per this much time (> 0)
    // A monotonic clock (seconds) for durations and the wall clock (Unix seconds) read once, at
    // construction; tests inject both. Point and event times are the start's wall clock plus
    // the monotonic time since.
    std::function<double()> monotonic_clock;  // default: std::chrono::steady_clock
    std::function<double()> unix_clock;       // default: std::chrono::system_clock
  };
  // Called (on the recording thread, without the monitor's lock) with every point, evaluation and
  // checkpoint once recorded, as the JSON lines of a metrics file (MetricsLine; a checkpoint's is
  // its event's ToJson).
  using LineSink = std::function<void(const nlohmann::json& line)>;

  TrainingMonitor();
  explicit TrainingMonitor(Options options);
  TrainingMonitor(const TrainingMonitor&) = delete;
  TrainingMonitor& operator=(const TrainingMonitor&) = delete;

  // Merges `fields` (an object) into the configuration; later values win.
  void SetConfiguration(const nlohmann::json& fields);
  // Sends every later point, evaluation and checkpoint to `sink` (null: none).
  void SetLineSink(LineSink sink);

  // Training starts at `first_step` (a resumed run's checkpoint step) and ends at `total_steps`:
  // the status becomes "training" and the first interval opens.
  void BeginTraining(int64_t first_step, int64_t total_steps);
  // Global step `step` completed (steps complete in order), training on `examples` examples with
  // mean loss `loss`. Closes the interval when due; `cluster` is then called (on this thread,
  // without the monitor's lock) for the point's cluster figures, and new PS recoveries among
  // them become events.
  void RecordStep(int64_t step, int64_t examples, double loss);
  void RecordStep(int64_t step, int64_t examples, double loss,
                  absl::FunctionRef<ClusterFigures()> cluster);
  // `steps` steps that completed together, up to global step `step` (those the loop took at
  // once: a drain of the steps in flight), on `examples` examples with mean loss `loss`:
  // recorded as one, so the interval closes at most once, after all of them. (One at a time, the
  // first would close a due interval and the rest open one that the end of training closes a
  // moment later: thousands of examples over a few milliseconds.)
  void RecordSteps(int64_t step, int64_t steps, int64_t examples, double loss,
                   absl::FunctionRef<ClusterFigures()> cluster);
  void RecordSteps(int64_t step, int64_t steps, int64_t examples, double loss);
  void RecordEvaluation(int64_t step, const EvalResult& result, bool final = false);
  // A checkpoint of `step` is written (durable) in `dir`; writing it took `seconds`. May come from
  // the thread that wrote it.
  void RecordCheckpoint(int64_t step, double seconds, const std::string& dir);
  // The training loop is over (joined): closes the open interval if it has steps, and stops
  // the training clock (training_seconds); the status stays "training" until Finish.
  void EndTraining();
  // Records `figures` now (new recoveries as events) without closing an interval.
  void RecordCluster(ClusterFigures figures);
  // Training is over (OK) or failed (`status`): closes the open interval if it has steps, sets
  // the end time and the status. Later calls change nothing.
  void Finish(const absl::Status& status);

  // A copy of the record. With `max_points` > 0 and more points than that, consecutive points
  // are merged (Note [Merged points]) into at most `max_points`.
  MonitorSnapshot Snapshot(int64_t max_points = 0) const;

  // The snapshot as JSON, for the dashboard (every field of MonitorSnapshot, by its name).
  static nlohmann::json ToJson(const MonitorSnapshot& snapshot);
  static nlohmann::json ToJson(const MonitorPoint& point);
  static nlohmann::json ToJson(const MonitorEvaluation& evaluation);
  static nlohmann::json ToJson(const MonitorEvent& event);
  // The --metrics_file line of a point ({"kind": "interval", step, time, seconds,
  // examples_per_sec, loss, queue_depth, closures_completed, worker_failures}) or of an
  // evaluation ({"kind": "evaluation", step, time, seconds, final, loss, examples, auc,
  // accuracy}).
  static nlohmann::json MetricsLine(const MonitorPoint& point);
  static nlohmann::json MetricsLine(const MonitorEvaluation& evaluation);

 private:
  void RecordStepsImpl(int64_t step, int64_t steps, int64_t examples, double loss,
                       const absl::FunctionRef<ClusterFigures()>* cluster);
  double Now() const;
  double UnixAt(double monotonic) const;
  // Whether the open interval is due to close at monotonic time `now`.
  bool DueLocked(double now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Closes the open interval at `now`; returns the point (for the sink).
  MonitorPoint CloseIntervalLocked(double now, std::optional<ClusterFigures> cluster)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteRecoveriesLocked(const ClusterFigures& figures, double now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Emit(const nlohmann::json& line) const;

  const double interval_seconds_;
  const std::function<double()> monotonic_clock_;
  const double start_monotonic_;
  const double start_unix_;

  mutable absl::Mutex mu_;
  LineSink sink_ ABSL_GUARDED_BY(mu_);
  nlohmann::json configuration_ ABSL_GUARDED_BY(mu_) = nlohmann::json::object();
  std::string status_ ABSL_GUARDED_BY(mu_) = "starting";
  std::string error_ ABSL_GUARDED_BY(mu_);
  std::optional<double> end_monotonic_ ABSL_GUARDED_BY(mu_);
  std::optional<double> training_start_ ABSL_GUARDED_BY(mu_);
  std::optional<double> training_end_ ABSL_GUARDED_BY(mu_);
  int64_t first_step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t total_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t step_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t examples_ ABSL_GUARDED_BY(mu_) = 0;
  // The open interval.
  double interval_start_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t interval_steps_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t interval_examples_ ABSL_GUARDED_BY(mu_) = 0;
  double interval_loss_sum_ ABSL_GUARDED_BY(mu_) = 0;  // loss * examples
  std::vector<MonitorPoint> points_ ABSL_GUARDED_BY(mu_);
  std::vector<MonitorEvaluation> evaluations_ ABSL_GUARDED_BY(mu_);
  std::vector<MonitorEvent> events_ ABSL_GUARDED_BY(mu_);
  std::optional<ClusterFigures> cluster_ ABSL_GUARDED_BY(mu_);
  size_t recoveries_seen_ ABSL_GUARDED_BY(mu_) = 0;
};

// "2026-11-23T12:15:49.123Z": `unix_seconds` as ISO-8601 UTC, to the millisecond.
std::string IsoUtc(double unix_seconds);

}  // namespace tessera
