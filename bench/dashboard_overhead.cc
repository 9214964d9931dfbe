// dashboard_overhead: what watching a run costs it. The recsys reference workload (as
// train_throughput: U=100k, I=10k, D=32, hidden 64, batch 512, one pass over 1M examples, 2 PS,
// 2 workers) trained in the simulation in interleaved rounds of three kinds:
//   bare       no TrainingMonitor
//   monitor    the run's TrainingMonitor (what every driver run has: summary, --metrics_file)
//   dashboard  the monitor, the dashboard (--dashboard_port) and a client that, every
//              --poll_ms, loads the page and its API (/, /api/run, /api/cluster) and scrapes
//              /metrics, as a browser left open and a Prometheus server would
// and the latency of each of those page loads while training runs.
//
//   dashboard_overhead --rounds=5 [--poll_ms=1000]
//
// The figure per kind is its median round; the last line is one JSON object with the medians,
// the ratios to bare, and the page-load latencies (p50, p99, max).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "bench/internal/recsys_job.h"
#include "bench/internal/serve_client.h"
#include "coordinator/monitoring/internal/run_dashboard.h"
#include "coordinator/ps/parameter_server_training.h"
#include "coordinator/training/training_flags.h"
#include "tessera/status.h"

ABSL_FLAG(int32_t, rounds, 5, "rounds of (bare, monitor, dashboard)");
ABSL_FLAG(std::vector<std::string>, kinds, std::vector<std::string>({"bare", "monitor", "dashboard"}),
          "the kinds of run in each round, in order (the first is the ratios' base)");
ABSL_FLAG(int32_t, poll_ms, 1000, "the dashboard client's period (0: no client)");
ABSL_FLAG(int64_t, train_examples, 1000000, "training examples (one pass per round)");

namespace tessera {
namespace {

using bench::Median;
using Clock = std::chrono::steady_clock;


// Loads the page and its API, and scrapes the metrics, every `period` until stopped; records
// the milliseconds each load of the four took (all four: one "page load").
class Poller {
 public:
  Poller(int port, std::chrono::milliseconds period) : port_(port), period_(period) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~Poller() { Stop(); }
  std::vector<double> Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return loads_ms_;
  }
  int failures() const { return failures_; }

 private:
  void Loop() {
    while (!stop_) {
      const Clock::time_point start = Clock::now();
      bool ok = true;
      for (const char* path : {"/", "/api/run", "/api/cluster", "/metrics"}) {
        bench::Connection connection(port_);
        bool closing = false;
        ok = ok && connection.ok() &&
             connection.Exchange(absl::StrCat("GET ", path,
                                              " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"),
                                 closing) == 200;
      }
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
      if (ok) {
        loads_ms_.push_back(ms);
      } else {
        ++failures_;
      }
      for (auto next = start + period_; !stop_ && Clock::now() < next;) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }

  const int port_;
  const std::chrono::milliseconds period_;
  std::atomic<bool> stop_{false};
  std::vector<double> loads_ms_;
  int failures_ = 0;
  std::thread thread_;
};

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  TESSERA_ASSIGN_OR_RETURN(
      const TrainingJob job,
      bench::RecsysThroughputJob(absl::GetFlag(FLAGS_train_examples), 512, "fixed:4"));
  TESSERA_ASSIGN_OR_RETURN(TrainingFlags flags, ReadTrainingFlags());

  const std::vector<std::string> kinds = absl::GetFlag(FLAGS_kinds);
  std::vector<std::vector<double>> eps(kinds.size());
  std::vector<double> loads_ms;
  int failures = 0;
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    std::string line = absl::StrCat("round ", r, ":");
    for (size_t k = 0; k < kinds.size(); ++k) {
      const ParameterServerTrainingOptions& options = flags.parameter_servers;
      RunObservers observers;
      std::unique_ptr<internal::RunDashboard> dashboard;
      std::unique_ptr<Poller> poller;
      if (kinds[k] != "bare") observers.monitor = std::make_shared<TrainingMonitor>();
      if (kinds[k] == "dashboard") {
        TESSERA_ASSIGN_OR_RETURN(
            dashboard, internal::RunDashboard::Start({"127.0.0.1", 0}, observers.monitor));
        observers.on_cluster = dashboard->ClusterHook();
        if (absl::GetFlag(FLAGS_poll_ms) > 0) {
          poller = std::make_unique<Poller>(
              dashboard->port(), std::chrono::milliseconds(absl::GetFlag(FLAGS_poll_ms)));
        }
      }
      nlohmann::json ignored;
      TESSERA_ASSIGN_OR_RETURN(TrainingRun run,
                               TrainOnParameterServers(job, options, /*eval_every=*/0, ignored,
                                                       observers));
      if (poller != nullptr) {
        std::vector<double> loads = poller->Stop();
        failures += poller->failures();
        loads_ms.insert(loads_ms.end(), loads.begin(), loads.end());
      }
      eps[k].push_back(run.examples / run.wall_seconds);
      absl::StrAppend(&line, " ", kinds[k], " ", static_cast<int64_t>(eps[k].back()));
    }
    std::printf("%s examples/s\n", line.c_str());
    std::fflush(stdout);
  }
  nlohmann::json out;
  const double bare = Median(eps[0]);  // the first kind
  for (size_t k = 0; k < kinds.size(); ++k) {
    out[kinds[k] + "_examples_per_sec"] = Median(eps[k]);
    out[kinds[k] + "_rounds"] = eps[k];
    out[kinds[k] + "_vs_bare"] = Median(eps[k]) / bare;
  }
  out["page_loads"] = loads_ms.size();
  out["page_load_failures"] = failures;
  std::sort(loads_ms.begin(), loads_ms.end());
  out["page_load_ms_p50"] = loads_ms.empty() ? 0 : bench::Quantile(loads_ms, 0.5);
  out["page_load_ms_p99"] = loads_ms.empty() ? 0 : bench::Quantile(loads_ms, 0.99);
  out["page_load_ms_max"] = loads_ms.empty() ? 0 : *std::max_element(loads_ms.begin(), loads_ms.end());
  // Per kind: the median of its round-by-round ratio to the first kind, measured minutes apart
  // at most, which the host's swings between rounds disturb less than the ratio of medians.
  std::string medians = "median:";
  for (size_t k = 0; k < kinds.size(); ++k) {
    std::vector<double> paired;
    for (size_t r = 0; r < eps[k].size(); ++r) paired.push_back(eps[k][r] / eps[0][r]);
    out[kinds[k] + "_paired_ratio"] = Median(paired);
    absl::StrAppendFormat(&medians, " %s %.0f (%.3fx; paired %.3fx)", kinds[k], Median(eps[k]),
                          Median(eps[k]) / bare, Median(paired));
  }
  std::printf("%s examples/s; page load (4 requests) p50 %.1f ms, p99 %.1f ms over %zu loads\n",
              medians.c_str(), out["page_load_ms_p50"].get<double>(),
              out["page_load_ms_p99"].get<double>(), loads_ms.size());
  std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::bench::Main("dashboard_overhead", argc, argv, tessera::Run);
}
