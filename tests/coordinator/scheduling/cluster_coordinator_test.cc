// ClusterCoordinator on the real in-process cluster: TF's ClusterCoordinator cases (scheduling,
// join, the first error wins, worker preemption, a dead parameter server) plus per-worker
// resources and a small training run.
//
// Replica functions that must be "in the middle" when a worker is killed wait on the
// Timekeeper's gate (tests/coordinator/coordinator_test_util.h), which the test opens once it has
// done its damage; none of them blocks its worker's thread.
#include "coordinator/scheduling/cluster_coordinator.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actors/ps/train_step.h"
#include "actors/scheduling/replica.h"
#include "cluster/base/cluster.h"
#include "cluster/base/testing.h"
#include "coordinator/ps/sharded_variable.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/scheduling/testing.h"
#include "core/model/model.h"
#include "tessera/data.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"
#include "tests/captured_log.h"
#include "tests/coordinator/coordinator_test_util.h"
#include "tests/coordinator/scheduling/coordinator_events.h"
#include "tests/event_count.h"

namespace tessera {
namespace {

using testing::FetchAllWithin;
using testing::kWaitLimit;
using testing::ValueOrDie;

// The arguments of sleep_add: sleep `ms` milliseconds.
ClosureValues SleepFor(int64_t ms) {
  ClosureValues args;
  args.Set("ms", ms);
  return args;
}

// A result naming the worker slot that ran the closure.
ClosureValues Slot(int32_t slot) {
  ClosureValues out;
  out.Set("slot", int64_t{slot});
  return out;
}

// Adds `delta` to the scalar `counter` from the worker, then reports the worker's slot.
void AddAndReport(ReplicaContext& ctx, const VariableHandle& counter, float delta,
                  Done<ClosureValues> done) {
  const int32_t slot = ctx.worker().index;
  AssignAsync(ctx.shards(), counter, AssignKind::kAdd, Tensor(Shape{}, delta),
              [done, slot](absl::Status s) {
                if (!s.ok()) return done(s);
                done(Slot(slot));
              });
}

// A cluster, a strategy with a scalar "counter" (zeros, on ps 0), a Timekeeper, a registry with
// the functions below, and a coordinator whose hooks `events` counts — declared so that they are
// destroyed coordinator first, then the strategy, then the cluster.
//
//   add2          counter += 2; returns {slot}
//   gated_add     waits for the gate, then counter += 1; returns {slot}
//   sleep_add     sleeps args "ms" (default 1) ms, then counter += 1; returns {slot}
//   fail          returns InvalidArgument("boom")
//   gated_fail    waits for the gate, then returns InvalidArgument("boom")
struct Fixture {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ParameterServerStrategy> strategy;
  std::unique_ptr<testing::Timekeeper> timekeeper;
  ShardedVariable counter;
  std::shared_ptr<FunctionRegistry> registry;
  std::unique_ptr<ClusterCoordinator> coordinator;
  std::shared_ptr<testing::CoordinatorEvents> events;

  // Hands the coordinator `injector` (null: none), its hooks counted by `events`.
  void Inject(std::shared_ptr<FaultInjector> injector) {
    events = std::make_shared<testing::CoordinatorEvents>(std::move(injector));
    ClusterCoordinatorTesting::SetFaultInjector(*coordinator, events);
  }
  // Whether `condition` on the coordinator's state holds, checked again at each of its changes.
  bool AwaitState(const std::function<bool()>& condition) const {
    return events->AwaitState(condition, kWaitLimit);
  }
  float Counter() const {
    const Tensor value = ValueOrDie(counter.Read(), "reading the counter");
    REQUIRE(value.size() == 1);
    return value.values()[0];
  }
  std::vector<RemoteValue> ScheduleMany(const std::string& fn, int n, ClosureValues args = {}) {
    std::vector<RemoteValue> out;
    for (int i = 0; i < n; ++i) {
      absl::StatusOr<RemoteValue> value = coordinator->Schedule(fn, args);
      REQUIRE_MESSAGE(value.ok(), value.status().ToString());
      out.push_back(*std::move(value));
    }
    return out;
  }
  WorkerPoolStatus Workers() const { return coordinator->workers(); }
};

struct FixtureOptions {
  int32_t num_ps = 1;
  int32_t num_workers = 2;
  CoordinatorOptions coordinator;
  CoordinatorRun run;
  // Runs after the standard variables and functions exist, before the coordinator starts.
  std::function<void(Fixture&)> setup;
};

FixtureOptions Options(int32_t num_ps, int32_t num_workers,
                       std::function<void(Fixture&)> setup = nullptr,
                       CoordinatorOptions coordinator = {}, CoordinatorRun run = {}) {
  FixtureOptions options;
  options.num_ps = num_ps;
  options.num_workers = num_workers;
  options.setup = std::move(setup);
  options.coordinator = coordinator;
  options.run = std::move(run);
  return options;
}

std::unique_ptr<Fixture> MakeFixture(FixtureOptions options) {
  auto f = std::make_unique<Fixture>();
  f->cluster = testing::StartCluster(options.num_ps, options.num_workers);
  f->strategy = std::make_unique<ParameterServerStrategy>(*f->cluster);
  f->timekeeper = std::make_unique<testing::Timekeeper>(f->cluster->actors().system());
  VariableOptions counter;
  counter.name = "counter";
  counter.shape = Shape{};
  f->counter = ValueOrDie(f->strategy->CreateVariable(counter), "counter");
  f->registry = std::make_shared<FunctionRegistry>();

  const VariableHandle c = f->counter.handle();
  const caf::actor tk = f->timekeeper->actor();
  FunctionRegistry& r = *f->registry;
  REQUIRE(r.AddReplicaFunction("add2", [c](ReplicaContext& ctx, const ClosureValues&,
                                           Done<ClosureValues> done) {
             AddAndReport(ctx, c, 2, done);
           }).ok());
  REQUIRE(r.AddReplicaFunction("gated_add", [c, tk](ReplicaContext& ctx, const ClosureValues&,
                                                    Done<ClosureValues> done) {
             testing::AfterGate(ctx, tk, [&ctx, c, done](absl::Status s) {
               if (!s.ok()) return done(s);
               AddAndReport(ctx, c, 1, done);
             });
           }).ok());
  REQUIRE(r.AddReplicaFunction("sleep_add", [c, tk](ReplicaContext& ctx, const ClosureValues& args,
                                                    Done<ClosureValues> done) {
             const int32_t ms = static_cast<int32_t>(args.Get<int64_t>("ms").value_or(1));
             testing::AfterSleep(ctx, tk, ms, [&ctx, c, done](absl::Status s) {
               if (!s.ok()) return done(s);
               AddAndReport(ctx, c, 1, done);
             });
           }).ok());
  REQUIRE(r.AddReplicaFunction("fail", [](ReplicaContext&, const ClosureValues&,
                                          Done<ClosureValues> done) {
             done(absl::InvalidArgumentError("boom"));
           }).ok());
  REQUIRE(r.AddReplicaFunction("gated_fail", [tk](ReplicaContext& ctx, const ClosureValues&,
                                                  Done<ClosureValues> done) {
             testing::AfterGate(ctx, tk,
                                [done](absl::Status) { done(absl::InvalidArgumentError("boom")); });
           }).ok());
  if (options.setup) options.setup(*f);
  f->coordinator = ValueOrDie(ClusterCoordinator::Create(
      *f->strategy, f->registry, options.coordinator, std::move(options.run)));
  f->Inject(nullptr);
  return f;
}

int CountInState(const std::vector<RemoteValue>& values, RemoteValueState state) {
  return static_cast<int>(std::count_if(values.begin(), values.end(),
                                        [&](const RemoteValue& v) { return v.state() == state; }));
}

TEST_CASE("five closures adding 2 to a scalar variable leave it at 10 with every value ready") {
  auto f = MakeFixture(FixtureOptions{});
  const std::vector<RemoteValue> values = f->ScheduleMany("add2", 5);
  REQUIRE(FetchAllWithin(values).ok());
  REQUIRE(f->coordinator->Join().ok());
  CHECK(CountInState(values, RemoteValueState::kReady) == 5);
  CHECK(f->Counter() == 10.0f);
  CHECK(ValueOrDie(f->coordinator->Done()));
  const ClosureStats stats = f->coordinator->stats();
  CHECK(stats.scheduled == 5);
  CHECK(stats.completed == 5);
  CHECK(stats.failed == 0);
  CHECK(stats.retried == 0);
  CHECK(stats.cancelled == 0);
  CHECK(stats.queued == 0);
  CHECK(stats.running == 0);
  // Each result names a real worker slot.
  for (const RemoteValue& v : values) {
    const int64_t slot = ValueOrDie(v.Fetch<int64_t>("slot"));
    CHECK((slot == 0 || slot == 1));
  }
}

TEST_CASE("closure arguments reach the replica function and its results come back") {
  auto f = MakeFixture(Options(1, 1, [](Fixture& fx) {
    REQUIRE(fx.registry
                ->AddReplicaFunction(
                    "echo",
                    [](ReplicaContext& ctx, const ClosureValues& args, Done<ClosureValues> done) {
                      ClosureValues out = args;
                      out.Set("rate", 2 * args.Get<double>("rate").value_or(0))
                          .Set("step", 2 * args.Get<int64_t>("step").value_or(0))
                          .Set("worker", absl::StrCat("worker ", ctx.worker().index, "/",
                                                      ctx.worker().num_workers));
                      done(std::move(out));
                    })
                .ok());
  }));
  ClosureValues args;
  args.Set("rate", 1.5)
      .Set("step", int64_t{-2})
      .Set("weights", testing::FromVector(Shape{2, 2}, {1, 2, 3, 4}))
      .Set("greeting", "hello");
  const RemoteValue value = ValueOrDie(f->coordinator->Schedule("echo", args));
  const ClosureValues out = ValueOrDie(value.FetchWithin(kWaitLimit));
  CHECK(out.size() == 5);
  CHECK(ValueOrDie(out.Get<double>("rate")) == 3.0);
  CHECK(ValueOrDie(out.Get<int64_t>("step")) == -4);
  CHECK_TENSOR(ValueOrDie(out.Get<Tensor>("weights")), ValueOrDie(args.Get<Tensor>("weights")));
  CHECK(ValueOrDie(out.Get<std::string>("greeting")) == "hello");
  CHECK(ValueOrDie(out.Get<std::string>("worker")) == "worker 0/1");
  CHECK(ValueOrDie(value.Fetch<double>("rate")) == 3.0);
}

TEST_CASE("Join and Done with nothing scheduled return at once") {
  auto f = MakeFixture(FixtureOptions{});
  const absl::Time start = absl::Now();
  CHECK(f->coordinator->Join().ok());
  CHECK(ValueOrDie(f->coordinator->Done()));
  CHECK(absl::Now() - start < absl::Seconds(1));
  CHECK(f->coordinator->stats().scheduled == 0);
}

TEST_CASE("the first error is raised once, cancels the queued closures, and scheduling resumes") {
  auto f = MakeFixture(Options(1, 1));
  const RemoteValue failing = ValueOrDie(f->coordinator->Schedule("gated_fail"));
  REQUIRE(f->timekeeper->WaitForWaits(1));  // running, held at the gate
  const std::vector<RemoteValue> queued = f->ScheduleMany("add2", 5);
  CHECK(f->coordinator->stats().queued == 5);
  CHECK(ValueOrDie(f->coordinator->Done()) == false);
  f->timekeeper->Open();

  const absl::Status error = failing.FetchWithin(kWaitLimit).status();
  CHECK(absl::IsInvalidArgument(error));
  CHECK(error.message() == "boom");
  CHECK(failing.state() == RemoteValueState::kFailed);
  for (const RemoteValue& v : queued) {
    const absl::Status s = v.FetchWithin(kWaitLimit).status();
    CHECK_MESSAGE(absl::IsCancelled(s), s.ToString());
    CHECK_MESSAGE(absl::StrContains(s.message(), "boom"), s.ToString());
    CHECK(v.state() == RemoteValueState::kCancelled);
  }
  const ClosureStats stats = f->coordinator->stats();
  CHECK(stats.failed == 1);
  CHECK(stats.cancelled == 5);
  CHECK(stats.completed == 0);
  CHECK(f->Counter() == 0.0f);  // the cancelled closures never ran

  SUBCASE("raised by the next Join") {
    const absl::Status join = f->coordinator->Join();
    CHECK(absl::IsInvalidArgument(join));
    CHECK(join.message() == "boom");
    CHECK(f->coordinator->Join().ok());  // raised once
    CHECK(ValueOrDie(f->coordinator->Done()));
  }
  SUBCASE("raised by the next Schedule") {
    const absl::StatusOr<RemoteValue> rejected = f->coordinator->Schedule("add2");
    CHECK(absl::IsInvalidArgument(rejected.status()));
    CHECK(f->coordinator->stats().scheduled == 6);  // the rejected one was not queued
    CHECK(f->coordinator->Join().ok());
  }
  SUBCASE("raised by the next Done") {
    const absl::StatusOr<bool> done = f->coordinator->Done();
    CHECK(absl::IsInvalidArgument(done.status()));
    CHECK(ValueOrDie(f->coordinator->Done()));
  }
  // Work scheduled after the error was raised runs normally.
  const std::vector<RemoteValue> later = f->ScheduleMany("add2", 3);
  REQUIRE(FetchAllWithin(later).ok());
  CHECK(f->coordinator->Join().ok());
  CHECK(f->Counter() == 6.0f);
}

TEST_CASE("when two closures fail only the first error is raised, and only once") {
  auto f = MakeFixture(Options(1, 2, [](Fixture& fx) {
    const caf::actor tk = fx.timekeeper->actor();
    REQUIRE(fx.registry
                ->AddReplicaFunction(
                    "gated_fail_with",
                    [tk](ReplicaContext& ctx, const ClosureValues& args, Done<ClosureValues> done) {
                      const std::string message =
                          args.Get<std::string>("message").value_or("no message");
                      testing::AfterGate(ctx, tk, [done, message](absl::Status) {
                        done(absl::InternalError(message));
                      });
                    })
                .ok());
  }));
  ClosureValues first, second;
  first.Set("message", "first failure");
  second.Set("message", "second failure");
  const RemoteValue a = ValueOrDie(f->coordinator->Schedule("gated_fail_with", first));
  const RemoteValue b = ValueOrDie(f->coordinator->Schedule("gated_fail_with", second));
  REQUIRE(f->timekeeper->WaitForWaits(2));  // both running, one on each worker
  f->timekeeper->Open();
  CHECK(absl::IsInternal(a.FetchWithin(kWaitLimit).status()));
  CHECK(absl::IsInternal(b.FetchWithin(kWaitLimit).status()));
  CHECK(f->coordinator->stats().failed == 2);
  const absl::Status join = f->coordinator->Join();
  CHECK(absl::IsInternal(join));
  CHECK((join.message() == "first failure" || join.message() == "second failure"));
  CHECK(f->coordinator->Join().ok());  // the other error is not raised later
  CHECK(ValueOrDie(f->coordinator->Done()));
}

TEST_CASE("an error from an immediately failing function is raised by Join") {
  auto f = MakeFixture(FixtureOptions{});
  const RemoteValue failing = ValueOrDie(f->coordinator->Schedule("fail"));
  CHECK(absl::IsInvalidArgument(failing.FetchWithin(kWaitLimit).status()));
  CHECK(absl::IsInvalidArgument(f->coordinator->Join()));
  CHECK(f->coordinator->Join().ok());
}

TEST_CASE("a worker killed between closures is replaced and no closure is lost") {
  testing::CapturedLog log;
  auto f = MakeFixture(Options(1, 2));
  REQUIRE(FetchAllWithin(f->ScheduleMany("add2", 10)).ok());
  CHECK(f->Counter() == 20.0f);

  CHECK(ClusterCoordinatorTesting::KillWorker(*f->coordinator, 0));
  REQUIRE(f->AwaitState([&] { return f->Workers().live_slots == std::vector<int32_t>{1}; }));
  CHECK(f->Workers().worker_failures == 1);
  // Nobody lives in slot 0 now.
  CHECK_FALSE(ClusterCoordinatorTesting::KillWorker(*f->coordinator, 0));

  const std::vector<RemoteValue> on_one = f->ScheduleMany("add2", 10);
  REQUIRE(FetchAllWithin(on_one).ok());
  for (const RemoteValue& v : on_one) CHECK(ValueOrDie(v.Fetch<int64_t>("slot")) == 1);
  CHECK(f->Counter() == 40.0f);

  ClusterCoordinatorTesting::RestartWorker(*f->coordinator, 0);
  REQUIRE(f->AwaitState([&] { return f->Workers().live_slots == std::vector<int32_t>{0, 1}; }));
  CHECK(f->Workers().worker_restarts == 1);
  // Its loss and its return are both logged.
  CHECK_MESSAGE(absl::StrContains(log.text(), "worker 0 lost; 0 closure(s) go back on the queue"),
                log.text());
  CHECK_MESSAGE(absl::StrContains(log.text(), "worker 0 is back (lost 1 time(s) so far)"),
                log.text());
  REQUIRE(FetchAllWithin(f->ScheduleMany("add2", 10)).ok());
  REQUIRE(f->coordinator->Join().ok());
  CHECK(f->Counter() == 60.0f);
  const ClosureStats stats = f->coordinator->stats();
  CHECK(stats.completed == 30);
  CHECK(stats.retried == 0);
}

TEST_CASE("a worker killed in the middle of a closure: it re-runs on the replacement, once") {
  auto f = MakeFixture(Options(1, 2));
  const std::vector<RemoteValue> values = f->ScheduleMany("gated_add", 2);
  REQUIRE(f->timekeeper->WaitForWaits(2));  // one closure held on each worker

  CHECK(ClusterCoordinatorTesting::KillWorker(*f->coordinator, 0));
  REQUIRE(f->AwaitState([&] { return f->coordinator->stats().retried == 1; }));
  // Its closure is back in the queue (worker 1 is busy) and its value says so.
  CHECK(f->coordinator->stats().queued == 1);
  CHECK(f->coordinator->stats().running == 1);
  CHECK(CountInState(values, RemoteValueState::kAborted) == 1);
  CHECK(CountInState(values, RemoteValueState::kNotReady) == 1);

  ClusterCoordinatorTesting::RestartWorker(*f->coordinator, 0, absl::Milliseconds(5));
  REQUIRE(f->timekeeper->WaitForWaits(3));  // the re-run is held on the replacement
  f->timekeeper->Open();
  const std::vector<ClosureValues> results = ValueOrDie(FetchAllWithin(values));
  CHECK(CountInState(values, RemoteValueState::kReady) == 2);
  // Both slots finished one closure each: the aborted one ran again in slot 0.
  std::vector<int64_t> slots = {ValueOrDie(results[0].Get<int64_t>("slot")),
                                ValueOrDie(results[1].Get<int64_t>("slot"))};
  std::sort(slots.begin(), slots.end());
  CHECK(slots == std::vector<int64_t>{0, 1});
  REQUIRE(f->coordinator->Join().ok());
  CHECK(f->Counter() == 2.0f);  // the killed attempt never got past the gate
  const ClosureStats stats = f->coordinator->stats();
  CHECK(stats.completed == 2);
  CHECK(stats.retried == 1);
  CHECK(stats.failed == 0);
  const WorkerPoolStatus workers = f->Workers();
  CHECK(workers.worker_failures == 1);
  CHECK(workers.worker_restarts == 1);
  CHECK(workers.live_slots == std::vector<int32_t>{0, 1});
}

TEST_CASE("two workers killed in the middle of closures: every closure completes once") {
  auto f = MakeFixture(Options(1, 3));
  const std::vector<RemoteValue> values = f->ScheduleMany("gated_add", 3);
  REQUIRE(f->timekeeper->WaitForWaits(3));
  CHECK(ClusterCoordinatorTesting::KillWorker(*f->coordinator, 0));
  CHECK(ClusterCoordinatorTesting::KillWorker(*f->coordinator, 1));
  REQUIRE(f->AwaitState([&] { return f->coordinator->stats().retried == 2; }));
  CHECK(CountInState(values, RemoteValueState::kAborted) == 2);
  CHECK(f->Workers().live_slots == std::vector<int32_t>{2});

  ClusterCoordinatorTesting::RestartWorker(*f->coordinator, 0);
  ClusterCoordinatorTesting::RestartWorker(*f->coordinator, 1);
  REQUIRE(f->timekeeper->WaitForWaits(5));
  f->timekeeper->Open();
  REQUIRE(FetchAllWithin(values).ok());
  REQUIRE(f->coordinator->Join().ok());
  CHECK(CountInState(values, RemoteValueState::kReady) == 3);
  CHECK(f->Counter() == 3.0f);
  CHECK(f->coordinator->stats().completed == 3);
  CHECK(f->coordinator->stats().retried == 2);
  const WorkerPoolStatus workers = f->Workers();
  CHECK(workers.worker_failures == 2);
  CHECK(workers.worker_restarts == 2);
  CHECK(workers.live_slots == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE("the only worker killed mid-closure: the closure waits for its replacement") {
  auto f = MakeFixture(Options(1, 1));
  const RemoteValue value = ValueOrDie(f->coordinator->Schedule("gated_add"));
  REQUIRE(f->timekeeper->WaitForWaits(1));
  CHECK(ClusterCoordinatorTesting::KillWorker(*f->coordinator, 0));
  REQUIRE(f->AwaitState([&] { return value.state() == RemoteValueState::kAborted; }));
  CHECK(absl::IsDeadlineExceeded(value.FetchWithin(absl::Milliseconds(20)).status()));
  CHECK(ValueOrDie(f->coordinator->Done()) == false);
  f->timekeeper->Open();  // the gate is open before the re-run even starts
  ClusterCoordinatorTesting::RestartWorker(*f->coordinator, 0, absl::Milliseconds(10));
  CHECK(ValueOrDie(ValueOrDie(value.FetchWithin(kWaitLimit)).Get<int64_t>("slot")) == 0);
  REQUIRE(f->coordinator->Join().ok());
  CHECK(f->Counter() == 1.0f);
}

TEST_CASE("continuous worker failures while 200 closures run: every closure completes") {
  auto f = MakeFixture(Options(1, 3));
  f->Inject(KillRandomWorkerEvery(std::chrono::milliseconds(10), /*seed=*/5,
                                  /*restart_delay=*/std::chrono::milliseconds(3)));
  const std::vector<RemoteValue> values = f->ScheduleMany("sleep_add", 200, SleepFor(2));
  const absl::StatusOr<std::vector<ClosureValues>> results =
      FetchAllWithin(values, absl::Seconds(60));
  REQUIRE_MESSAGE(results.ok(), results.status().ToString());
  REQUIRE(f->coordinator->Join().ok());
  CHECK(CountInState(values, RemoteValueState::kReady) == 200);
  const ClosureStats stats = f->coordinator->stats();
  CHECK(stats.scheduled == 200);
  CHECK(stats.completed == 200);
  CHECK(stats.failed == 0);
  CHECK(stats.cancelled == 0);
  CHECK(stats.retried >= 1);
  CHECK(f->Workers().worker_failures >= 1);
  // Exactly once: an attempt killed after its update landed is not applied again by its re-run
  // (Note [Exactly-once updates] in core/ps/update_ledger.h).
  CHECK(f->Counter() == 200.0f);
  MESSAGE(stats.retried, " re-runs, ",
          testing::ShardInfos(*f->cluster, f->counter)[0].duplicate_updates,
          " of their updates dropped as repeats");
}

TEST_CASE("a closure re-run after its first attempt updated a shard applies its update once") {
  // Its first attempt applies a gradient, then reports a shard it could not reach (Unavailable),
  // so the coordinator runs it again: the second attempt's gradient is the first's repeat.
  ShardedVariable w;
  auto attempts = std::make_shared<std::atomic<int>>(0);
  auto f = MakeFixture(Options(1, 2, [&](Fixture& fx) {
    VariableOptions options;
    options.name = "w";
    options.shape = Shape{2, 3};
    options.initializer = InitializerSpec{"ones", {}, 0};
    options.optimizer = OptimizerSpec{"sgd", {{"learning_rate", 0.5}}};
    w = ValueOrDie(fx.strategy->CreateVariable(options), "w");
    REQUIRE(fx.registry
                ->AddReplicaFunction(
                    "step_then_unreachable",
                    [h = w.handle(), attempts](ReplicaContext& ctx, const ClosureValues&,
                                               Done<ClosureValues> done) {
                      ApplyDenseGradientAsync(
                          ctx.shards(), h, Tensor(Shape{2, 3}, 1.0f),
                          [done, attempts](absl::Status s) {
                            if (!s.ok()) return done(s);
                            if (attempts->fetch_add(1) == 0) {
                              return done(absl::UnavailableError("a shard went away"));
                            }
                            done(ClosureValues{});
                          });
                    })
                .ok());
  }));
  const RemoteValue value = ValueOrDie(f->coordinator->Schedule("step_then_unreachable"));
  REQUIRE(FetchAllWithin({value}).ok());
  REQUIRE(f->coordinator->Join().ok());
  CHECK(attempts->load() == 2);
  CHECK(f->coordinator->stats().retried == 1);
  CHECK(testing::SameTensor(ValueOrDie(w.Read()), Tensor(Shape{2, 3}, 0.5f)));  // one step
  const ShardInfo info = testing::ShardInfos(*f->cluster, w)[0];
  CHECK(info.step == 1);
  CHECK(info.duplicate_updates == 1);
}

// Note [Closure ids that survive a restart] (core/scheduling/closure_queue.h): what a coordinator
// restarted for a run relies on to apply the closures in flight at the loss exactly once.
TEST_CASE(
    "a successor of the same run's queue identity re-runs the step in flight at the loss, "
    "applied once, from the shards' mark") {
  CoordinatorRun run;
  run.queue_identity = 0x5eed;
  // add_and_stall: counter += 2 (counted in `stalled` once the shard applied it), and never
  // answers (its coordinator is lost meanwhile).
  auto stalled = std::make_shared<testing::EventCount>();
  auto f = MakeFixture(Options(
      1, 2,
      [stalled](Fixture& fx) {
        REQUIRE(fx.registry
                    ->AddReplicaFunction(
                        "add_and_stall",
                        [h = fx.counter.handle(), stalled](
                            ReplicaContext& ctx, const ClosureValues&, Done<ClosureValues> done) {
                          AssignAsync(ctx.shards(), h, AssignKind::kAdd, Tensor(Shape{}, 2.0f),
                                      [done, stalled](absl::Status s) {
                                        REQUIRE(s.ok());
                                        stalled->Add();
                                      });
                        })
                    .ok());
      },
      {}, run));
  CHECK(f->coordinator->queue_identity() == 0x5eed);
  const auto mark = [&f] {
    int64_t out = 0;
    const ShardInfo info = testing::ShardInfos(*f->cluster, f->counter)[0];
    for (const auto& [queue, resolved_below] : info.ledger_marks) {
      if (queue == 0x5eed) out = resolved_below;
    }
    return out;
  };
  std::vector<RemoteValue> values;
  for (int64_t step = 0; step < 5; ++step) {
    values.push_back(ValueOrDie(f->coordinator->Schedule("add2", {}, step), "Schedule"));
  }
  REQUIRE(FetchAllWithin(values).ok());
  REQUIRE(f->coordinator->Join().ok());
  CHECK(absl::IsInvalidArgument(f->coordinator->Schedule("add2", {}, 4).status()));  // rising
  CHECK(absl::IsInvalidArgument(f->coordinator->Schedule("add2", {}, -1).status()));
  CHECK(absl::IsInvalidArgument(
      f->coordinator->Schedule("add2", {}, std::numeric_limits<int64_t>::max()).status()));
  // Step 5 reaches the shard; its coordinator is lost before it answers.
  REQUIRE(f->coordinator->Schedule("add_and_stall", {}, 5).ok());
  REQUIRE(stalled->AwaitAtLeast(1, kWaitLimit));
  CHECK(f->Counter() == 12.0f);
  f->coordinator.reset();
  CHECK(mark() == 6);  // step 5's id: every step below it resolved

  // The successor starts at the mark's step: step 5 again, under its old id (dropped), then 6.
  f->coordinator = ValueOrDie(ClusterCoordinator::Create(*f->strategy, f->registry, {}, run));
  values = {ValueOrDie(f->coordinator->Schedule("add2", {}, mark() - 1)),
            ValueOrDie(f->coordinator->Schedule("add2", {}, 6))};
  REQUIRE(FetchAllWithin(values).ok());
  REQUIRE(f->coordinator->Join().ok());
  CHECK(f->Counter() == 14.0f);
  CHECK(testing::ShardInfos(*f->cluster, f->counter)[0].duplicate_updates == 1);

  // A coordinator of its own (a random identity) applies step 6 again.
  f->coordinator.reset();
  f->coordinator = ValueOrDie(ClusterCoordinator::Create(*f->strategy, f->registry));
  CHECK(f->coordinator->queue_identity() != 0x5eed);
  REQUIRE(ValueOrDie(f->coordinator->Schedule("add2", {}, 6)).Fetch<int64_t>("slot").ok());
  CHECK(f->Counter() == 16.0f);
}

TEST_CASE("InjectWorkerFailures kills exactly K workers and every closure completes") {
  auto f = MakeFixture(Options(1, 3));
  constexpr int kClosures = 100, kFailures = 2;
  // What ClusterCoordinatorTesting::InjectWorkerFailures installs.
  f->Inject(KillBusyWorkersAtCompletions(kFailures, kClosures, /*seed=*/11,
                                         /*restart_delay=*/std::chrono::milliseconds(5)));
  // 20 ms closures: a kill order reaches a worker that is still busy, not one whose reply is
  // already on its way (with 1 ms closures, on a loaded host, both kills once missed).
  const std::vector<RemoteValue> values = f->ScheduleMany("sleep_add", kClosures, SleepFor(20));
  REQUIRE(FetchAllWithin(values, absl::Seconds(60)).ok());
  REQUIRE(f->coordinator->Join().ok());
  REQUIRE(f->AwaitState([&] {
    const WorkerPoolStatus w = f->Workers();
    return w.worker_restarts == kFailures && w.live_slots.size() == 3;
  }));
  const WorkerPoolStatus workers = f->Workers();
  CHECK(workers.worker_failures == kFailures);
  CHECK(workers.live_slots == std::vector<int32_t>{0, 1, 2});
  const ClosureStats stats = f->coordinator->stats();
  CHECK(stats.completed == kClosures);
  CHECK(stats.failed == 0);
  // Each kill picks a busy worker, whose closure is re-run (unless it finished in the instant
  // between the kill order and the worker's death).
  CHECK(stats.retried >= 1);
  CHECK(stats.retried <= kFailures);
  CHECK(f->Counter() >= static_cast<float>(kClosures));
  CHECK(f->Counter() <= static_cast<float>(kClosures + stats.retried));
}

// Passes every hook on to `inner`, counting the kills and restarts it orders: once as many
// restarts have happened as were ordered, none can follow (only an order starts a worker again
// in process), without waiting to see.
class CountingInjector : public FaultInjector {
 public:
  explicit CountingInjector(std::shared_ptr<FaultInjector> inner) : inner_(std::move(inner)) {}

  void OnInstalled(WorkerPoolControl& pool) override {
    Counted counted(pool, *this);
    inner_->OnInstalled(counted);
  }
  void OnClosureCompleted(WorkerPoolControl& pool) override {
    Counted counted(pool, *this);
    inner_->OnClosureCompleted(counted);
  }
  void OnWorkerStarted(WorkerPoolControl& pool, int32_t slot) override {
    Counted counted(pool, *this);
    inner_->OnWorkerStarted(counted, slot);
  }
  void OnWorkerLost(WorkerPoolControl& pool, int32_t slot) override {
    Counted counted(pool, *this);
    inner_->OnWorkerLost(counted, slot);
  }
  void OnRunFailed(WorkerPoolControl& pool) override {
    Counted counted(pool, *this);
    inner_->OnRunFailed(counted);
  }
  void OnWake(WorkerPoolControl& pool) override {
    Counted counted(pool, *this);
    inner_->OnWake(counted);
  }

  int kills() const { return kills_.load(); }
  int restarts_ordered() const { return restarts_ordered_.load(); }

 private:
  class Counted : public WorkerPoolControl {
   public:
    Counted(WorkerPoolControl& pool, CountingInjector& counts) : pool_(pool), counts_(counts) {}
    std::vector<int32_t> BusySlots() const override { return pool_.BusySlots(); }
    std::vector<int32_t> LiveSlots() const override { return pool_.LiveSlots(); }
    bool Kill(int32_t slot) override {
      const bool killed = pool_.Kill(slot);
      if (killed) counts_.kills_.fetch_add(1);
      return killed;
    }
    void RestartAfter(int32_t slot, std::chrono::milliseconds delay) override {
      counts_.restarts_ordered_.fetch_add(1);
      pool_.RestartAfter(slot, delay);
    }
    void WakeAfter(std::chrono::milliseconds delay) override { pool_.WakeAfter(delay); }

   private:
    WorkerPoolControl& pool_;
    CountingInjector& counts_;
  };

  std::shared_ptr<FaultInjector> inner_;
  std::atomic<int> kills_{0};             // the hooks run on the coordinator's thread; the test
  std::atomic<int> restarts_ordered_{0};  // reads from its own
};

TEST_CASE("InjectWorkerFailures with coinciding kill points still kills K distinct workers") {
  // 3 failures over 10 closures: the kill points (drawn from completions 2..9) often coincide
  // (seeds 1, 2 and 27 draw {3, 3, 5}, {8, 8, 9} and {9, 9, 9}), so one completion must kill
  // several distinct workers, never the same one twice, and restart one worker per kill. With one
  // worker, a kill that finds none alive falls on the next one to start.
  for (const int32_t num_workers : {3, 1}) {
    for (uint64_t seed : {1, 2, 27}) {
      CAPTURE(num_workers);
      CAPTURE(seed);
      auto f = MakeFixture(Options(1, num_workers));
      // What InjectWorkerFailures installs, counted.
      auto injector = std::make_shared<CountingInjector>(
          KillBusyWorkersAtCompletions(3, 10, seed, std::chrono::milliseconds(5)));
      f->Inject(injector);
      const std::vector<RemoteValue> values = f->ScheduleMany("sleep_add", 10, SleepFor(1));
      REQUIRE(FetchAllWithin(values).ok());
      REQUIRE(f->coordinator->Join().ok());
      REQUIRE(f->AwaitState([&] { return f->Workers().worker_restarts == 3; }));
      // Every kill point has passed (all 10 closures completed), and each kill ordered one restart,
      // all of which have happened: no extra restart can follow.
      CHECK(injector->kills() == 3);
      CHECK(injector->restarts_ordered() == 3);
      const WorkerPoolStatus workers = f->Workers();
      CHECK(workers.worker_failures == 3);
      CHECK(workers.worker_restarts == 3);
      CHECK(workers.live_slots.size() == static_cast<size_t>(num_workers));
      CHECK(f->coordinator->stats().completed == 10);
    }
  }
}

TEST_CASE("a queue bounded at 2 with 50 schedules does not deadlock") {
  CoordinatorOptions bounded;
  bounded.queue_capacity = 2;
  auto f = MakeFixture(Options(1, 1, nullptr, bounded));
  std::vector<RemoteValue> values;
  int64_t max_queued = 0;
  testing::RunWithin(absl::Seconds(30), "scheduling 50 closures on a queue of 2", [&] {
    for (int i = 0; i < 50; ++i) {
      absl::StatusOr<RemoteValue> value = f->coordinator->Schedule("sleep_add", SleepFor(1));
      if (!value.ok()) return;
      values.push_back(*std::move(value));
      max_queued = std::max(max_queued, f->coordinator->stats().queued);
    }
  });
  REQUIRE(values.size() == 50);
  CHECK(max_queued <= 2);
  CHECK(max_queued >= 1);  // the queue did fill up: Schedule had to wait
  REQUIRE(FetchAllWithin(values).ok());
  REQUIRE(f->coordinator->Join().ok());
  CHECK(f->Counter() == 50.0f);
}

TEST_CASE("scheduling an unregistered function is NotFound and queues nothing") {
  auto f = MakeFixture(FixtureOptions{});
  const absl::StatusOr<RemoteValue> value = f->coordinator->Schedule("no_such_function");
  CHECK(absl::IsNotFound(value.status()));
  CHECK(absl::StrContains(value.status().message(), "no_such_function"));
  CHECK(f->coordinator->stats().scheduled == 0);
  CHECK(f->coordinator->Join().ok());
  // The coordinator still works.
  REQUIRE(FetchAllWithin(f->ScheduleMany("add2", 1)).ok());
  CHECK(f->Counter() == 2.0f);
}

TEST_CASE(
    "a dead PS makes Schedule, Join and Done return Unavailable naming it and its variables") {
  auto f = MakeFixture(Options(2, 1, [](Fixture& fx) {
    // "counter" took ps 0; these take ps 1 and ps 0.
    VariableOptions options;
    options.name = "item_embedding";
    options.shape = Shape{10, 2};
    REQUIRE(fx.strategy->CreateVariable(options).ok());
    options.name = "dense_kernel";
    options.shape = Shape{4};
    REQUIRE(fx.strategy->CreateVariable(options).ok());
  }));
  // Handles declared after the fixture: they must not outlive the cluster.
  const ShardedVariable embedding = f->strategy->variables().at("item_embedding");
  const ShardedVariable kernel = f->strategy->variables().at("dense_kernel");
  REQUIRE(embedding.Variables().at(0).ps_task == 1);
  REQUIRE(kernel.Variables().at(0).ps_task == 0);

  // One closure running (held at the gate), two queued behind it on the only worker.
  const std::vector<RemoteValue> values = f->ScheduleMany("gated_add", 3);
  REQUIRE(f->timekeeper->WaitForWaits(1));
  CHECK(absl::IsInvalidArgument(testing::KillPs(*f->cluster, 2)));
  REQUIRE(testing::KillPs(*f->cluster, 1).ok());

  REQUIRE(f->AwaitState([&] { return !f->coordinator->Done().ok(); }));
  const absl::Status done = f->coordinator->Done().status();
  CHECK(absl::IsUnavailable(done));
  CHECK_MESSAGE(absl::StrContains(done.message(), "ps 1"), done.ToString());
  CHECK_MESSAGE(absl::StrContains(done.message(), "item_embedding"), done.ToString());
  CHECK_MESSAGE(!absl::StrContains(done.message(), "dense_kernel"), done.ToString());
  CHECK_MESSAGE(!absl::StrContains(done.message(), "counter"), done.ToString());

  const absl::StatusOr<RemoteValue> scheduled = f->coordinator->Schedule("add2");
  CHECK(absl::IsUnavailable(scheduled.status()));
  CHECK(scheduled.status() == done);
  CHECK(f->coordinator->Join() == done);  // sticky: raised every time
  CHECK(f->coordinator->Done().status() == done);
  // The queued closures were cancelled; the running one may still finish (its variable is on
  // the live PS).
  CHECK(values[1].state() == RemoteValueState::kCancelled);
  CHECK(values[2].state() == RemoteValueState::kCancelled);
  f->timekeeper->Open();
  CHECK(ValueOrDie(ValueOrDie(values[0].FetchWithin(kWaitLimit)).Get<int64_t>("slot")) == 0);

  // The driver's operations on the lost variable fail the same way; the others still work.
  const absl::Status read = embedding.Read().status();
  CHECK(absl::IsUnavailable(read));
  CHECK_MESSAGE(absl::StrContains(read.message(), "item_embedding"), read.ToString());
  CHECK_MESSAGE(absl::StrContains(read.message(), "ps 1"), read.ToString());
  CHECK(kernel.Read().ok());
  CHECK(f->Counter() == 1.0f);
}

TEST_CASE("a per-worker resource is built once per worker and rebuilt on a replacement") {
  auto builds = std::make_shared<std::atomic<int>>(0);
  auto f = MakeFixture(Options(1, 1, [builds](Fixture& fx) {
    FunctionRegistry& r = *fx.registry;
    REQUIRE(r.AddResource<int>("visits", [builds](const WorkerInfo& w) -> absl::StatusOr<int> {
               builds->fetch_add(1);
               return 100 * w.index;
             }).ok());
    REQUIRE(r.AddReplicaFunction("visit", [](ReplicaContext& ctx, const ClosureValues&,
                                             Done<ClosureValues> done) {
               absl::StatusOr<int*> visits = ctx.Resource<int>("visits");
               if (!visits.ok()) return done(visits.status());
               ++**visits;
               done(ClosureValues().Set("visits", int64_t{**visits}));
             }).ok());
    REQUIRE(r.AddReplicaFunction("misuse", [](ReplicaContext& ctx, const ClosureValues&,
                                              Done<ClosureValues> done) {
               ClosureValues codes;
               codes.Set("wrong_type", static_cast<int64_t>(
                                           ctx.Resource<double>("visits").status().code()))
                   .Set("unknown", static_cast<int64_t>(ctx.Resource<int>("nope").status().code()));
               done(std::move(codes));
             }).ok());
  }));
  auto visit_values = [&](int n) {
    std::vector<int64_t> out;
    for (const ClosureValues& v : ValueOrDie(FetchAllWithin(f->ScheduleMany("visit", n)))) {
      out.push_back(ValueOrDie(v.Get<int64_t>("visits")));
    }
    return out;
  };
  // One worker: the closures run in order against one resource instance.
  CHECK(visit_values(5) == std::vector<int64_t>{1, 2, 3, 4, 5});
  CHECK(builds->load() == 1);

  CHECK(ClusterCoordinatorTesting::KillWorker(*f->coordinator, 0));
  REQUIRE(f->AwaitState([&] { return f->Workers().live_slots.empty(); }));
  ClusterCoordinatorTesting::RestartWorker(*f->coordinator, 0);
  // The replacement (same slot) builds its own instance.
  CHECK(visit_values(3) == std::vector<int64_t>{1, 2, 3});
  CHECK(builds->load() == 2);

  const ClosureValues misuse =
      ValueOrDie(ValueOrDie(f->coordinator->Schedule("misuse")).FetchWithin(kWaitLimit));
  CHECK(static_cast<absl::StatusCode>(ValueOrDie(misuse.Get<int64_t>("wrong_type"))) ==
        absl::StatusCode::kInvalidArgument);
  CHECK(static_cast<absl::StatusCode>(ValueOrDie(misuse.Get<int64_t>("unknown"))) ==
        absl::StatusCode::kNotFound);
  CHECK(builds->load() == 2);
}

// A tiny recsys model (64 users, 32 items) and its 4096 training examples.
struct TinyRecsys {
  RecsysData data;
  std::shared_ptr<const Model> model;
};

TinyRecsys MakeTinyRecsys() {
  RecsysConfig data_config;
  data_config.num_users = 64;
  data_config.num_items = 32;
  data_config.num_train = 4096;
  data_config.num_test = 0;
  RecsysModelOptions model_options;
  model_options.num_users = 64;
  model_options.num_items = 32;
  model_options.embedding_dim = 8;
  model_options.hidden_units = 16;
  model_options.seed = 1;
  return TinyRecsys{ValueOrDie(GenerateRecsysData(data_config)),
                    std::make_shared<const Model>(
                        ValueOrDie(Model::Create(ValueOrDie(RecsysModelSpec(model_options)))))};
}

// The model's variables (embeddings in 3 shards, Adagrad) and "train_step": one TrainStepAsync on
// the worker's next batch of 64.
void AddTrainStep(Fixture& fx, const TinyRecsys& recsys) {
  std::shared_ptr<const ModelVariables> vars;
  {
    ParameterServerStrategy::PartitionerScope scope(*fx.strategy,
                                                    ValueOrDie(FixedShardsPartitioner(3)));
    vars = ValueOrDie(fx.strategy->CreateModelVariables(
        recsys.model, OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}}));
  }
  const Dataset train = recsys.data.train;
  REQUIRE(fx.registry
              ->AddResource<BatchIterator>(
                  "batches",
                  [train](const WorkerInfo& w) -> absl::StatusOr<BatchIterator> {
                    absl::StatusOr<Dataset> part = train.Shard(w.num_workers, w.index);
                    if (!part.ok()) return part.status();
                    BatchOptions options;
                    options.batch_size = 64;
                    options.shuffle = true;
                    options.seed = 17 + static_cast<uint64_t>(w.index);
                    options.num_epochs = kRepeatForever;
                    return BatchIterator::Create(*part, options);
                  })
              .ok());
  REQUIRE(fx.registry
              ->AddReplicaFunction(
                  "train_step",
                  [vars](ReplicaContext& ctx, const ClosureValues&, Done<ClosureValues> done) {
                    absl::StatusOr<BatchIterator*> batches = ctx.Resource<BatchIterator>("batches");
                    if (!batches.ok()) return done(batches.status());
                    absl::StatusOr<std::optional<Batch>> batch = (*batches)->Next();
                    if (!batch.ok()) return done(batch.status());
                    if (!batch->has_value()) return done(absl::OutOfRangeError("no batch"));
                    TrainStepAsync(
                        ctx.shards().self(), vars, **std::move(batch), ctx.update_namer(),
                        [done](absl::StatusOr<StepOutcome> outcome) {
                          if (!outcome.ok()) return done(outcome.status());
                          done(ClosureValues().Set("loss", static_cast<double>(outcome->loss)));
                        });
                  })
              .ok());
}

TEST_CASE("train steps under continuous worker failures: every shard steps once per closure") {
  const TinyRecsys recsys = MakeTinyRecsys();
  auto f = MakeFixture(Options(2, 3, [&](Fixture& fx) { AddTrainStep(fx, recsys); }));
  f->Inject(KillRandomWorkerEvery(std::chrono::milliseconds(5), /*seed=*/3,
                                  /*restart_delay=*/std::chrono::milliseconds(2)));
  constexpr int kSteps = 400;
  const std::vector<RemoteValue> steps = f->ScheduleMany("train_step", kSteps);
  REQUIRE(FetchAllWithin(steps, absl::Seconds(60)).ok());
  REQUIRE(f->coordinator->Join().ok());
  f->Inject(nullptr);
  const ClosureStats stats = f->coordinator->stats();
  CHECK(stats.completed == kSteps);
  CHECK(stats.retried >= 1);
  int64_t duplicates = 0;
  for (const auto& [name, variable] : f->strategy->variables()) {
    if (name == "counter") continue;
    for (const ShardInfo& shard : testing::ShardInfos(*f->cluster, variable)) {
      CAPTURE(shard.name);
      CHECK(shard.step == kSteps);  // one application per step trained, however often re-run
      duplicates += shard.duplicate_updates;
    }
  }
  MESSAGE(stats.retried, " closures re-run, ", duplicates, " repeated gradients dropped");
}

TEST_CASE("TrainStepAsync closures on a tiny recsys model lower its loss") {
  const TinyRecsys recsys = MakeTinyRecsys();
  const RecsysData& data = recsys.data;
  const std::shared_ptr<const Model>& model = recsys.model;
  auto f = MakeFixture(Options(2, 2, [&](Fixture& fx) { AddTrainStep(fx, recsys); }));
  // The embedding tables are sharded, the dense layers are not.
  for (const auto& [name, variable] : f->strategy->variables()) {
    CAPTURE(name);
    const bool embedding = absl::StrContains(name, "embedding");
    if (name != "counter") CHECK(variable.num_shards() == (embedding ? 3 : 1));
  }

  // The mean loss over the whole training set, from the variables' current values.
  const Batch all = ValueOrDie(data.train.Slice(0, data.train.size()));
  auto loss = [&]() -> float {
    std::map<std::string, Tensor> values;
    StepParams params;
    for (const ParamSpec& p : model->spec().params) {
      values[p.name] = ValueOrDie(f->strategy->variables().at(p.name).Read(), p.name.c_str());
      params.full[p.name] = values[p.name].view();
    }
    const ForwardResult result = ValueOrDie(model->Forward(all, params), "Forward");
    REQUIRE(result.loss.has_value());
    return *result.loss;
  };
  const float before = loss();
  const std::vector<RemoteValue> steps = f->ScheduleMany("train_step", 300);
  const std::vector<ClosureValues> losses = ValueOrDie(FetchAllWithin(steps));
  REQUIRE(f->coordinator->Join().ok());
  for (const ClosureValues& v : losses) CHECK(std::isfinite(ValueOrDie(v.Get<double>("loss"))));
  const float after = loss();
  MESSAGE("training-set loss ", before, " -> ", after);
  CHECK(after < before - 0.02f);
}

}  // namespace
}  // namespace tessera
