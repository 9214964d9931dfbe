// The training step loop (coordinator/training/training_steps.h): which steps it schedules, what
// it returns, and its cadence of checkpoints and validations, on an in-process cluster whose
// kTrainStep is a stand-in that trains nothing (its loss is its batch index, its examples 2), so
// every figure the loop reports is known in advance.
#include "coordinator/training/training_steps.h"

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/training/train_step_closure.h"
#include "core/base/mem_env.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

constexpr int64_t kExamplesPerStep = 2;

// The batches the stand-in kTrainStep was run on, from the workers' threads.
struct Batches {
  absl::Mutex mu;
  std::multiset<int64_t> seen ABSL_GUARDED_BY(mu);

  std::multiset<int64_t> Seen() {
    absl::MutexLock lock(&mu);
    return seen;
  }
};

// An in-process cluster (1 PS, 2 workers) and a coordinator whose kTrainStep records its batch
// (its closure's step) and answers {loss: batch, examples: 2}, or InvalidArgument for the batch
// `fail_at`.
struct Loop {
  explicit Loop(int64_t fail_at = -1) {
    cluster = ValueOrDie(Cluster::StartInProcess({1, 2, 0}));
    strategy = std::make_unique<ParameterServerStrategy>(*cluster);
    auto registry = std::make_shared<FunctionRegistry>();
    REQUIRE(registry
                ->AddReplicaFunction(
                    kTrainStep,
                    [batches = batches, fail_at](ReplicaContext& ctx, const ClosureValues&,
                                                 Done<ClosureValues> done) {
                      const int64_t batch = ctx.step();  // the closure's global step
                      {
                        absl::MutexLock lock(&batches->mu);
                        batches->seen.insert(batch);
                      }
                      if (batch == fail_at) {
                        done(absl::InvalidArgumentError(absl::StrCat("batch ", batch, " is bad")));
                        return;
                      }
                      done(TrainStepValues(
                          StepOutcome{static_cast<float>(batch), kExamplesPerStep}));
                    })
                .ok());
    coordinator = ValueOrDie(ClusterCoordinator::Create(*strategy, registry, {}));
  }

  std::shared_ptr<Batches> batches = std::make_shared<Batches>();
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ParameterServerStrategy> strategy;
  std::unique_ptr<ClusterCoordinator> coordinator;  // declared last: stopped first
};

std::multiset<int64_t> Range(int64_t begin, int64_t end) {
  std::multiset<int64_t> out;
  for (int64_t i = begin; i < end; ++i) out.insert(i);
  return out;
}

TEST_CASE("a checkpoint clock is due at every multiple of its steps, never at the last step") {
  CheckpointClock every3(3, 0, 10);
  std::vector<int64_t> due;
  for (int64_t reached = 1; reached <= 10; ++reached) {
    if (every3.Due(reached)) due.push_back(reached);
  }
  CHECK(due == std::vector<int64_t>{3, 6, 9});
  CHECK_FALSE(CheckpointClock(5, 0, 10).Due(10));  // the caller saves the last step itself
  CHECK_FALSE(CheckpointClock(5, 0, 10).Due(12));

  // Neither measure set: never. A time measure far off: only the steps' multiples.
  CheckpointClock never(0, 0, 10);
  CheckpointClock far(4, 1e9, 10);
  for (int64_t reached = 1; reached <= 10; ++reached) {
    CHECK_FALSE(never.Due(reached));
    CHECK(far.Due(reached) == (reached % 4 == 0));
  }
  far.Began();
  CHECK(far.Due(8));
}

TEST_CASE("a checkpoint clock in seconds is due once that long has passed since the last began") {
  std::unique_ptr<MemEnv> env = NewMemEnv();  // its clock moves only when the test moves it
  CheckpointClock every10s(0, 10, 100, env.get());
  CHECK_FALSE(every10s.Due(1));
  env->AdvanceClock(absl::Seconds(9));
  CHECK_FALSE(every10s.Due(2));
  env->AdvanceClock(absl::Seconds(1));
  CHECK(every10s.Due(3));
  CHECK(every10s.Due(4));          // due until a checkpoint begins
  CHECK_FALSE(every10s.Due(100));  // the caller saves the last step itself
  every10s.Began();
  CHECK_FALSE(every10s.Due(5));  // the measure starts over
  env->AdvanceClock(absl::Seconds(9.5));
  CHECK_FALSE(every10s.Due(6));
  env->AdvanceClock(absl::Seconds(0.5));
  CHECK(every10s.Due(7));

  // With a step measure too, whichever comes first.
  CheckpointClock both(4, 10, 100, env.get());
  CHECK(both.Due(4));
  CHECK_FALSE(both.Due(5));
  env->AdvanceClock(absl::Seconds(10));
  CHECK(both.Due(5));
}

TEST_CASE("the loop trains each step from the first on once and reports what the steps did") {
  Loop loop;
  const TrainingRun run = ValueOrDie(RunTrainingSteps(*loop.coordinator, 0, 10, "steps test"));
  CHECK(loop.batches->Seen() == Range(0, 10));
  CHECK(run.steps == 10);
  CHECK(run.examples == 10 * kExamplesPerStep);
  CHECK(run.final_loss == 9.0);  // the last ~5%: the last step alone
  CHECK(run.evaluations.empty());
  CHECK(run.examples_per_sec_by_pass.empty());  // no pass length given
}

TEST_CASE("a resumed loop trains from its first step, and counts only its own steps") {
  Loop loop;
  const TrainingRun run = ValueOrDie(RunTrainingSteps(*loop.coordinator, 36, 40, "steps test"));
  CHECK(loop.batches->Seen() == Range(36, 40));
  CHECK(run.steps == 4);
  CHECK(run.examples == 4 * kExamplesPerStep);
  // The last 40 / 20 = 2 steps: losses 38 and 39 of 2 examples each.
  CHECK(run.final_loss == 38.5);
}

TEST_CASE("a closure's error ends the loop with that error") {
  Loop loop(/*fail_at=*/3);
  const absl::Status st = RunTrainingSteps(*loop.coordinator, 0, 8, "steps test").status();
  CHECK(absl::IsInvalidArgument(st));
  CHECK(absl::StrContains(st.message(), "batch 3 is bad"));
}

TEST_CASE("each whole pass's examples per second is recorded, a resumed partial pass's is not") {
  StepCadence cadence;
  cadence.pass_steps = 4;
  {
    Loop loop;
    const TrainingRun run =
        ValueOrDie(RunTrainingSteps(*loop.coordinator, 0, 10, "steps test", cadence));
    REQUIRE(run.examples_per_sec_by_pass.size() == 2);  // steps 0-3 and 4-7; 8-9 is no pass
    for (double eps : run.examples_per_sec_by_pass) CHECK(eps > 0);
  }
  {
    Loop loop;
    const TrainingRun run =
        ValueOrDie(RunTrainingSteps(*loop.coordinator, 2, 12, "steps test", cadence));
    CHECK(run.examples_per_sec_by_pass.size() == 2);  // 4-7 and 8-11; 2-3 began before
  }
}

// What the checkpoint function saw: the steps it was called at, and whether every step before
// each had been trained by then.
struct Checkpoints {
  absl::Mutex mu;
  std::vector<int64_t> steps ABSL_GUARDED_BY(mu);
  bool all_trained_before ABSL_GUARDED_BY(mu) = true;
};

TEST_CASE("a checkpoint is taken every few steps after the steps before it, never at the last") {
  Loop loop;
  auto seen = std::make_shared<Checkpoints>();
  StepCadence cadence;
  cadence.checkpoint_every = 3;
  cadence.checkpoint = [seen, batches = loop.batches](int64_t step, std::function<void()> on_cut)
      -> absl::StatusOr<std::string> {
    const std::multiset<int64_t> trained = batches->Seen();
    {
      absl::MutexLock lock(&seen->mu);
      seen->steps.push_back(step);
      for (int64_t s = 0; s < step; ++s) {
        if (trained.count(s) == 0) seen->all_trained_before = false;
      }
    }
    if (step != 6) on_cut();  // one checkpoint ends without calling it, as a failed cut may
    return absl::StrCat("ckpt-", step);
  };
  const TrainingRun run =
      ValueOrDie(RunTrainingSteps(*loop.coordinator, 0, 10, "steps test", cadence));
  CHECK(run.steps == 10);
  absl::MutexLock lock(&seen->mu);
  CHECK(seen->steps == std::vector<int64_t>{3, 6, 9});
  CHECK(seen->all_trained_before);
}

TEST_CASE("a checkpoint lost to an unavailable PS is skipped, any other failure ends the run") {
  StepCadence cadence;
  cadence.checkpoint_every = 2;
  SUBCASE("unavailable") {
    Loop loop;
    cadence.checkpoint = [](int64_t, std::function<void()> on_cut) -> absl::StatusOr<std::string> {
      on_cut();
      return absl::UnavailableError("a PS was lost");
    };
    CHECK(ValueOrDie(RunTrainingSteps(*loop.coordinator, 0, 6, "steps test", cadence)).steps ==
          6);
  }
  SUBCASE("another error") {
    Loop loop;
    cadence.checkpoint = [](int64_t, std::function<void()> on_cut) -> absl::StatusOr<std::string> {
      on_cut();
      return absl::PermissionDeniedError("the directory is read-only");
    };
    CHECK(absl::IsPermissionDenied(
        RunTrainingSteps(*loop.coordinator, 0, 6, "steps test", cadence).status()));
  }
}

TEST_CASE("a validation is started every few steps, and its failure to start ends the run") {
  Loop loop;
  std::vector<int64_t> asked;
  StepCadence cadence;
  cadence.eval_every = 3;
  cadence.evaluate = [&asked](int64_t step) -> absl::StatusOr<std::unique_ptr<RunningEvaluation>> {
    asked.push_back(step);
    return absl::FailedPreconditionError("no test set here");
  };
  CHECK(absl::IsFailedPrecondition(
      RunTrainingSteps(*loop.coordinator, 0, 10, "steps test", cadence).status()));
  CHECK(asked == std::vector<int64_t>{3});
}

TEST_CASE("no validation is started at the last step, which the caller evaluates") {
  Loop loop;
  std::vector<int64_t> asked;
  StepCadence cadence;
  cadence.eval_every = 5;
  cadence.evaluate = [&asked](int64_t step) -> absl::StatusOr<std::unique_ptr<RunningEvaluation>> {
    asked.push_back(step);
    return absl::FailedPreconditionError("no test set here");
  };
  CHECK(ValueOrDie(RunTrainingSteps(*loop.coordinator, 6, 10, "steps test", cadence)).steps == 4);
  CHECK(asked.empty());
}

}  // namespace
}  // namespace tessera
