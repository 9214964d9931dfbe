#include "coordinator/monitoring/internal/run_dashboard.h"

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera::internal {
namespace {

volatile sig_atomic_t stop_signal = 0;
extern "C" void OnStopSignal(int signal) { stop_signal = signal; }

double UnixNow() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

RunDashboard::RunDashboard(std::shared_ptr<const TrainingMonitor> monitor)
    : monitor_(std::move(monitor)) {}

absl::StatusOr<std::unique_ptr<RunDashboard>> RunDashboard::Start(
    const DashboardOptions& options, std::shared_ptr<const TrainingMonitor> monitor) {
  std::unique_ptr<RunDashboard> run(new RunDashboard(std::move(monitor)));
  RunDashboard* self = run.get();
  self->metrics_.AddCollector([self](MetricWriter& out) { self->CollectRun(out); });
  self->metrics_.AddCollector([self](MetricWriter& out) { self->cluster_.Collect(out); });
  DashboardSources sources;
  sources.run = [self] { return RunJson(*self->monitor_); };
  sources.cluster = [self] { return self->cluster_.Json(); };
  sources.metrics = &self->metrics_;
  auto dashboard = Dashboard::Start(options, std::move(sources));
  if (!dashboard.ok()) return dashboard.status();
  run->dashboard_ = *std::move(dashboard);
  return run;
}

std::function<void(Cluster*, ClusterCoordinator*)> RunDashboard::ClusterHook() {
  return [this](Cluster* cluster, ClusterCoordinator* coordinator) {
    if (cluster == nullptr) {
      cluster_.Detach();
    } else {
      cluster_.Attach(cluster, coordinator);
    }
  };
}

std::function<void(const WorkerPoolStatus&)> RunDashboard::ReplicasHook() {
  return [this](const WorkerPoolStatus& replicas) { cluster_.ShowReplicas(replicas); };
}

nlohmann::json RunDashboard::RunJson(const TrainingMonitor& monitor) {
  const MonitorSnapshot snapshot = monitor.Snapshot(kPagePoints);
  nlohmann::json out = TrainingMonitor::ToJson(snapshot);
  out["elapsed_seconds"] =
      snapshot.end_unix_time.value_or(UnixNow()) - snapshot.start_unix_time;
  return out;
}

void RunDashboard::CollectRun(MetricWriter& out) const {
  const MonitorSnapshot run = monitor_->Snapshot();
  out.Gauge("tessera_training_global_step", "The global step the run has reached.", {},
            static_cast<double>(run.step));
  out.Gauge("tessera_training_total_steps", "The step the run ends at.", {},
            static_cast<double>(run.total_steps));
  out.Counter("tessera_training_examples_total", "Examples this run has trained on.", {},
              static_cast<double>(run.examples));
  out.Gauge("tessera_training_finished", "1 once the run has ended (finished or failed).", {},
            run.end_unix_time.has_value() ? 1 : 0);
  if (!run.points.empty()) {
    const MonitorPoint& last = run.points.back();
    out.Gauge("tessera_training_examples_per_second", "Examples per second, last interval.", {},
              last.examples_per_sec);
    out.Gauge("tessera_training_loss", "Mean training loss over the last interval.", {},
              last.loss);
  }
  if (!run.evaluations.empty()) {
    const EvalResult& latest = run.evaluations.back().result;
    out.Gauge("tessera_training_evaluation_step", "The step of the latest validation.", {},
              static_cast<double>(run.evaluations.back().step));
    out.Gauge("tessera_training_evaluation_loss", "The latest validation's loss.", {},
              latest.loss);
    if (latest.auc.has_value()) {
      out.Gauge("tessera_training_evaluation_auc", "The latest validation's AUC.", {},
                *latest.auc);
    }
    if (latest.accuracy.has_value()) {
      out.Gauge("tessera_training_evaluation_accuracy", "The latest validation's accuracy.", {},
                *latest.accuracy);
    }
  }
  int64_t checkpoints = 0, recoveries = 0;
  for (const MonitorEvent& event : run.events) {
    (event.kind == MonitorEvent::Kind::kCheckpoint ? checkpoints : recoveries) += 1;
  }
  out.Counter("tessera_training_checkpoints_total", "Checkpoints this run wrote.", {},
              static_cast<double>(checkpoints));
  out.Counter("tessera_training_ps_recoveries_total", "Lost PS tasks this run restored.", {},
              static_cast<double>(recoveries));
}

void RunDashboard::KeepServingUntilSignal(const std::string& label) {
  stop_signal = 0;
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {}, old_term {};
  sigaction(SIGINT, &action, &old_int);
  sigaction(SIGTERM, &action, &old_term);
  sigset_t stops;
  sigemptyset(&stops);
  sigaddset(&stops, SIGINT);
  sigaddset(&stops, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &stops, nullptr);
  std::fprintf(stderr, "%s: the run is over; the dashboard still serves at %s until SIGINT or SIGTERM\n",
               label.c_str(), url().c_str());
  std::fflush(stderr);
  while (stop_signal == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  std::fprintf(stderr, "%s: dashboard stopped on %s\n", label.c_str(),
               stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
}

}  // namespace tessera::internal
