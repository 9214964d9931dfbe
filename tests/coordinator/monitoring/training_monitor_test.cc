// TrainingMonitor: intervals closed by the recording call, example-weighted losses, capped
// (merged) snapshots, a resumed run's steps, events, the JSON the dashboard and the metrics file
// read, and a reader thread taking snapshots while the driver records.
#include "coordinator/monitoring/training_monitor.h"

#include <doctest/doctest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tessera/version.h"

namespace tessera {
namespace {

// A monitor on a clock the test moves: monotonic `*now`, the wall clock 1'800'000'000 + *now.
TrainingMonitor::Options FakeClock(const double* now, double interval = 1.0) {
  TrainingMonitor::Options options;
  options.interval_seconds = interval;
  options.monotonic_clock = [now] { return *now; };
  options.unix_clock = [now] { return 1'800'000'000.0 + *now; };
  return options;
}

TEST_CASE("a point closes once an interval has passed, with the interval's rate and weighted loss") {
  double now = 10;
  TrainingMonitor monitor(FakeClock(&now));
  monitor.BeginTraining(0, 100);
  now = 10.4;
  monitor.RecordStep(1, 100, 2.0);
  now = 10.8;
  monitor.RecordStep(2, 300, 1.0);
  CHECK(monitor.Snapshot().points.empty());  // 0.8 s: not due
  now = 11.0;
  monitor.RecordStep(3, 100, 4.0);  // due: closes with these three steps
  MonitorSnapshot s = monitor.Snapshot();
  REQUIRE(s.points.size() == 1);
  const MonitorPoint& p = s.points[0];
  CHECK(p.step == 3);
  CHECK(p.steps == 3);
  CHECK(p.examples == 500);
  CHECK(p.interval_seconds == doctest::Approx(1.0));
  CHECK(p.examples_per_sec == doctest::Approx(500.0));
  CHECK(p.loss == doctest::Approx((100 * 2.0 + 300 * 1.0 + 100 * 4.0) / 500));
  CHECK(p.seconds == doctest::Approx(1.0));  // since the monitor was made, at 10
  CHECK(p.unix_time == doctest::Approx(1'800'000'011.0));
  CHECK_FALSE(p.cluster.has_value());  // recorded without cluster figures

  // The next interval starts at the close: a step 0.5 s later does not close it.
  now = 11.5;
  monitor.RecordStep(4, 200, 3.0);
  CHECK(monitor.Snapshot().points.size() == 1);
  // Finish closes the open interval with what it holds.
  now = 11.75;
  monitor.Finish(absl::OkStatus());
  s = monitor.Snapshot();
  REQUIRE(s.points.size() == 2);
  CHECK(s.points[1].step == 4);
  CHECK(s.points[1].examples_per_sec == doctest::Approx(200 / 0.75));
  CHECK(s.points[1].loss == doctest::Approx(3.0));
  CHECK(s.status == "finished");
  REQUIRE(s.end_unix_time.has_value());
  CHECK(*s.end_unix_time == doctest::Approx(1'800'000'011.75));
  CHECK(s.end_time == "2027-01-15T08:00:11.750Z");
  CHECK(s.start_time == "2027-01-15T08:00:10.000Z");
  CHECK(s.examples == 700);
  CHECK(s.training_seconds == doctest::Approx(1.75));
  // Finished: later recording changes nothing.
  now = 20;
  monitor.RecordStep(5, 100, 1.0);
  monitor.Finish(absl::InternalError("late"));
  CHECK(monitor.Snapshot().points.size() == 2);
  CHECK(monitor.Snapshot().status == "finished");
}

TEST_CASE("steps recorded together close a due interval once, with all of them: no spike after") {
  double now = 10;
  TrainingMonitor monitor(FakeClock(&now));
  monitor.BeginTraining(0, 300);
  for (int64_t step = 1; step <= 10; ++step) {
    now = 10 + 0.09 * static_cast<double>(step);  // 10 steps over 0.9 s: not due
    monitor.RecordStep(step, 100, 1.0);
  }
  REQUIRE(monitor.Snapshot().points.empty());
  // The loop drains 200 steps that completed while it waited, at 11.5 s, and training ends.
  now = 11.5;
  monitor.RecordSteps(210, 200, 20000, 2.0);
  now = 11.502;
  monitor.EndTraining();
  const MonitorSnapshot s = monitor.Snapshot();
  REQUIRE(s.points.size() == 1);  // no point of its own for the drained steps, 2 ms later
  CHECK(s.points[0].step == 210);
  CHECK(s.points[0].steps == 210);
  CHECK(s.points[0].examples == 21000);
  CHECK(s.points[0].examples_per_sec == doctest::Approx(21000 / 1.5));
  CHECK(s.points[0].loss == doctest::Approx((1000 * 1.0 + 20000 * 2.0) / 21000));
  CHECK(s.examples == 21000);
}

TEST_CASE("cluster figures are read only when an interval closes, and recoveries become events") {
  double now = 0;
  TrainingMonitor monitor(FakeClock(&now));
  monitor.BeginTraining(0, 10);
  int reads = 0;
  ClusterFigures figures;
  figures.queue_depth = 7;
  figures.closures_completed = 40;
  figures.worker_failures = 2;
  auto probe = [&] {
    ++reads;
    return figures;
  };
  now = 0.5;
  monitor.RecordStep(1, 10, 1.0, probe);
  CHECK(reads == 0);
  now = 1.0;
  monitor.RecordStep(2, 10, 1.0, probe);
  CHECK(reads == 1);
  PsRecovery recovery;
  recovery.ps_task = 1;
  recovery.node = "127.0.0.1:5001";
  recovery.seconds = 2.5;
  recovery.lost_steps = 3;
  figures.recoveries = {recovery};
  now = 2.0;
  monitor.RecordStep(3, 10, 1.0, probe);
  now = 3.0;
  monitor.RecordStep(4, 10, 1.0, probe);  // the same recovery again: one event
  monitor.RecordCheckpoint(4, 0.25, "/ckpt/ckpt-4");
  const MonitorSnapshot s = monitor.Snapshot();
  REQUIRE(s.points.size() == 3);
  REQUIRE(s.points[0].cluster.has_value());
  CHECK(s.points[0].cluster->queue_depth == 7);
  CHECK(s.points[0].cluster->worker_failures == 2);
  CHECK(s.points[0].cluster->recoveries.empty());
  REQUIRE(s.events.size() == 2);
  CHECK(s.events[0].kind == MonitorEvent::Kind::kPsRecovery);
  CHECK(s.events[0].ps_task == 1);
  CHECK(s.events[0].step == 3);
  CHECK(s.events[0].duration_seconds == 2.5);
  CHECK(s.events[0].lost_steps == 3);
  CHECK(s.events[1].kind == MonitorEvent::Kind::kCheckpoint);
  CHECK(s.events[1].where == "/ckpt/ckpt-4");
  const nlohmann::json json = TrainingMonitor::ToJson(s);
  CHECK(json["events"][0]["kind"] == "ps_recovery");
  CHECK(json["events"][0]["node"] == "127.0.0.1:5001");
  CHECK(json["events"][1]["kind"] == "checkpoint");
  CHECK(json["events"][1]["duration_seconds"] == 0.25);
  CHECK(json["points"][0]["queue_depth"] == 7);
  CHECK(json["cluster"]["closures_completed"] == 40);
  const nlohmann::json line = TrainingMonitor::MetricsLine(s.points[0]);
  CHECK(line["kind"] == "interval");
  CHECK(line["queue_depth"] == 7);
  CHECK(line["closures_completed"] == 40);
  CHECK(line["worker_failures"] == 2);
}

TEST_CASE("a capped snapshot merges consecutive points, keeping the totals and the last step") {
  double now = 0;
  TrainingMonitor monitor(FakeClock(&now));
  monitor.BeginTraining(0, 1000);
  // Ten one-second intervals: step k trains 10 * k examples at loss k.
  for (int k = 1; k <= 10; ++k) {
    now = k;
    monitor.RecordStep(k, 10 * k, k);
  }
  const MonitorSnapshot all = monitor.Snapshot();
  REQUIRE(all.points.size() == 10);
  CHECK(all.point_stride == 1);
  const MonitorSnapshot capped = monitor.Snapshot(4);
  CHECK(capped.points_recorded == 10);
  CHECK(capped.point_stride == 3);
  REQUIRE(capped.points.size() == 4);  // 1-3, 4-6, 7-9, 10
  CHECK(capped.points[0].step == 3);
  CHECK(capped.points[0].examples == 60);
  CHECK(capped.points[0].interval_seconds == doctest::Approx(3.0));
  CHECK(capped.points[0].examples_per_sec == doctest::Approx(20.0));
  CHECK(capped.points[0].loss == doctest::Approx((10 * 1 + 20 * 2 + 30 * 3) / 60.0));
  CHECK(capped.points[3].step == 10);
  CHECK(capped.points[3].examples == 100);
  int64_t examples = 0;
  for (const MonitorPoint& p : capped.points) examples += p.examples;
  CHECK(examples == 550);
  CHECK(monitor.Snapshot(10).points.size() == 10);  // at the cap: untouched
  CHECK(TrainingMonitor::ToJson(capped)["points"].size() == 4);
}

TEST_CASE("a resumed run starts at its checkpoint's step and counts only its own examples") {
  double now = 0;
  TrainingMonitor monitor(FakeClock(&now));
  monitor.SetConfiguration({{"workload", "tiny"}, {"batch_size", 64}});
  monitor.SetConfiguration({{"ps", 2}, {"batch_size", 128}});
  CHECK(monitor.Snapshot().status == "starting");
  monitor.BeginTraining(400, 500);
  MonitorSnapshot s = monitor.Snapshot();
  CHECK(s.status == "training");
  CHECK(s.first_step == 400);
  CHECK(s.step == 400);
  CHECK(s.examples == 0);
  now = 1;
  monitor.RecordStep(401, 128, 0.5);
  s = monitor.Snapshot();
  CHECK(s.step == 401);
  CHECK(s.examples == 128);
  REQUIRE(s.points.size() == 1);
  CHECK(s.points[0].examples_per_sec == doctest::Approx(128.0));
  monitor.Finish(absl::UnavailableError("ps 1 lost"));
  s = monitor.Snapshot();
  CHECK(s.status == "failed");
  CHECK(s.error.find("ps 1 lost") != std::string::npos);
  const nlohmann::json json = TrainingMonitor::ToJson(s);
  CHECK(json["configuration"] == nlohmann::json({{"workload", "tiny"}, {"batch_size", 128},
                                                 {"ps", 2}}));
  CHECK(json["version"] == std::string(Version()));
  CHECK(json["first_step"] == 400);
  CHECK(json["total_steps"] == 500);
  CHECK(json["status"] == "failed");
}

TEST_CASE("evaluations are recorded with their time and sent to the line sink with the points") {
  double now = 0;
  TrainingMonitor monitor(FakeClock(&now));
  std::vector<nlohmann::json> lines;
  monitor.SetLineSink([&](const nlohmann::json& line) { lines.push_back(line); });
  monitor.BeginTraining(0, 10);
  now = 1;
  monitor.RecordStep(1, 10, 0.7);
  EvalResult eval;
  eval.examples = 1000;
  eval.loss = 0.6;
  eval.auc = 0.75;
  now = 1.5;
  monitor.RecordEvaluation(1, eval);
  eval.accuracy = 0.8;
  monitor.RecordEvaluation(10, eval, /*final=*/true);
  REQUIRE(lines.size() == 3);
  CHECK(lines[0]["kind"] == "interval");
  CHECK(lines[0]["step"] == 1);
  CHECK(lines[0]["loss"] == doctest::Approx(0.7));
  CHECK_FALSE(lines[0].contains("queue_depth"));  // no cluster figures were given
  CHECK(lines[1] == nlohmann::json({{"kind", "evaluation"},
                                    {"step", 1},
                                    {"time", 1'800'000'001.5},
                                    {"seconds", 1.5},
                                    {"final", false},
                                    {"loss", 0.6},
                                    {"examples", 1000},
                                    {"auc", 0.75}}));
  CHECK(lines[2]["final"] == true);
  CHECK(lines[2]["accuracy"] == 0.8);
  const MonitorSnapshot s = monitor.Snapshot();
  REQUIRE(s.evaluations.size() == 2);
  CHECK(s.evaluations[0].seconds == doctest::Approx(1.5));
  CHECK(TrainingMonitor::ToJson(s)["evaluations"][1]["final"] == true);
}

TEST_CASE("snapshots taken while the driver records are consistent") {
  TrainingMonitor::Options options;
  options.interval_seconds = 1e-4;  // many points on the real clock
  TrainingMonitor monitor(options);
  constexpr int64_t kSteps = 20000;
  monitor.BeginTraining(0, kSteps);
  std::atomic<bool> done{false};
  std::atomic<int64_t> snapshots{0};
  bool consistent = true;
  std::thread reader([&] {
    while (!done.load()) {
      const MonitorSnapshot s = monitor.Snapshot(50);
      ++snapshots;
      int64_t examples = 0, last_step = 0;
      for (const MonitorPoint& p : s.points) {
        examples += p.examples;
        if (p.step < last_step) consistent = false;
        last_step = p.step;
      }
      // The points never hold more than the steps recorded (the open interval holds the rest).
      if (examples > s.examples || s.points.size() > 50 || s.step > kSteps) consistent = false;
      if (TrainingMonitor::ToJson(s)["points"].size() != s.points.size()) consistent = false;
    }
  });
  for (int64_t step = 1; step <= kSteps; ++step) {
    monitor.RecordStep(step, 2, 0.5);
    if (step % (kSteps / 4) == 0) {  // let the reader in a few times while recording goes on
      const int64_t seen = snapshots.load();
      while (snapshots.load() < seen + 2) std::this_thread::yield();
    }
  }
  monitor.Finish(absl::OkStatus());
  done = true;
  reader.join();
  CHECK(consistent);
  CHECK(snapshots.load() >= 8);
  const MonitorSnapshot s = monitor.Snapshot();
  int64_t examples = 0;
  for (const MonitorPoint& p : s.points) examples += p.examples;
  CHECK(examples == 2 * kSteps);  // every step in exactly one point once finished
  CHECK(s.step == kSteps);
}

TEST_CASE("IsoUtc writes UTC to the millisecond") {
  CHECK(IsoUtc(0) == "1970-01-01T00:00:00.000Z");
  CHECK(IsoUtc(1'800'000'000.25) == "2027-01-15T08:00:00.250Z");
  CHECK(IsoUtc(59.9996) == "1970-01-01T00:01:00.000Z");  // rounds into the next second
}

}  // namespace
}  // namespace tessera
