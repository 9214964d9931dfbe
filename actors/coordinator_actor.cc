#include "actors/coordinator_actor.h"

#include <algorithm>
#include <caf/exit_reason.hpp>
#include <caf/make_message.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/error.h"
#include "core/logging.h"

namespace tessera {
namespace {

using Self = coordinator_actor::stateful_pointer<CoordinatorState>;

void DispatchIdle(Self self);
void SendClosure(Self self, WorkerId worker_id, CoordinatorState::Worker& worker, Dispatch next);

// A worker is gone: forget it and put its running closure back on the queue. Idempotent (the
// down message and the failed request of the same death both land here).
void WorkerGone(Self self, WorkerId id) {
  auto& workers = *self->state.workers;
  auto it = workers.find(id);
  if (it == workers.end()) return;
  self->demonitor(it->second.handle.address());
  if (it->second.moved) {
    self->state.moved_slots.insert(it->second.slot);
  } else {
    ++self->state.worker_failures;
    if (!self->state.factory) {  // a worker process: say so (in process, the driver reports)
      Log().warn("worker {} lost; {} closure(s) go back on the queue", it->second.slot,
                 it->second.running);
    }
  }
  workers.erase(it);
  self->state.queue->WorkerLost(id);
  DispatchIdle(self);
}

void AddWorker(Self self, worker_actor worker, int32_t slot) {
  const bool rejoin = self->state.moved_slots.erase(slot) > 0;
  if (!self->state.started_slots.insert(slot).second && !rejoin) ++self->state.worker_restarts;
  const WorkerId id = self->state.next_worker_id++;
  self->monitor(worker);
  self->state.workers->emplace(
      id, CoordinatorState::Worker{worker, slot, 0, false, self->state.directory.generation});
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

// Kills a busy worker (one in the middle of a closure) if there is one, else any live worker,
// and starts its replacement after the restart delay.
void InjectFailure(Self self) {
  std::vector<const CoordinatorState::Worker*> busy, live;
  for (const auto& [id, worker] : *self->state.workers) {
    if (worker.killed) continue;
    live.push_back(&worker);
    if (worker.busy()) busy.push_back(&worker);
  }
  auto& pool = busy.empty() ? live : busy;
  if (pool.empty()) return;
  const int32_t slot = pool[self->state.rng() % pool.size()]->slot;
  KillSlot(self, slot);
  self->delayed_send(self, std::chrono::milliseconds(self->state.restart_delay_ms),
                     add_worker_atom::value, slot);
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
            if (it != self->state.workers->end()) --it->second.running;
            ++self->state.completions;
            auto& kill_at = self->state.kill_at;
            while (!kill_at.empty() && kill_at.back() <= self->state.completions) {
              kill_at.pop_back();
              InjectFailure(self);
            }
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
            if (it != self->state.workers->end()) --it->second.running;
            DispatchIdle(self);
          });
}

// When the coordinator exits, so does every worker it started.
void StopWorkersOnExit(Self self) {
  self->attach_functor([workers = self->state.workers, me = self->address()](
                           const caf::error& reason, caf::execution_unit* host) {
    for (const auto& entry : *workers) {
      entry.second.handle->enqueue(
          nullptr, caf::make_message_id(),
          caf::make_message(caf::exit_msg{me, caf::exit_reason::user_shutdown}), host);
    }
    workers->clear();
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
    self->state.queue->SetFatal(absl::UnavailableError(absl::StrCat(
        "parameter server ps ", ps->second.task, " is unavailable (", to_string(msg.reason),
        "); its variables are lost until restored: ", ps->second.variables)));
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
      [self](chaos_atom, int32_t failures, int64_t closures, uint64_t seed, int64_t delay_ms) {
        self->state.rng.seed(seed);
        self->state.restart_delay_ms = delay_ms;
        std::uniform_int_distribution<int64_t> at(closures / 10 + 1,
                                                  std::max<int64_t>(closures * 9 / 10, 1));
        for (int32_t k = 0; k < failures; ++k) {
          self->state.kill_at.push_back(self->state.completions + at(self->state.rng));
        }
        std::sort(self->state.kill_at.rbegin(), self->state.kill_at.rend());
      },
      [self](chaos_atom, int64_t period_ms, uint64_t seed, int64_t delay_ms) {
        self->state.rng.seed(seed);
        self->state.restart_delay_ms = delay_ms;
        InjectFailure(self);
        if (!self->state.workers->empty() || self->state.num_slots > 0) {
          self->delayed_send(self, std::chrono::milliseconds(period_ms), chaos_atom::value,
                             period_ms, self->state.rng(), delay_ms);
        }
      },
      [self](workers_atom) {
        WorkerPoolStatus status;
        for (const auto& [id, worker] : *self->state.workers) {
          status.live_slots.push_back(worker.slot);
        }
        std::sort(status.live_slots.begin(), status.live_slots.end());
        status.worker_failures = self->state.worker_failures;
        status.worker_restarts = self->state.worker_restarts;
        return status;
      },
      [self](directory_atom) -> caf::result<VariableDirectory> {
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
        AddWorker(self, std::move(worker), slot);
        return self->state.num_slots;
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
