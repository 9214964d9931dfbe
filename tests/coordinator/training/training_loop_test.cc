// The training loop (coordinator/training/training_loop.h) over a scripted executor, no actors:
// which steps it asks for and up to where, what it records of the steps, its checkpoints and
// validations, and how it goes on after a recovery. Step k's loss is k and its examples 2, so
// every figure the loop reports is known in advance.
#include "coordinator/training/training_loop.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "coordinator/monitoring/training_monitor.h"
#include "core/base/mem_env.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

constexpr int64_t kExamplesPerStep = 2;

// Takes up to `per_call` steps per Advance, each complete at once (or, with `in_flight`, one call
// late: completed by the next Advance or the Drain), finishing step k at time k seconds.
// `fail_at` fails the Advance that would take that step once; `recover_to` is where Recover says
// training goes on (none: it cannot recover).
class Scripted : public StepExecutor {
 public:
  int64_t per_call = 1;
  bool in_flight = false;
  std::optional<int64_t> fail_at;
  std::optional<int64_t> recover_to;
  std::optional<absl::Status> drain_failure;  // the next Drain's, once
  std::function<void(int64_t step)> on_step;  // runs as each step is taken

  std::vector<std::pair<int64_t, int64_t>> asked;  // (next, limit) of every Advance
  std::vector<int64_t> recovered_at;

  absl::StatusOr<Advanced> Advance(int64_t next, int64_t limit) override {
    asked.emplace_back(next, limit);
    const int64_t end = std::min(limit, next + per_call);
    if (fail_at.has_value() && *fail_at >= next && *fail_at < end) {
      fail_at.reset();
      return absl::UnavailableError("a replica is gone");
    }
    Advanced advanced;
    advanced.started = end - next;
    advanced.completed = std::move(waiting_);
    waiting_.clear();
    for (int64_t step = next; step < end; ++step) {
      if (on_step) on_step(step);
      const CompletedStep done{kExamplesPerStep, static_cast<double>(step),
                               absl::UnixEpoch() + absl::Seconds(step + 1)};
      (in_flight ? waiting_ : advanced.completed).push_back(done);
    }
    return advanced;
  }

  absl::StatusOr<std::vector<CompletedStep>> Drain() override {
    if (drain_failure.has_value()) {
      absl::Status failure = *drain_failure;
      drain_failure.reset();
      return failure;
    }
    return std::move(waiting_);
  }

  absl::StatusOr<Recovery> Recover(const absl::Status& failure, int64_t step) override {
    recovered_at.push_back(step);
    if (!recover_to.has_value()) return failure;
    return Recovery{*recover_to, "recovered"};
  }

 private:
  std::vector<CompletedStep> waiting_;
};

TEST_CASE("the loop takes every step once and records what they did") {
  Scripted steps;
  steps.per_call = 3;
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 10, "loop test"));
  CHECK(steps.asked ==
        std::vector<std::pair<int64_t, int64_t>>{{0, 10}, {3, 10}, {6, 10}, {9, 10}});
  CHECK(run.steps == 10);
  CHECK(run.examples == 10 * kExamplesPerStep);
  CHECK(run.final_loss == 9.0);  // the last 5% of 10 steps: the last step alone
  CHECK(run.evaluations.empty());
}

TEST_CASE("steps still in flight are taken at the drain, in order") {
  Scripted steps;
  steps.in_flight = true;
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 40, "loop test"));
  CHECK(run.steps == 40);
  CHECK(run.final_loss == 38.5);  // the last 40 / 20 = 2 steps: 38 and 39
}

TEST_CASE("the final loss window is the last 5% of the schedule, also when resumed") {
  Scripted steps;
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 36, 40, "loop test"));
  CHECK(run.steps == 4);
  CHECK(run.final_loss == 38.5);
}

TEST_CASE("each whole pass's examples per second, from when its last step finished") {
  Scripted steps;
  StepCadence cadence;
  cadence.pass_steps = 4;
  // Steps 2..11: the pass of steps 0-3 is partial, 4-7 finished at 8 s and 8-11 at 12 s.
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 2, 12, "loop test", cadence));
  REQUIRE(run.examples_per_sec_by_pass.size() == 2);
  CHECK(run.examples_per_sec_by_pass[0] == doctest::Approx(4.0 * kExamplesPerStep / 4.0));
  CHECK(run.examples_per_sec_by_pass[1] == doctest::Approx(4.0 * kExamplesPerStep / 4.0));
}

TEST_CASE("steps are asked up to the next checkpoint or validation, which run there") {
  Scripted steps;
  steps.per_call = 50;
  StepCadence cadence;
  std::vector<int64_t> saved, evaluated;
  cadence.checkpoint_every = 4;
  cadence.checkpoint_in_background = false;
  cadence.checkpoint = [&saved](int64_t step,
                                std::function<void()>) -> absl::StatusOr<std::string> {
    saved.push_back(step);
    return std::string("ckpt");
  };
  cadence.eval_every = 3;
  cadence.evaluate = [&evaluated](int64_t step) {
    evaluated.push_back(step);
    EvalResult result;
    result.loss = static_cast<double>(step);
    return FinishedEvaluation(result);
  };
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 10, "loop test", cadence));
  CHECK(steps.asked ==
        std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 4}, {4, 6}, {6, 8}, {8, 9}, {9, 10}});
  CHECK(saved == std::vector<int64_t>{4, 8});  // never the last step: the caller saves it
  CHECK(evaluated == std::vector<int64_t>{3, 6, 9});
  REQUIRE(run.evaluations.size() == 3);
  CHECK(run.evaluations[1].step == 6);
  CHECK(run.evaluations[1].result.loss == 6.0);
  CHECK(run.steps == 10);
}

TEST_CASE(
    "a background checkpoint lets training go on at its cut, and one Unavailable is skipped") {
  Scripted steps;
  StepCadence cadence;
  std::vector<int64_t> saved;
  cadence.checkpoint_every = 5;
  cadence.checkpoint = [&saved](int64_t step,
                                std::function<void()> on_cut) -> absl::StatusOr<std::string> {
    saved.push_back(step);
    on_cut();
    return absl::UnavailableError("a PS was lost while it was written");
  };
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 12, "loop test", cadence));
  CHECK(saved == std::vector<int64_t>{5, 10});
  CHECK(run.steps == 12);

  // Any other failure ends the run, once the loop waits for that checkpoint.
  Scripted failing;
  cadence.checkpoint = [](int64_t, std::function<void()> on_cut) -> absl::StatusOr<std::string> {
    on_cut();
    return absl::DataLossError("the disk is full");
  };
  CHECK(absl::IsDataLoss(RunTrainingLoop(failing, 0, 12, "loop test", cadence).status()));
}

TEST_CASE("a background checkpoint is recorded once written, with the seconds its writing took") {
  std::unique_ptr<MemEnv> env = NewMemEnv();  // the checkpoints' clock: moved by the test alone
  TrainingMonitor monitor;
  absl::Mutex mu;
  std::vector<nlohmann::json> lines;
  absl::Notification recorded;
  monitor.SetLineSink([&](const nlohmann::json& line) {
    if (line.value("kind", "") != "checkpoint") return;
    absl::MutexLock lock(&mu);
    lines.push_back(line);
    recorded.Notify();
  });
  StepCadence cadence;
  cadence.checkpoint_every = 5;
  cadence.clock = env.get();
  cadence.checkpoint = [&env](int64_t step,
                              std::function<void()> on_cut) -> absl::StatusOr<std::string> {
    on_cut();
    env->AdvanceClock(absl::Seconds(2));  // writing takes 2 s, training going on
    return absl::StrCat("/ckpt/ckpt-", step);
  };
  Scripted steps;
  steps.on_step = [&](int64_t step) {
    // Training goes on for 3 s a step once the checkpoint of step 5 is written: it is recorded
    // before training ends, and its duration is its writing's, not the time until it is joined.
    if (step == 7) REQUIRE(recorded.WaitForNotificationWithTimeout(absl::Seconds(60)));
    if (step >= 7) env->AdvanceClock(absl::Seconds(3));
  };
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 10, "loop test", cadence, &monitor));
  CHECK(run.steps == 10);
  absl::MutexLock lock(&mu);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["step"] == 5);
  CHECK(lines[0]["dir"] == "/ckpt/ckpt-5");
  CHECK(lines[0]["duration_seconds"].get<double>() == doctest::Approx(2.0));
  const MonitorSnapshot snapshot = monitor.Snapshot(100);
  REQUIRE(snapshot.events.size() == 1);
  CHECK(snapshot.events[0].duration_seconds == doctest::Approx(2.0));
}

TEST_CASE("a cadence in seconds checkpoints by the given clock, once that long has passed") {
  std::unique_ptr<MemEnv> env = NewMemEnv();  // its clock moves only when a step moves it
  Scripted steps;
  steps.on_step = [&env](int64_t) { env->AdvanceClock(absl::Seconds(3)); };
  StepCadence cadence;
  cadence.checkpoint_every_seconds = 10;
  cadence.clock = env.get();
  cadence.checkpoint_in_background = false;
  std::vector<int64_t> saved;
  cadence.checkpoint = [&saved](int64_t step,
                                std::function<void()>) -> absl::StatusOr<std::string> {
    saved.push_back(step);
    return std::string("ckpt");
  };
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 12, "loop test", cadence));
  // 3 s a step: 12 s have passed after step 4; the measure starts over there, and 12 s more
  // have passed after step 8 (never the last step: the caller saves it).
  CHECK(saved == std::vector<int64_t>{4, 8});
  CHECK(run.steps == 12);
}

TEST_CASE("an executor that cannot recover ends the run with the failure") {
  Scripted steps;
  steps.fail_at = 4;
  const absl::Status failed = RunTrainingLoop(steps, 0, 10, "loop test").status();
  CHECK(absl::IsUnavailable(failed));
  CHECK(steps.recovered_at == std::vector<int64_t>{4});
}

TEST_CASE("after a recovery to an earlier step, training goes on from there") {
  Scripted steps;
  steps.per_call = 2;
  steps.fail_at = 6;
  steps.recover_to = 2;  // every replica restored from the checkpoint of step 2
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 10, "loop test"));
  CHECK(steps.recovered_at == std::vector<int64_t>{6});
  // Steps 0-5, then 2-9 again: each taken step counts.
  CHECK(run.steps == 6 + 8);
  CHECK(run.examples == (6 + 8) * kExamplesPerStep);
  CHECK(steps.asked.back() == std::pair<int64_t, int64_t>{8, 10});
}

TEST_CASE("after a recovery to a later step, the steps between count as taken") {
  Scripted steps;
  steps.fail_at = 5;
  steps.recover_to = 7;  // the survivors had applied steps 5 and 6
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 10, "loop test"));
  CHECK(run.steps == 10);
  CHECK(run.examples == 8 * kExamplesPerStep);  // two steps without an outcome
}

TEST_CASE("a failure the last drain finds is recovered from like any other") {
  Scripted steps;
  steps.drain_failure = absl::UnavailableError("a replica was lost after its last step");
  steps.recover_to = 8;
  const TrainingRun run = ValueOrDie(RunTrainingLoop(steps, 0, 10, "loop test"));
  CHECK(steps.recovered_at == std::vector<int64_t>{10});
  CHECK(steps.asked.back() == std::pair<int64_t, int64_t>{9, 10});  // 8 and 9 again
  CHECK(run.steps == 12);
}

}  // namespace
}  // namespace tessera
