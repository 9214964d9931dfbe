#include "actors/scheduling/coordinator_actor.h"

#include <algorithm>
#include <caf/exit_reason.hpp>
#include <caf/make_message.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "core/base/logging.h"
#include "core/training/job_description.h"

namespace tessera {
namespace {

using Self = coordinator_actor::stateful_pointer<CoordinatorState>;

void DispatchIdle(Self self);
void SendClosure(Self self, WorkerId worker_id, CoordinatorState::Worker& worker, Dispatch next);
template <class Hook>
void CallInjector(Self self, Hook hook);

// A worker is gone: forget it and put its running closure back on the queue. Idempotent (the
// down message and the failed request of the same death both land here).
void WorkerGone(Self self, WorkerId id) {
  auto& workers = *self->state.workers;
  auto it = workers.find(id);
  if (it == workers.end()) return;
  self->demonitor(it->second.handle.address());
  if (it->second.told) self->state.told_of_failure.insert(it->second.slot);
  if (it->second.moved) {
    self->state.moved_slots.insert(it->second.slot);
  } else {
    ++self->state.worker_failures;
    ++self->state.slots[it->second.slot].failures;
    Log().warn("worker {} lost; {} closure(s) go back on the queue", it->second.slot,
               it->second.running);
  }
  const int32_t slot = it->second.slot;
  workers.erase(it);
  self->state.queue->WorkerLost(id);
  CallInjector(self, [slot](FaultInjector& injector, WorkerPoolControl& pool) {
    injector.OnWorkerLost(pool, slot);
  });
  DispatchIdle(self);
}

void AddWorker(Self self, worker_actor worker, int32_t slot) {
  const bool rejoin = self->state.moved_slots.erase(slot) > 0;
  if (!self->state.started_slots.insert(slot).second && !rejoin) ++self->state.worker_restarts;
  if (!rejoin && self->state.slots[slot].failures > 0) {  // its loss was logged too
    Log().info("worker {} is back (lost {} time(s) so far)", slot,
               self->state.slots[slot].failures);
  }
  ++self->state.slots[slot].starts;
  const WorkerId id = self->state.next_worker_id++;
  self->monitor(worker);
  self->state.workers->emplace(
      id, CoordinatorState::Worker{worker, slot, 0, false, self->state.directory.generation});
  CallInjector(self, [slot](FaultInjector& injector, WorkerPoolControl& pool) {
    injector.OnWorkerStarted(pool, slot);
  });
  DispatchIdle(self);
}

void StartWorker(Self self, int32_t slot) {
  if (!self->state.factory) return;
  WorkerInfo info{slot, self->state.num_slots};
  worker_actor worker = self->state.factory(info);
  if (worker) AddWorker(self, std::move(worker), slot);
}

// Stops every live worker older than `generation`: their variable handles name shards that
// moved. In networked mode each worker process then joins again with the new directory.
void StopWorkersBefore(Self self, int64_t generation) {
  for (auto& [id, worker] : *self->state.workers) {
    if (worker.killed || worker.generation >= generation) continue;
    worker.killed = true;
    worker.moved = true;
    self->send_exit(worker.handle, caf::exit_reason::kill);
  }
}

// The run failed: nothing more is dispatched and no worker joins again; worker processes are
// stopped with `why` (an Aborted error) so that they exit rather than wait. (In process, the
// workers stay until the coordinator exits, so a closure already running may still finish, as
// in TF.) Idempotent: the first failure is the one reported.
void FailRun(Self self, absl::Status why) {
  if (self->state.failure) return;
  const absl::Status aborted = absl::AbortedError(absl::StrCat("the run failed: ", why.message()));
  self->state.queue->SetFatal(std::move(why));
  self->state.failure = StatusToError(aborted);
  self->state.recovering = false;
  CallInjector(
      self, [](FaultInjector& injector, WorkerPoolControl& pool) { injector.OnRunFailed(pool); });
  if (self->state.factory) return;
  for (auto& [id, worker] : *self->state.workers) {
    if (worker.killed) continue;
    worker.killed = true;
    worker.moved = true;
    worker.told = true;
    self->send_exit(worker.handle, self->state.failure);
  }
}

// The answer to a request of worker task `task` once the run failed: the failure.
caf::error TellFailure(Self self, int32_t task) {
  if (task >= 0 && task < self->state.num_slots) self->state.told_of_failure.insert(task);
  return self->state.failure;
}

bool KillSlot(Self self, int32_t slot) {
  for (auto& [id, worker] : *self->state.workers) {
    if (worker.slot == slot && !worker.killed) {
      worker.killed = true;
      self->send_exit(worker.handle, caf::exit_reason::kill);
      return true;
    }
  }
  return false;
}

// What a FaultInjector sees of the pool and may do to it, for the length of one hook.
class PoolControl final : public WorkerPoolControl {
 public:
  explicit PoolControl(Self self) : self_(self) {}

  std::vector<int32_t> BusySlots() const override { return Slots(/*busy_only=*/true); }
  std::vector<int32_t> LiveSlots() const override { return Slots(/*busy_only=*/false); }
  bool Kill(int32_t slot) override { return KillSlot(self_, slot); }
  void RestartAfter(int32_t slot, std::chrono::milliseconds delay) override {
    self_->delayed_send(self_, delay, add_worker_atom::value, slot);
  }
  void WakeAfter(std::chrono::milliseconds delay) override {
    self_->delayed_send(self_, delay, chaos_atom::value, self_->state.injector_epoch);
  }

 private:
  std::vector<int32_t> Slots(bool busy_only) const {
    std::vector<int32_t> out;
    for (const auto& [id, worker] : *self_->state.workers) {
      if (!worker.killed && (!busy_only || worker.busy())) out.push_back(worker.slot);
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  Self self_;
};

// Calls `hook` on the installed injector, if there is one (never in production).
template <class Hook>
void CallInjector(Self self, Hook hook) {
  if (!self->state.fault_injector) return;
  std::shared_ptr<FaultInjector> injector = self->state.fault_injector;  // may be replaced
  PoolControl control(self);
  hook(*injector, control);
}

void DispatchIdle(Self self) {
  if (self->state.recovering) return;
  // Round after round, one closure per worker that has room, so closures spread evenly.
  for (bool sent = true; sent;) {
    sent = false;
    for (auto& [id, worker] : *self->state.workers) {
      if (worker.killed || worker.running >= self->state.closures_per_worker) continue;
      std::optional<Dispatch> next = self->state.queue->NextFor(id);
      if (!next.has_value()) return;
      ++worker.running;
      WorkerSlotStatus& slot = self->state.slots[worker.slot];
      slot.last_closure = static_cast<int64_t>(next->closure.id);
      slot.last_function = next->closure.function;
      slot.last_step = next->closure.step;
      sent = true;
      SendClosure(self, id, worker, *std::move(next));
    }
  }
}

void SendClosure(Self self, WorkerId worker_id, CoordinatorState::Worker& worker, Dispatch next) {
  const ClosureId closure = next.closure.id;
  const int64_t attempt = next.attempt;
  self->request(worker.handle, caf::infinite, run_atom::value, std::move(next.closure))
      .then(
          [self, worker_id, closure, attempt](ClosureValues& result) {
            self->state.queue->Complete(closure, attempt, std::move(result));
            auto it = self->state.workers->find(worker_id);
            if (it != self->state.workers->end()) {
              --it->second.running;
              ++self->state.slots[it->second.slot].completed;
            }
            CallInjector(self, [](FaultInjector& injector, WorkerPoolControl& pool) {
              injector.OnClosureCompleted(pool);
            });
            DispatchIdle(self);
          },
          [self, worker_id, closure, attempt](caf::error& err) {
            // A Tessera error is the replica function's own; anything else (the worker exited,
            // its node went down) means the worker is gone.
            if (err.category() != kErrorCategory) return WorkerGone(self, worker_id);
            absl::Status status = ErrorToStatus(err);
            // Unavailable: the worker could not reach a shard (a PS died or moved). That says
            // nothing about the closure, so it runs again (TF treats it as a worker failure);
            // a dead PS itself is reported, or restored, by the down handler.
            if (absl::IsUnavailable(status)) {
              self->state.queue->Requeue(closure, attempt);
            } else {
              self->state.queue->Complete(closure, attempt, std::move(status));
            }
            auto it = self->state.workers->find(worker_id);
            if (it != self->state.workers->end()) {
              --it->second.running;
              ++self->state.slots[it->second.slot].errors;
            }
            DispatchIdle(self);
          });
}

// When the coordinator exits, so does every worker it started: as finished (user_shutdown), or
// with the failure of a failed run (the coordinator's exit reason then).
void StopWorkersOnExit(Self self) {
  self->attach_functor([workers = self->state.workers, me = self->address()](
                           const caf::error& reason, caf::execution_unit* host) {
    const caf::error why =
        reason.category() == kErrorCategory ? reason : caf::exit_reason::user_shutdown;
    for (const auto& entry : *workers) {
      entry.second.handle->enqueue(nullptr, caf::make_message_id(),
                                   caf::make_message(caf::exit_msg{me, why}), host);
    }
    workers->clear();
  });
  // A failed run's coordinator exits with the failure, whatever stopped it, so that a worker
  // process monitoring it learns the run failed rather than finished.
  self->set_exit_handler([self](caf::exit_msg& msg) {
    self->quit(self->state.failure ? self->state.failure : msg.reason);
  });
}

}  // namespace

coordinator_actor::behavior_type CoordinatorActor(Self self, std::shared_ptr<ClosureQueue> queue,
                                                  int32_t num_slots, int32_t closures_per_worker,
                                                  WorkerFactory factory, PsLostHandler on_ps_lost) {
  self->state.queue = std::move(queue);
  self->state.num_slots = num_slots;
  self->state.closures_per_worker = std::max(closures_per_worker, 1);
  self->state.factory = std::move(factory);
  self->state.on_ps_lost = std::move(on_ps_lost);
  self->state.directory.num_workers = num_slots;
  StopWorkersOnExit(self);
  self->set_down_handler([self](caf::down_msg& msg) {
    for (const auto& [id, worker] : *self->state.workers) {
      if (worker.handle.address() == msg.source) return WorkerGone(self, id);
    }
    auto ps = self->state.ps_nodes.find(msg.source);
    if (ps == self->state.ps_nodes.end()) return;
    if (self->state.on_ps_lost) {
      // Restore rather than fail: dispatch pauses, every worker (holding handles to the lost
      // shards) is stopped and its closure re-queued, and the handler sends the new directory.
      const int32_t task = ps->second.task;
      self->state.ps_nodes.erase(ps);
      self->state.recovering = true;
      StopWorkersBefore(self, self->state.directory.generation + 1);
      self->state.on_ps_lost(task);
      return;
    }
    FailRun(self, absl::UnavailableError(absl::StrCat(
                      "parameter server ps ", ps->second.task, " is unavailable (",
                      to_string(msg.reason), "); its variables are lost until restored: ",
                      ps->second.variables)));
  });
  return {
      [self](dispatch_atom) { DispatchIdle(self); },
      [self](add_worker_atom, int32_t slot) { StartWorker(self, slot); },
      [self](kill_worker_atom, int32_t slot) { return KillSlot(self, slot); },
      [self](restart_atom, int32_t slot, int64_t delay_ms) {
        self->delayed_send(self, std::chrono::milliseconds(delay_ms), add_worker_atom::value,
                           slot);
      },
      [self](watch_ps_atom, const ps_node_actor& node, int32_t task, const std::string& vars) {
        self->monitor(node);
        self->state.ps_nodes[node.address()] = CoordinatorState::Ps{task, vars};
      },
      [self](chaos_atom, std::shared_ptr<FaultInjector>& injector) {
        self->state.fault_injector = std::move(injector);
        ++self->state.injector_epoch;
        CallInjector(self, [](FaultInjector& installed, WorkerPoolControl& pool) {
          installed.OnInstalled(pool);
        });
      },
      [self](chaos_atom, int64_t epoch) {
        if (epoch != self->state.injector_epoch) return;
        CallInjector(self, [](FaultInjector& injector, WorkerPoolControl& pool) {
          injector.OnWake(pool);
        });
      },
      [self](workers_atom) {
        WorkerPoolStatus status;
        for (const auto& [id, worker] : *self->state.workers) {
          status.live_slots.push_back(worker.slot);
        }
        std::sort(status.live_slots.begin(), status.live_slots.end());
        status.worker_failures = self->state.worker_failures;
        status.worker_restarts = self->state.worker_restarts;
        status.refusals = self->state.refusals;
        status.run_failed = static_cast<bool>(self->state.failure);
        status.told_of_failure.assign(self->state.told_of_failure.begin(),
                                      self->state.told_of_failure.end());
        std::map<int32_t, WorkerSlotStatus> slots = self->state.slots;
        for (const auto& [id, worker] : *self->state.workers) {
          WorkerSlotStatus& slot = slots[worker.slot];
          slot.live = slot.live || !worker.killed;
          slot.running += worker.running;
        }
        for (auto& [index, slot] : slots) {
          slot.slot = index;
          status.slots.push_back(slot);
        }
        return status;
      },
      [self](directory_atom, int32_t task,
             const JobDescription& job) -> caf::result<VariableDirectory> {
        if (self->state.failure) return TellFailure(self, task);
        if (const std::string differences = JobDifferences(self->state.directory.job, job);
            !differences.empty()) {
          std::string refusal = absl::StrCat("worker task ", task,
                                             " was started for another job than the "
                                             "coordinator's: ",
                                             differences);
          Log().warn("refused {}", refusal);
          self->state.refusals[task] = refusal;
          return StatusToError(absl::InvalidArgumentError(std::move(refusal)));
        }
        if (self->state.recovering) {  // its shard handles and PS addresses are about to change
          return StatusToError(absl::UnavailableError(
              "the coordinator is restoring a lost parameter server; ask again shortly"));
        }
        return self->state.directory;
      },
      [self](directory_atom, VariableDirectory& directory) {
        directory.num_workers = self->state.num_slots;
        const bool moved = directory.generation > self->state.directory.generation;
        self->state.directory = std::move(directory);
        if (moved) StopWorkersBefore(self, self->state.directory.generation);
        self->state.recovering = false;
        DispatchIdle(self);
      },
      [self](join_atom, worker_actor& worker, int32_t slot,
             int64_t generation) -> caf::result<int32_t> {
        if (!worker) return StatusToError(absl::InvalidArgumentError("join: no worker actor"));
        if (self->state.failure) return TellFailure(self, slot);
        if (slot < 0 || slot >= self->state.num_slots) {
          return StatusToError(absl::InvalidArgumentError(
              absl::StrCat("worker task ", slot, " is not in the cluster spec (it lists ",
                           self->state.num_slots, " workers)")));
        }
        if (self->state.recovering) {
          return StatusToError(absl::UnavailableError(
              "the coordinator is restoring a lost parameter server; join again shortly"));
        }
        if (generation != self->state.directory.generation) {
          return StatusToError(absl::FailedPreconditionError(absl::StrCat(
              "the variable directory changed (generation ", generation, " -> ",
              self->state.directory.generation, "); fetch it again")));
        }
        // One process per worker task: a second one is refused (it retries, in case the
        // first is dead and its down message is still on the way).
        for (const auto& [id, old] : *self->state.workers) {
          if (old.slot == slot && !old.killed) {
            return StatusToError(absl::AlreadyExistsError(
                absl::StrCat("worker task ", slot, " is already connected")));
          }
        }
        self->state.refusals.erase(slot);  // a process of the right job took the task after all
        AddWorker(self, std::move(worker), slot);
        return self->state.num_slots;
      },
      [self](abort_atom, const std::string& why) {
        FailRun(self, absl::UnavailableError(why));
      },
  };
}

coordinator_actor SpawnCoordinator(caf::actor_system& system, std::shared_ptr<ClosureQueue> queue,
                                   int32_t num_slots, int32_t closures_per_worker,
                                   WorkerFactory factory, PsLostHandler on_ps_lost) {
  return system.spawn(CoordinatorActor, std::move(queue), num_slots, closures_per_worker,
                      std::move(factory), std::move(on_ps_lost));
}

}  // namespace tessera
