// The coordinator actor under the deterministic scheduler. Its workers are fakes that hold each
// closure until the test answers it (or real worker actors where the test is about them), so
// every interleaving — a completion, a worker's death, a restart delay on the test clock — is
// chosen by the test, with no sleeps and no polling.
#include "actors/scheduling/coordinator_actor.h"

#include <doctest/doctest.h>

#include <caf/event_based_actor.hpp>
#include <caf/response_promise.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "actors/scheduling/fault_injector.h"
#include "actors/scheduling/replica.h"
#include "actors/scheduling/worker_actor.h"
#include "core/scheduling/closure_queue.h"
#include "tests/actors/actor_test_util.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;
using testing::DeterministicSystem;

// What the fake workers were sent. Each closure waits, with its reply promise, until the test
// answers it.
struct FakeWorkers {
  struct Run {
    int32_t slot = 0;
    int64_t worker = 0;  // which worker: its index in `started`
    int64_t number = 0;  // which run: the key of its promise and answer
    Closure closure;
    caf::actor handle;  // the worker's
  };
  std::vector<Run> runs;         // not answered yet, oldest first
  std::vector<int32_t> started;  // the slot of every worker started, in start order
  int64_t next_number = 0;
  std::map<int64_t, caf::response_promise> promises;
  std::map<int64_t, absl::StatusOr<ClosureValues>> answers;  // on their way to their worker
};

// A worker that keeps each closure until it is sent the run's number, and then replies with the
// answer the test left for it. It replies from its own handler: a promise delivered from outside
// the actor would use the execution context of a job the testing scheduler has already finished.
caf::behavior FakeWorker(caf::event_based_actor* self, int32_t slot, int64_t worker,
                         FakeWorkers* book) {
  return {
      [self, slot, worker, book](run_atom, Closure& closure) {
        const int64_t number = book->next_number++;
        book->runs.push_back(FakeWorkers::Run{slot, worker, number, std::move(closure),
                                              caf::actor_cast<caf::actor>(self)});
        return book->promises[number] = self->make_response_promise();
      },
      [book](int64_t number) {
        auto promise = book->promises.find(number);
        auto answer = book->answers.find(number);
        REQUIRE(promise != book->promises.end());
        REQUIRE(answer != book->answers.end());
        if (answer->second.ok()) {
          promise->second.deliver(*answer->second);
        } else {
          promise->second.deliver(StatusToError(answer->second.status()));
        }
        book->promises.erase(promise);
        book->answers.erase(answer);
      },
  };
}

ClosureValues Scalar(double x) {
  ClosureValues values;
  values.Set("x", x);
  return values;
}

// A coordinator over its own queue, starting fake workers (or the workers of `factory`).
class CoordinatorFixture {
 public:
  explicit CoordinatorFixture(int32_t slots, int32_t closures_per_worker = 1,
                              WorkerFactory factory = {})
      : queue_(std::make_shared<ClosureQueue>(/*capacity=*/100)) {
    if (!factory) {
      factory = [this](const WorkerInfo& info) {
        const auto worker = static_cast<int64_t>(workers.started.size());
        workers.started.push_back(info.index);
        return sys.Track(caf::actor_cast<worker_actor>(
            sys.system().spawn(FakeWorker, info.index, worker, &workers)));
      };
    }
    coordinator = sys.Track(
        SpawnCoordinator(sys.system(), queue_, slots, closures_per_worker, std::move(factory)));
    sys.Run();
  }

  void StartWorker(int32_t slot) {
    caf::anon_send(coordinator, add_worker_atom::value, slot);
    sys.Run();
  }

  // Queues `function` with argument `x` and lets the coordinator dispatch it.
  RemoteValue Schedule(double x, const std::string& function = "step") {
    absl::StatusOr<RemoteValue> value = queue_->Enqueue(function, Scalar(x));
    REQUIRE(value.ok());
    caf::anon_send(coordinator, dispatch_atom::value);
    sys.Run();
    return *value;
  }

  // Answers the fake workers' run `i` (see FakeWorkers::runs) with `result`. A dead worker
  // answers nothing.
  void Answer(size_t i, absl::StatusOr<ClosureValues> result) {
    REQUIRE(i < workers.runs.size());
    FakeWorkers::Run run = std::move(workers.runs[i]);
    workers.runs.erase(workers.runs.begin() + static_cast<std::ptrdiff_t>(i));
    workers.answers.insert_or_assign(run.number, std::move(result));
    caf::anon_send(run.handle, run.number);
    sys.Run();
  }
  // Answers run `i` with its own argument.
  void Echo(size_t i) { Answer(i, workers.runs.at(i).closure.args); }

  bool Kill(int32_t slot) {
    absl::StatusOr<bool> killed = sys.Ask<bool>(coordinator, kill_worker_atom::value, slot);
    REQUIRE(killed.ok());
    return *killed;
  }

  void Install(std::shared_ptr<FaultInjector> injector) {
    caf::anon_send(coordinator, chaos_atom::value, std::move(injector));
    sys.Run();
  }

  WorkerPoolStatus Pool() {
    absl::StatusOr<WorkerPoolStatus> pool =
        sys.Ask<WorkerPoolStatus>(coordinator, workers_atom::value);
    REQUIRE(pool.ok());
    return *pool;
  }

  ClosureQueue& queue() { return *queue_; }
  bool Idle() {
    const ClosureStats stats = queue_->stats();
    return stats.queued == 0 && stats.running == 0;
  }

  DeterministicSystem sys;  // first: it outlives every handle below
  FakeWorkers workers;
  coordinator_actor coordinator;

 private:
  std::shared_ptr<ClosureQueue> queue_;
};

// The value of a closure that must have finished by now (never waits: a bug fails, not hangs).
double ValueOf(const RemoteValue& value) {
  REQUIRE_MESSAGE(value.state() == RemoteValueState::kReady,
                  RemoteValueStateName(value.state()));
  absl::StatusOr<double> x = value.Fetch<double>("x");
  REQUIRE_MESSAGE(x.ok(), x.status().ToString());
  return *x;
}

TEST_CASE("queued closures go to idle workers, one each, and the next waits for a free one") {
  CoordinatorFixture f(/*slots=*/2);
  f.StartWorker(0);
  f.StartWorker(1);
  const RemoteValue a = f.Schedule(1), b = f.Schedule(2), c = f.Schedule(3);
  REQUIRE(f.workers.runs.size() == 2);
  CHECK(f.workers.runs[0].slot == 0);
  CHECK(*f.workers.runs[0].closure.args.Get<double>("x") == 1);
  CHECK(f.workers.runs[1].slot == 1);
  CHECK(*f.workers.runs[1].closure.args.Get<double>("x") == 2);
  CHECK(f.queue().stats().queued == 1);

  f.Answer(1, Scalar(20));  // slot 1 finishes first: it takes the third closure
  CHECK(b.state() == RemoteValueState::kReady);
  CHECK(ValueOf(b) == 20);
  REQUIRE(f.workers.runs.size() == 2);
  CHECK(f.workers.runs[1].slot == 1);
  CHECK(*f.workers.runs[1].closure.args.Get<double>("x") == 3);

  f.Echo(0);
  f.Echo(0);
  CHECK(ValueOf(a) == 1);
  CHECK(ValueOf(c) == 3);
  CHECK(f.Idle());
  CHECK(f.queue().stats().completed == 3);
}

TEST_CASE("with two closures per worker, a worker gets a second before the first is answered") {
  CoordinatorFixture f(/*slots=*/1, /*closures_per_worker=*/2);
  f.StartWorker(0);
  f.Schedule(1);
  f.Schedule(2);
  f.Schedule(3);
  CHECK(f.workers.runs.size() == 2);
  CHECK(f.queue().stats().queued == 1);
}

TEST_CASE("a dead worker's closure is re-run on another worker and resolves exactly once") {
  CoordinatorFixture f(/*slots=*/2);
  f.StartWorker(0);
  f.StartWorker(1);
  const RemoteValue value = f.Schedule(5);
  REQUIRE(f.workers.runs.size() == 1);
  REQUIRE(f.workers.runs[0].slot == 0);

  CHECK(f.Kill(0));
  CHECK(value.state() == RemoteValueState::kAborted);
  REQUIRE(f.workers.runs.size() == 2);  // the dead worker's run (never answered), and the re-run
  CHECK(f.workers.runs[1].slot == 1);
  CHECK(*f.workers.runs[1].closure.args.Get<double>("x") == 5);

  f.Answer(1, Scalar(50));
  CHECK(value.state() == RemoteValueState::kReady);
  CHECK(ValueOf(value) == 50);
  const ClosureStats stats = f.queue().stats();
  CHECK(stats.scheduled == 1);
  CHECK(stats.completed == 1);
  CHECK(stats.retried == 1);
  const WorkerPoolStatus pool = f.Pool();
  CHECK(pool.live_slots == std::vector<int32_t>{1});
  CHECK(pool.worker_failures == 1);
  CHECK(pool.worker_restarts == 0);
  CHECK_FALSE(f.Kill(0));  // nobody lives in slot 0 now
  // Per slot: slot 0 ran the closure first and died with it; slot 1 completed the re-run.
  REQUIRE(pool.slots.size() == 2);
  CHECK(pool.slots[0].slot == 0);
  CHECK_FALSE(pool.slots[0].live);
  CHECK(pool.slots[0].failures == 1);
  CHECK(pool.slots[0].completed == 0);
  CHECK(pool.slots[0].starts == 1);
  CHECK(pool.slots[1].live);
  CHECK(pool.slots[1].completed == 1);
  CHECK(pool.slots[1].running == 0);
  CHECK(pool.slots[1].failures == 0);
  CHECK(pool.slots[0].last_closure == pool.slots[1].last_closure);  // the same closure, re-run
  CHECK(pool.slots[1].last_function == "step");
  CHECK(pool.slots[1].last_step == -1);  // scheduled without a step
}

// Records the exit reason of every actor it is told to watch.
caf::behavior ExitWatcher(caf::event_based_actor* self, std::map<caf::actor_addr, caf::error>* out) {
  self->set_down_handler([out](caf::down_msg& down) { (*out)[down.source] = down.reason; });
  return {[self](const caf::actor& watched) { self->monitor(watched); }};
}

TEST_CASE("a failed run stops worker processes with its failure, and directory and join answer it") {
  // Networked: no factory; the workers join as worker processes do.
  DeterministicSystem sys;
  FakeWorkers book;
  auto queue = std::make_shared<ClosureQueue>(/*capacity=*/100);
  const coordinator_actor coordinator = sys.Track(
      SpawnCoordinator(sys.system(), queue, /*num_slots=*/2, /*closures_per_worker=*/1, {}));
  std::map<caf::actor_addr, caf::error> exits;
  const caf::actor watcher = sys.Track(sys.system().spawn(ExitWatcher, &exits));
  for (int32_t slot = 0; slot < 2; ++slot) {
    const auto worker = sys.Track(caf::actor_cast<worker_actor>(
        sys.system().spawn(FakeWorker, slot, int64_t{slot}, &book)));
    caf::anon_send(watcher, caf::actor_cast<caf::actor>(worker));
    REQUIRE(sys.Ask<int32_t>(coordinator, join_atom::value, worker, slot, int64_t{0}).ok());
  }
  absl::StatusOr<RemoteValue> running = queue->Enqueue("step", Scalar(1));
  REQUIRE(running.ok());
  caf::anon_send(coordinator, dispatch_atom::value);
  sys.Run();
  REQUIRE(book.runs.size() == 1);

  caf::anon_send(coordinator, abort_atom::value, std::string("ps 1 is lost"));
  sys.Run();

  // The driver's next call raises the failure.
  const absl::Status joined = queue->Join();
  CHECK(joined.code() == absl::StatusCode::kUnavailable);
  CHECK_MESSAGE(absl::StrContains(joined.message(), "ps 1 is lost"), joined);
  CHECK(running->state() == RemoteValueState::kCancelled);
  // Every worker was stopped with the run's failure (not user_shutdown, which means finished,
  // nor kill, which means join again), and its stop is not counted as a worker failure.
  REQUIRE(exits.size() == 2);
  for (const auto& [worker, reason] : exits) {
    const absl::Status why = ErrorToStatus(reason);
    CHECK(why.code() == absl::StatusCode::kAborted);
    CHECK_MESSAGE(absl::StrContains(why.message(), "the run failed: ps 1 is lost"), why);
  }
  absl::StatusOr<WorkerPoolStatus> pool = sys.Ask<WorkerPoolStatus>(coordinator, workers_atom::value);
  REQUIRE(pool.ok());
  CHECK(pool->live_slots.empty());
  CHECK(pool->worker_failures == 0);
  // A worker process asking for the directory or joining learns the same, and does not retry.
  CHECK(sys.Ask<VariableDirectory>(coordinator, directory_atom::value, int32_t{0}, JobDescription{})
            .status()
            .code() ==
        absl::StatusCode::kAborted);
  const auto late = sys.Track(caf::actor_cast<worker_actor>(
      sys.system().spawn(FakeWorker, 0, int64_t{99}, &book)));
  absl::StatusOr<int32_t> join =
      sys.Ask<int32_t>(coordinator, join_atom::value, late, int32_t{0}, int64_t{0});
  CHECK(join.status().code() == absl::StatusCode::kAborted);
  CHECK_MESSAGE(absl::StrContains(join.status().message(), "ps 1 is lost"), join.status());

  // The coordinator itself exits with the failure, whatever stops it.
  caf::anon_send(watcher, caf::actor_cast<caf::actor>(coordinator));
  sys.Run();
  caf::anon_send_exit(coordinator, caf::exit_reason::user_shutdown);
  sys.Run();
  REQUIRE(exits.count(coordinator.address()) == 1);
  CHECK(ErrorToStatus(exits[coordinator.address()]).code() == absl::StatusCode::kAborted);
}

TEST_CASE("a failed run lists the worker tasks that learned of it, for its process to wait for") {
  DeterministicSystem sys;
  FakeWorkers book;
  auto queue = std::make_shared<ClosureQueue>(/*capacity=*/100);
  const coordinator_actor coordinator = sys.Track(
      SpawnCoordinator(sys.system(), queue, /*num_slots=*/3, /*closures_per_worker=*/1, {}));
  for (int32_t slot = 0; slot < 2; ++slot) {
    const auto worker = sys.Track(
        caf::actor_cast<worker_actor>(sys.system().spawn(FakeWorker, slot, int64_t{slot}, &book)));
    REQUIRE(sys.Ask<int32_t>(coordinator, join_atom::value, worker, slot, int64_t{0}).ok());
  }
  auto pool = [&] {
    absl::StatusOr<WorkerPoolStatus> status =
        sys.Ask<WorkerPoolStatus>(coordinator, workers_atom::value);
    REQUIRE(status.ok());
    return *status;
  };
  // Slot 1's worker is stopped before the failure (as when a lost PS makes workers join again):
  // its process has not learned anything yet.
  REQUIRE(*sys.Ask<bool>(coordinator, kill_worker_atom::value, int32_t{1}));
  CHECK_FALSE(pool().run_failed);
  CHECK(pool().told_of_failure.empty());

  caf::anon_send(coordinator, abort_atom::value, std::string("ps 0 is lost"));
  sys.Run();
  // Slot 0's worker was stopped with the failure; slot 2 never joined.
  CHECK(pool().run_failed);
  CHECK(pool().told_of_failure == std::vector<int32_t>{0});
  // Between memberships, tasks 1 and 2 ask again and are answered with the failure; a task the
  // spec does not list is answered too, but is no worker task to wait for.
  CHECK(sys.Ask<VariableDirectory>(coordinator, directory_atom::value, int32_t{2}, JobDescription{})
            .status()
            .code() == absl::StatusCode::kAborted);
  CHECK(sys.Ask<VariableDirectory>(coordinator, directory_atom::value, int32_t{7}, JobDescription{})
            .status()
            .code() == absl::StatusCode::kAborted);
  CHECK(pool().told_of_failure == std::vector<int32_t>{0, 2});
  const auto again = sys.Track(
      caf::actor_cast<worker_actor>(sys.system().spawn(FakeWorker, 1, int64_t{5}, &book)));
  CHECK(sys.Ask<int32_t>(coordinator, join_atom::value, again, int32_t{1}, int64_t{0})
            .status()
            .code() == absl::StatusCode::kAborted);
  CHECK(pool().told_of_failure == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE("a killed worker's slot gets a new worker only once the restart delay has passed") {
  CoordinatorFixture f(/*slots=*/1);
  f.StartWorker(0);
  const RemoteValue value = f.Schedule(7);
  CHECK(f.Kill(0));
  CHECK(f.queue().stats().queued == 1);  // back on the queue, with no worker to run it
  caf::anon_send(f.coordinator, restart_atom::value, int32_t{0}, int64_t{30000});
  f.sys.Run();
  CHECK(f.workers.started.size() == 1);

  f.sys.AdvanceTime(milliseconds(29999));
  CHECK(f.workers.started.size() == 1);
  f.sys.AdvanceTime(milliseconds(1));
  REQUIRE(f.workers.started.size() == 2);
  CHECK(f.workers.started[1] == 0);
  // The replacement takes the closure its predecessor died with.
  REQUIRE(f.workers.runs.size() == 2);
  CHECK(f.workers.runs[1].worker == 1);
  f.Echo(1);
  CHECK(ValueOf(value) == 7);
  const WorkerPoolStatus pool = f.Pool();
  CHECK(pool.live_slots == std::vector<int32_t>{0});
  CHECK(pool.worker_failures == 1);
  CHECK(pool.worker_restarts == 1);
  REQUIRE(pool.slots.size() == 1);
  CHECK(pool.slots[0].starts == 2);
  CHECK(pool.slots[0].failures == 1);
  CHECK(pool.slots[0].completed == 1);
}

TEST_CASE("the first application error fails its closure and cancels the queued ones") {
  CoordinatorFixture f(/*slots=*/1);
  f.StartWorker(0);
  const RemoteValue a = f.Schedule(1), b = f.Schedule(2), c = f.Schedule(3);
  f.Answer(0, absl::InvalidArgumentError("bad batch"));
  CHECK(a.state() == RemoteValueState::kFailed);
  CHECK(absl::IsInvalidArgument(a.Fetch().status()));
  CHECK(b.state() == RemoteValueState::kCancelled);
  CHECK(c.state() == RemoteValueState::kCancelled);
  CHECK(absl::IsCancelled(b.Fetch().status()));
  CHECK(f.workers.runs.empty());  // nothing more was dispatched
  // Raised once, then cleared: later work runs normally.
  CHECK(absl::IsInvalidArgument(f.queue().Done().status()));
  CHECK(*f.queue().Done() == true);
  const RemoteValue d = f.Schedule(4);
  f.Echo(0);
  CHECK(ValueOf(d) == 4);
}

TEST_CASE("a closure whose worker could not reach a shard (Unavailable) runs again") {
  CoordinatorFixture f(/*slots=*/1);
  f.StartWorker(0);
  const RemoteValue value = f.Schedule(3);
  f.Answer(0, absl::UnavailableError("ps 0 is gone"));
  CHECK(value.state() == RemoteValueState::kAborted);
  REQUIRE(f.workers.runs.size() == 1);  // the same worker runs it again: it is not to blame
  CHECK(f.workers.runs[0].worker == 0);
  f.Echo(0);
  CHECK(ValueOf(value) == 3);
  CHECK(f.queue().stats().retried == 1);
  CHECK(f.Pool().worker_failures == 0);
}

// Records the hooks it is called at; at the first completion it kills a busy worker and has its
// slot restarted after a second.
class ScriptedInjector : public FaultInjector {
 public:
  void OnInstalled(WorkerPoolControl& pool) override { events.push_back("installed"); }
  void OnWorkerStarted(WorkerPoolControl& pool, int32_t slot) override {
    events.push_back(absl::StrCat("started ", slot));
  }
  void OnClosureCompleted(WorkerPoolControl& pool) override {
    events.push_back("completed");
    if (killed_slot >= 0) return;
    busy_at_first_completion = pool.BusySlots();
    live_at_first_completion = pool.LiveSlots();
    REQUIRE(!busy_at_first_completion.empty());
    killed_slot = busy_at_first_completion.front();
    CHECK(pool.Kill(killed_slot));
    pool.RestartAfter(killed_slot, std::chrono::seconds(1));
  }

  std::vector<std::string> events;
  std::vector<int32_t> busy_at_first_completion, live_at_first_completion;
  int32_t killed_slot = -1;
};

TEST_CASE("an installed fault injector is called at its hooks and kills a worker mid-closure") {
  CoordinatorFixture f(/*slots=*/2);
  auto injector = std::make_shared<ScriptedInjector>();
  f.Install(injector);
  f.StartWorker(0);
  f.StartWorker(1);
  const RemoteValue first = f.Schedule(1), second = f.Schedule(2);
  CHECK(injector->events == std::vector<std::string>{"installed", "started 0", "started 1"});

  f.Echo(0);  // slot 0 completes; slot 1 is in the middle of its closure
  CHECK(ValueOf(first) == 1);
  CHECK(injector->busy_at_first_completion == std::vector<int32_t>{1});
  CHECK(injector->live_at_first_completion == std::vector<int32_t>{0, 1});
  CHECK(injector->killed_slot == 1);
  CHECK(second.state() == RemoteValueState::kAborted);
  REQUIRE(f.workers.runs.size() == 2);  // slot 1's dead run, and its re-run on slot 0
  CHECK(f.workers.runs[1].slot == 0);
  CHECK(f.Pool().live_slots == std::vector<int32_t>{0});

  f.sys.AdvanceTime(std::chrono::seconds(1));
  CHECK(injector->events.back() == "started 1");
  CHECK(f.Pool().live_slots == std::vector<int32_t>{0, 1});
  f.Echo(1);
  CHECK(ValueOf(second) == 2);
  CHECK(f.Pool().worker_failures == 1);
  CHECK(f.Pool().worker_restarts == 1);
}

TEST_CASE("KillBusyWorkersAtCompletions kills K workers and every closure still completes") {
  constexpr int kClosures = 30, kFailures = 3;
  CoordinatorFixture f(/*slots=*/3);
  f.Install(KillBusyWorkersAtCompletions(kFailures, kClosures, /*seed=*/7, milliseconds(100)));
  for (int32_t slot = 0; slot < 3; ++slot) f.StartWorker(slot);
  std::vector<RemoteValue> values;
  for (int i = 0; i < kClosures; ++i) values.push_back(f.Schedule(i));
  // Answer the oldest run each time (a dead worker's answer is ignored); when nothing runs,
  // let the restart delay pass.
  for (int step = 0; step < 1000 && !f.Idle(); ++step) {
    if (f.workers.runs.empty()) {
      f.sys.AdvanceTime(milliseconds(100));
    } else {
      f.Echo(0);
    }
  }
  REQUIRE(f.Idle());
  for (int i = 0; i < kClosures; ++i) CHECK(ValueOf(values[i]) == i);
  const ClosureStats stats = f.queue().stats();
  CHECK(stats.completed == kClosures);
  CHECK(stats.retried >= 1);
  CHECK(stats.retried <= kFailures);
  f.sys.AdvanceTime(milliseconds(100));  // the last restarts
  const WorkerPoolStatus pool = f.Pool();
  CHECK(pool.worker_failures == kFailures);
  CHECK(pool.worker_restarts == kFailures);
  CHECK(pool.live_slots == std::vector<int32_t>{0, 1, 2});
}

TEST_CASE("KillRandomWorkerEvery kills once per period until another injector replaces it") {
  CoordinatorFixture f(/*slots=*/2);
  f.StartWorker(0);
  f.StartWorker(1);
  f.Schedule(1);
  f.Install(KillRandomWorkerEvery(milliseconds(50), /*seed=*/3, /*restart_delay=*/milliseconds(10)));
  CHECK(f.Pool().worker_failures == 1);  // at once, and the busy worker (slot 0)
  CHECK(f.Pool().live_slots == std::vector<int32_t>{1});
  f.sys.AdvanceTime(milliseconds(10));
  CHECK(f.Pool().live_slots == std::vector<int32_t>{0, 1});
  f.sys.AdvanceTime(milliseconds(40));
  CHECK(f.Pool().worker_failures == 2);

  f.Install(nullptr);  // the wake-up already asked for is ignored
  f.sys.AdvanceTime(milliseconds(1000));
  CHECK(f.Pool().worker_failures == 2);
  CHECK(f.Pool().live_slots == std::vector<int32_t>{0, 1});
}

TEST_CASE("a restarted worker rebuilds its per-worker resources") {
  struct Tally {
    int uses = 0;
  };
  auto builds = std::make_shared<int>(0);
  auto registry = std::make_shared<FunctionRegistry>();
  REQUIRE(registry
              ->AddResource<Tally>("tally",
                                   [builds](const WorkerInfo&) -> absl::StatusOr<Tally> {
                                     ++*builds;
                                     return Tally{};
                                   })
              .ok());
  REQUIRE(registry
              ->AddReplicaFunction("count_use",
                                   [](ReplicaContext& ctx, const ClosureValues&,
                                      Done<ClosureValues> done) {
                                     absl::StatusOr<Tally*> tally = ctx.Resource<Tally>("tally");
                                     if (!tally.ok()) return done(tally.status());
                                     done(Scalar(++(*tally)->uses));
                                   })
              .ok());
  DeterministicSystem* sys = nullptr;
  CoordinatorFixture f(/*slots=*/1, /*closures_per_worker=*/1,
                       [&sys, registry](const WorkerInfo& info) {
                         return sys->Track(SpawnWorker(sys->system(), info, registry));
                       });
  sys = &f.sys;
  f.StartWorker(0);
  CHECK(ValueOf(f.Schedule(0, "count_use")) == 1);
  CHECK(ValueOf(f.Schedule(0, "count_use")) == 2);
  CHECK(*builds == 1);

  CHECK(f.Kill(0));
  caf::anon_send(f.coordinator, restart_atom::value, int32_t{0}, int64_t{10});
  f.sys.Run();
  f.sys.AdvanceTime(milliseconds(10));
  CHECK(ValueOf(f.Schedule(0, "count_use")) == 1);  // a new worker, a new Tally
  CHECK(*builds == 2);
}

}  // namespace
}  // namespace tessera
