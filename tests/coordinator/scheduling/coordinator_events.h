// CoordinatorEvents: a FaultInjector (actors/scheduling/fault_injector.h) that counts the hooks
// the coordinator calls — installed, a closure completed, a worker started or lost, the run
// failed — passing each on to an inner injector if it has one. A test waits on it for the
// coordinator's state to change (AwaitState) instead of polling that state: the coordinator calls
// a hook after its state has changed, so a condition that does not hold yet is checked again
// after the next hook, and only then.
//
//   auto events = std::make_shared<testing::CoordinatorEvents>();
//   ClusterCoordinatorTesting::SetFaultInjector(*coordinator, events);
//   CHECK(ClusterCoordinatorTesting::KillWorker(*coordinator, 0));
//   REQUIRE(events->AwaitState([&] { return coordinator->workers().live_slots.size() == 1; }));
//
// Thread-safety: the hooks run on the coordinator's thread; AwaitState is called from the
// test's thread (never from a hook: its condition asks the coordinator).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actors/scheduling/fault_injector.h"
#include "tests/event_count.h"

namespace tessera::testing {

class CoordinatorEvents : public FaultInjector {
 public:
  explicit CoordinatorEvents(std::shared_ptr<FaultInjector> inner = nullptr)
      : inner_(std::move(inner)) {}

  void OnInstalled(WorkerPoolControl& pool) override {
    if (inner_) inner_->OnInstalled(pool);
    events_.Add();
  }
  void OnClosureCompleted(WorkerPoolControl& pool) override {
    if (inner_) inner_->OnClosureCompleted(pool);
    events_.Add();
  }
  void OnWorkerStarted(WorkerPoolControl& pool, int32_t slot) override {
    if (inner_) inner_->OnWorkerStarted(pool, slot);
    events_.Add();
  }
  void OnWorkerLost(WorkerPoolControl& pool, int32_t slot) override {
    if (inner_) inner_->OnWorkerLost(pool, slot);
    events_.Add();
  }
  void OnRunFailed(WorkerPoolControl& pool) override {
    if (inner_) inner_->OnRunFailed(pool);
    events_.Add();
  }
  void OnWake(WorkerPoolControl& pool) override {
    if (inner_) inner_->OnWake(pool);
    events_.Add();
  }

  // Whether `condition` holds, checking it now and again after each hook until `limit` passes.
  bool AwaitState(const std::function<bool()>& condition,
                  absl::Duration limit = absl::Seconds(20)) const {
    const absl::Time deadline = absl::Now() + limit;
    while (true) {
      const int64_t seen = events_.count();  // before the check: a change after it wakes us
      if (condition()) return true;
      if (!events_.AwaitAtLeast(seen + 1, deadline - absl::Now())) return condition();
    }
  }

 private:
  std::shared_ptr<FaultInjector> inner_;
  EventCount events_;
};

}  // namespace tessera::testing
