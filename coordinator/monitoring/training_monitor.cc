#include "coordinator/monitoring/training_monitor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <utility>

#include "absl/strings/str_format.h"
#include "tessera/version.h"

namespace tessera {
namespace {

double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double SystemSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

const char* KindName(MonitorEvent::Kind kind) {
  switch (kind) {
    case MonitorEvent::Kind::kCheckpoint:
      return "checkpoint";
    case MonitorEvent::Kind::kPsRecovery:
      return "ps_recovery";
  }
  return "unknown";
}

// Note [Merged points]
// A capped snapshot merges runs of `stride` consecutive points, the stride the smallest that
// brings the count under the cap, counted from the first point (the last merged point may hold
// fewer). A merged point is the interval the points cover together: the last one's step, times
// and cluster figures, the sums of their steps, examples and seconds, its rate the examples over
// the seconds and its loss the example-weighted mean. So a long run's curve keeps its shape and
// its totals, unlike keeping every stride-th point, which would drop most of the steps' losses.
MonitorPoint Merge(const MonitorPoint* begin, const MonitorPoint* end) {
  MonitorPoint merged = *(end - 1);
  merged.steps = 0;
  merged.examples = 0;
  merged.interval_seconds = 0;
  double loss_sum = 0;
  for (const MonitorPoint* p = begin; p != end; ++p) {
    merged.steps += p->steps;
    merged.examples += p->examples;
    merged.interval_seconds += p->interval_seconds;
    loss_sum += p->loss * static_cast<double>(p->examples);
  }
  merged.examples_per_sec =
      merged.interval_seconds > 0 ? merged.examples / merged.interval_seconds : 0;
  merged.loss = merged.examples > 0 ? loss_sum / merged.examples : 0;
  return merged;
}

nlohmann::json ClusterJson(const ClusterFigures& figures) {
  return {{"queue_depth", figures.queue_depth},
          {"running", figures.running},
          {"closures_completed", figures.closures_completed},
          {"worker_failures", figures.worker_failures},
          {"worker_restarts", figures.worker_restarts}};
}

void AddEvalFields(const EvalResult& result, nlohmann::json& out) {
  out["loss"] = result.loss;
  out["examples"] = result.examples;
  if (result.auc.has_value()) out["auc"] = *result.auc;
  if (result.accuracy.has_value()) out["accuracy"] = *result.accuracy;
  if (result.rmse.has_value()) out["rmse"] = *result.rmse;
  if (result.mae.has_value()) out["mae"] = *result.mae;
}

}  // namespace

ClusterFigures ReadClusterFigures(const ClusterCoordinator& coordinator) {
  const ClosureStats stats = coordinator.stats();
  const WorkerPoolStatus pool = coordinator.workers();
  ClusterFigures figures;
  figures.queue_depth = stats.queued;
  figures.running = stats.running;
  figures.closures_completed = stats.completed;
  figures.worker_failures = pool.worker_failures;
  figures.worker_restarts = pool.worker_restarts;
  figures.recoveries = coordinator.recoveries();
  return figures;
}

std::string IsoUtc(double unix_seconds) {
  const double floor = std::floor(unix_seconds);
  const std::time_t whole = static_cast<std::time_t>(floor);
  int millis = static_cast<int>(std::lround((unix_seconds - floor) * 1000));
  std::time_t shown = whole;
  if (millis == 1000) {
    millis = 0;
    ++shown;
  }
  std::tm utc{};
  gmtime_r(&shown, &utc);
  return absl::StrFormat("%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900, utc.tm_mon + 1,
                         utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec, millis);
}

TrainingMonitor::TrainingMonitor() : TrainingMonitor(Options{}) {}

TrainingMonitor::TrainingMonitor(Options options)
    : interval_seconds_(options.interval_seconds > 0 ? options.interval_seconds : 1.0),
      monotonic_clock_(options.monotonic_clock ? std::move(options.monotonic_clock)
                                                  : std::function<double()>(SteadySeconds)),
      start_monotonic_(monotonic_clock_()),
      start_unix_(options.unix_clock ? options.unix_clock() : SystemSeconds()) {}


double TrainingMonitor::Now() const { return monotonic_clock_(); }

double TrainingMonitor::UnixAt(double monotonic) const {
  return start_unix_ + (monotonic - start_monotonic_);
}

void TrainingMonitor::SetConfiguration(const nlohmann::json& fields) {
  absl::MutexLock lock(&mu_);
  if (fields.is_object()) configuration_.update(fields);
}

void TrainingMonitor::SetLineSink(LineSink sink) {
  absl::MutexLock lock(&mu_);
  sink_ = std::move(sink);
}

void TrainingMonitor::Emit(const nlohmann::json& line) const {
  LineSink sink;
  {
    absl::MutexLock lock(&mu_);
    sink = sink_;
  }
  if (sink) sink(line);
}

void TrainingMonitor::BeginTraining(int64_t first_step, int64_t total_steps) {
  const double now = Now();
  absl::MutexLock lock(&mu_);
  if (end_monotonic_.has_value()) return;
  status_ = "training";
  training_start_ = now;
  interval_start_ = now;
  first_step_ = first_step;
  total_steps_ = total_steps;
  step_ = first_step;
}

bool TrainingMonitor::DueLocked(double now) const {
  return training_start_.has_value() && now - interval_start_ >= interval_seconds_;
}

MonitorPoint TrainingMonitor::CloseIntervalLocked(double now,
                                                  std::optional<ClusterFigures> cluster) {
  MonitorPoint point;
  point.step = step_;
  point.unix_time = UnixAt(now);
  point.seconds = now - start_monotonic_;
  point.interval_seconds = now - interval_start_;
  point.steps = interval_steps_;
  point.examples = interval_examples_;
  point.examples_per_sec =
      point.interval_seconds > 0 ? point.examples / point.interval_seconds : 0;
  point.loss = interval_examples_ > 0 ? interval_loss_sum_ / interval_examples_ : 0;
  if (cluster.has_value()) {
    NoteRecoveriesLocked(*cluster, now);
    cluster->recoveries.clear();
    cluster_ = cluster;
  }
  point.cluster = std::move(cluster);
  points_.push_back(point);
  interval_start_ = now;
  interval_steps_ = 0;
  interval_examples_ = 0;
  interval_loss_sum_ = 0;
  return point;
}

void TrainingMonitor::NoteRecoveriesLocked(const ClusterFigures& figures, double now) {
  for (size_t i = recoveries_seen_; i < figures.recoveries.size(); ++i) {
    const PsRecovery& r = figures.recoveries[i];
    MonitorEvent event;
    event.kind = MonitorEvent::Kind::kPsRecovery;
    event.step = step_;
    event.unix_time = UnixAt(now);
    event.seconds = now - start_monotonic_;
    event.duration_seconds = r.seconds;
    event.where = r.node;
    event.ps_task = r.ps_task;
    event.lost_steps = r.lost_steps;
    events_.push_back(std::move(event));
  }
  recoveries_seen_ = std::max(recoveries_seen_, figures.recoveries.size());
}

void TrainingMonitor::RecordStep(int64_t step, int64_t examples, double loss) {
  RecordStepsImpl(step, 1, examples, loss, nullptr);
}

void TrainingMonitor::RecordStep(int64_t step, int64_t examples, double loss,
                                 absl::FunctionRef<ClusterFigures()> cluster) {
  RecordStepsImpl(step, 1, examples, loss, &cluster);
}

void TrainingMonitor::RecordSteps(int64_t step, int64_t steps, int64_t examples, double loss) {
  RecordStepsImpl(step, steps, examples, loss, nullptr);
}

void TrainingMonitor::RecordSteps(int64_t step, int64_t steps, int64_t examples, double loss,
                                  absl::FunctionRef<ClusterFigures()> cluster) {
  RecordStepsImpl(step, steps, examples, loss, &cluster);
}

void TrainingMonitor::RecordStepsImpl(int64_t step, int64_t steps, int64_t examples, double loss,
                                      const absl::FunctionRef<ClusterFigures()>* cluster) {
  if (steps < 1) return;
  const double now = Now();
  {
    absl::MutexLock lock(&mu_);
    if (end_monotonic_.has_value() || training_end_.has_value()) return;
    if (!training_start_.has_value()) {  // recording without BeginTraining: start now
      training_start_ = interval_start_ = now;
      status_ = "training";
    }
    step_ = std::max(step_, step);
    examples_ += examples;
    interval_steps_ += steps;
    interval_examples_ += examples;
    interval_loss_sum_ += loss * static_cast<double>(examples);
    if (!DueLocked(now)) return;
  }
  // The cluster's figures are read without the lock: they may wait on the coordinator's actor.
  std::optional<ClusterFigures> figures;
  if (cluster != nullptr) figures = (*cluster)();
  MonitorPoint point;
  {
    absl::MutexLock lock(&mu_);
    if (end_monotonic_.has_value()) return;
    point = CloseIntervalLocked(Now(), std::move(figures));
  }
  Emit(MetricsLine(point));
}

void TrainingMonitor::RecordEvaluation(int64_t step, const EvalResult& result, bool final) {
  const double now = Now();
  MonitorEvaluation evaluation;
  evaluation.step = step;
  evaluation.unix_time = UnixAt(now);
  evaluation.seconds = now - start_monotonic_;
  evaluation.final = final;
  evaluation.result = result;
  {
    absl::MutexLock lock(&mu_);
    evaluations_.push_back(evaluation);
  }
  Emit(MetricsLine(evaluation));
}

void TrainingMonitor::RecordCheckpoint(int64_t step, double seconds, const std::string& dir) {
  const double now = Now();
  MonitorEvent event;
  event.kind = MonitorEvent::Kind::kCheckpoint;
  event.step = step;
  event.unix_time = UnixAt(now);
  event.seconds = now - start_monotonic_;
  event.duration_seconds = seconds;
  event.where = dir;
  const nlohmann::json line = ToJson(event);
  {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(event));
  }
  Emit(line);
}

void TrainingMonitor::RecordCluster(ClusterFigures figures) {
  const double now = Now();
  absl::MutexLock lock(&mu_);
  NoteRecoveriesLocked(figures, now);
  figures.recoveries.clear();
  cluster_ = std::move(figures);
}

void TrainingMonitor::EndTraining() {
  const double now = Now();
  std::optional<MonitorPoint> last;
  {
    absl::MutexLock lock(&mu_);
    if (end_monotonic_.has_value() || training_end_.has_value()) return;
    if (interval_steps_ > 0) last = CloseIntervalLocked(now, cluster_);
    training_end_ = now;
  }
  if (last.has_value()) Emit(MetricsLine(*last));
}

void TrainingMonitor::Finish(const absl::Status& status) {
  const double now = Now();
  std::optional<MonitorPoint> last;
  {
    absl::MutexLock lock(&mu_);
    if (end_monotonic_.has_value()) return;
    if (interval_steps_ > 0) last = CloseIntervalLocked(now, cluster_);
    if (!training_end_.has_value()) training_end_ = now;
    end_monotonic_ = now;
    status_ = status.ok() ? "finished" : "failed";
    if (!status.ok()) error_ = status.ToString();
  }
  if (last.has_value()) Emit(MetricsLine(*last));
}

MonitorSnapshot TrainingMonitor::Snapshot(int64_t max_points) const {
  MonitorSnapshot snapshot;
  snapshot.version = std::string(Version());
  snapshot.start_unix_time = start_unix_;
  snapshot.start_time = IsoUtc(start_unix_);
  absl::MutexLock lock(&mu_);
  snapshot.configuration = configuration_;
  snapshot.status = status_;
  snapshot.error = error_;
  if (end_monotonic_.has_value()) {
    snapshot.end_unix_time = UnixAt(*end_monotonic_);
    snapshot.end_time = IsoUtc(*snapshot.end_unix_time);
  }
  snapshot.first_step = first_step_;
  snapshot.total_steps = total_steps_;
  snapshot.step = step_;
  snapshot.examples = examples_;
  if (training_start_.has_value()) {
    snapshot.training_seconds = training_end_.value_or(Now()) - *training_start_;
  }
  const int64_t n = static_cast<int64_t>(points_.size());
  snapshot.points_recorded = n;
  if (max_points > 0 && n > max_points) {
    const int64_t stride = (n + max_points - 1) / max_points;
    snapshot.point_stride = stride;
    snapshot.points.reserve((n + stride - 1) / stride);
    for (int64_t i = 0; i < n; i += stride) {
      snapshot.points.push_back(
          Merge(points_.data() + i, points_.data() + std::min(n, i + stride)));
    }
  } else {
    snapshot.points = points_;
  }
  snapshot.evaluations = evaluations_;
  snapshot.events = events_;
  snapshot.cluster = cluster_;
  return snapshot;
}

nlohmann::json TrainingMonitor::ToJson(const MonitorPoint& point) {
  nlohmann::json out = {{"step", point.step},
                        {"time", point.unix_time},
                        {"seconds", point.seconds},
                        {"interval_seconds", point.interval_seconds},
                        {"steps", point.steps},
                        {"examples", point.examples},
                        {"examples_per_sec", point.examples_per_sec},
                        {"loss", point.loss}};
  if (point.cluster.has_value()) out.update(ClusterJson(*point.cluster));
  return out;
}

nlohmann::json TrainingMonitor::ToJson(const MonitorEvaluation& evaluation) {
  nlohmann::json out = {{"step", evaluation.step},
                        {"time", evaluation.unix_time},
                        {"seconds", evaluation.seconds},
                        {"final", evaluation.final}};
  AddEvalFields(evaluation.result, out);
  return out;
}

nlohmann::json TrainingMonitor::ToJson(const MonitorEvent& event) {
  nlohmann::json out = {{"kind", KindName(event.kind)},
                        {"step", event.step},
                        {"time", event.unix_time},
                        {"seconds", event.seconds},
                        {"duration_seconds", event.duration_seconds}};
  if (event.kind == MonitorEvent::Kind::kCheckpoint) {
    out["dir"] = event.where;
  } else {
    out["ps_task"] = event.ps_task;
    out["node"] = event.where;
    out["lost_steps"] = event.lost_steps;
  }
  return out;
}

nlohmann::json TrainingMonitor::ToJson(const MonitorSnapshot& snapshot) {
  nlohmann::json points = nlohmann::json::array();
  for (const MonitorPoint& p : snapshot.points) points.push_back(ToJson(p));
  nlohmann::json evaluations = nlohmann::json::array();
  for (const MonitorEvaluation& e : snapshot.evaluations) evaluations.push_back(ToJson(e));
  nlohmann::json events = nlohmann::json::array();
  for (const MonitorEvent& e : snapshot.events) events.push_back(ToJson(e));
  nlohmann::json out = {{"configuration", snapshot.configuration},
                        {"version", snapshot.version},
                        {"start_time", snapshot.start_time},
                        {"start_unix_time", snapshot.start_unix_time},
                        {"status", snapshot.status},
                        {"first_step", snapshot.first_step},
                        {"total_steps", snapshot.total_steps},
                        {"step", snapshot.step},
                        {"examples", snapshot.examples},
                        {"training_seconds", snapshot.training_seconds},
                        {"points", std::move(points)},
                        {"points_recorded", snapshot.points_recorded},
                        {"point_stride", snapshot.point_stride},
                        {"evaluations", std::move(evaluations)},
                        {"events", std::move(events)}};
  out["end_time"] = snapshot.end_unix_time.has_value() ? nlohmann::json(snapshot.end_time)
                                                       : nlohmann::json(nullptr);
  out["end_unix_time"] = snapshot.end_unix_time.has_value()
                             ? nlohmann::json(*snapshot.end_unix_time)
                             : nlohmann::json(nullptr);
  if (!snapshot.error.empty()) out["error"] = snapshot.error;
  out["cluster"] = snapshot.cluster.has_value() ? ClusterJson(*snapshot.cluster)
                                                : nlohmann::json(nullptr);
  return out;
}

nlohmann::json TrainingMonitor::MetricsLine(const MonitorPoint& point) {
  nlohmann::json line = {{"kind", "interval"},
                         {"step", point.step},
                         {"time", point.unix_time},
                         {"seconds", point.seconds},
                         {"examples_per_sec", point.examples_per_sec},
                         {"loss", point.loss}};
  if (point.cluster.has_value()) {
    line["queue_depth"] = point.cluster->queue_depth;
    line["closures_completed"] = point.cluster->closures_completed;
    line["worker_failures"] = point.cluster->worker_failures;
  }
  return line;
}

nlohmann::json TrainingMonitor::MetricsLine(const MonitorEvaluation& evaluation) {
  nlohmann::json line = {{"kind", "evaluation"},
                         {"step", evaluation.step},
                         {"time", evaluation.unix_time},
                         {"seconds", evaluation.seconds},
                         {"final", evaluation.final}};
  AddEvalFields(evaluation.result, line);
  return line;
}

}  // namespace tessera
