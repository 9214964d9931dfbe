// FaultInjector: the testing interface through which worker failures are injected into the
// coordinator actor (actors/scheduling/coordinator_actor.h). The coordinator calls its injector, if
// it has one, at a few hook points — an injector was installed, a closure completed, a worker
// started or was lost, the run failed, a wake-up the injector asked for arrived — each after its
// own state has changed, and hands it a WorkerPoolControl through which it may kill workers and
// start them again. (A test's injector may also just count the hooks, to wait for a change of the
// coordinator's state rather than poll for it.) A production coordinator has no injector: none of
// this runs, and no fault-injection state lives in its dispatch state.
//
// Two injectors come with it (the drivers' --inject_worker_failures and the chaos tests use
// them); tests write their own to kill exactly the worker they mean.
//
// Example:
//   caf::anon_send(coordinator, chaos_atom::value,
//                  KillBusyWorkersAtCompletions(2, 100, /*seed=*/7, std::chrono::seconds(1)));
//
// Thread-safety: an injector is called on the coordinator actor's thread only, one hook at a
// time; WorkerPoolControl is valid only during the hook it is passed to.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

namespace tessera {

// What a FaultInjector may do to the coordinator's workers. Slots are worker slots (a
// replacement keeps the slot of the worker it replaces).
class WorkerPoolControl {
 public:
  virtual ~WorkerPoolControl() = default;
  // The slots of live workers that are running a closure now, in slot order.
  virtual std::vector<int32_t> BusySlots() const = 0;
  // The slots of every live worker (busy or idle), in slot order.
  virtual std::vector<int32_t> LiveSlots() const = 0;
  // Kills the worker in `slot` now: its running closures go back on the queue once its death is
  // noticed. False when no live worker is in `slot`.
  virtual bool Kill(int32_t slot) = 0;
  // Starts a worker in `slot` after `delay` (in process; a networked worker process rejoins by
  // itself).
  virtual void RestartAfter(int32_t slot, std::chrono::milliseconds delay) = 0;
  // Calls the injector's OnWake after `delay`, unless another injector was installed meanwhile.
  virtual void WakeAfter(std::chrono::milliseconds delay) = 0;
};

class FaultInjector {
 public:
  virtual ~FaultInjector() = default;
  // The coordinator took this injector (it replaces any earlier one).
  virtual void OnInstalled(WorkerPoolControl& pool) {}
  // A closure completed with a result, before the coordinator hands out more work: the other
  // busy workers are in the middle of theirs.
  virtual void OnClosureCompleted(WorkerPoolControl& pool) {}
  // A worker started (or joined) in `slot`, before it is handed work.
  virtual void OnWorkerStarted(WorkerPoolControl& pool, int32_t slot) {}
  // The worker in `slot` is gone (killed, exited, its node down): its running closures are back
  // on the queue, their values aborted.
  virtual void OnWorkerLost(WorkerPoolControl& pool, int32_t slot) {}
  // The run failed (a parameter server lost with no restore): Done and Join raise the failure.
  virtual void OnRunFailed(WorkerPoolControl& pool) {}
  // A wake-up asked for with WakeAfter arrived.
  virtual void OnWake(WorkerPoolControl& pool) {}
};

// Kills `failures` workers at random points of the next `closures` completions (drawn from
// `seed`; points may coincide, and then as many distinct workers die at that point), each a busy
// worker when there is one (so its closure is re-run), else any live one; each slot gets a new
// worker after `restart_delay`. A kill that finds no worker alive (more coincide than workers
// live) falls on the next worker to start: exactly `failures` workers die.
std::shared_ptr<FaultInjector> KillBusyWorkersAtCompletions(int32_t failures, int64_t closures,
                                                            uint64_t seed,
                                                            std::chrono::milliseconds restart_delay);

// Kills a random worker (a busy one when there is one) every `period`, starting now; each slot
// gets a new worker after `restart_delay`.
std::shared_ptr<FaultInjector> KillRandomWorkerEvery(std::chrono::milliseconds period,
                                                     uint64_t seed,
                                                     std::chrono::milliseconds restart_delay);

}  // namespace tessera

// An injector travels to the coordinator as a pointer in a local message (its permission to, as
// an unsafe message type, is in actors/base/actor_handles.h).
