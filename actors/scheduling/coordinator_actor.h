// The coordinator actor: moves closures from the ClosureQueue (core/scheduling/closure_queue.h,
// which holds every scheduling rule) to idle workers and watches workers and parameter servers. It
// lives in the driver's process; ClusterCoordinator (coordinator/scheduling/cluster_coordinator.h)
// is its blocking front end. Worker failures are injected, in tests and chaos runs, by a
// FaultInjector (actors/scheduling/fault_injector.h) it calls at its hook points; it has none
// unless one is installed.
//
//   message                                        effect
//   (dispatch_atom)                                hand queued closures to idle workers
//   (add_worker_atom, int32 slot)                  start a worker in `slot` (a restart too)
//   (kill_worker_atom, int32 slot) -> bool         kill the worker in `slot` now (false: none)
//   (restart_atom, int32 slot, int64 delay_ms)     start a worker in `slot` after the delay
//   (watch_ps_atom, ps_node_actor, int32 task,     a dead PS node becomes the queue's fatal
//    std::string variables)                        Unavailable error naming it and `variables`
//   (chaos_atom, shared_ptr<FaultInjector>)        install the injector in place of any earlier
//                                                  one (null: none); it is called at once
//   (chaos_atom, int64 epoch)                      a wake-up the injector asked for (ignored
//                                                  when another injector was installed since)
//   (workers_atom) -> WorkerPoolStatus             live worker slots and failure counts
//   (directory_atom, int32 task, JobDescription)   what a joining worker needs (networked);
//    -> VariableDirectory                          InvalidArgument naming the differences when
//                                                  its job is not the directory's
//   (directory_atom, VariableDirectory)            a new directory (shards moved after a PS loss)
//   (join_atom, worker_actor, int32 task,          a networked worker joins in slot `task` with
//    int64 generation) -> int32 slot               the directory generation it fetched (an older
//                                                  one is refused)
//   (abort_atom, std::string why)                  the run failed (a lost PS that could not be
//                                                  restored): see "A failed run" below
//
// A worker that dies — killed, crashed, or (networked) disconnected — is noticed through its down
// message or a failed request; its running closure is put back at the front of the queue.
// When the coordinator exits, every worker it started exits too.
//
// A failed run (abort_atom, or a lost PS with no PsLostHandler): the queue's fatal error is set;
// in networked mode every worker is stopped with an Aborted error naming why as its exit reason;
// later directory and join requests get that error, and the coordinator's own exit reason
// becomes it — so a worker process, whichever of those it sees, exits with that error instead
// of joining again. (In process the workers stay until the coordinator exits: a closure already
// running may still finish.) The tasks known to have learned of the failure are listed in
// WorkerPoolStatus::told_of_failure, so that the process can wait for them before it exits
// (ClusterCoordinator's destructor).
//
// Thread-safety: a CAF actor; the ClosureQueue it shares with the driver is thread-safe.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_behavior.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "actors/base/actor_handles.h"
#include "actors/base/messages.h"
#include "actors/ps/ps_node_actor.h"
#include "actors/ps/variable_ops.h"
#include "actors/scheduling/fault_injector.h"
#include "actors/scheduling/worker_actor.h"
#include "core/scheduling/closure_queue.h"

namespace tessera {

// The interface, coordinator_actor, is declared with the other actor handles
// (actors/base/actor_handles.h).

// Starts an in-process worker for a slot (the simulation); empty in networked mode, where worker
// processes join instead.
using WorkerFactory = std::function<worker_actor(const WorkerInfo&)>;
// Called (on the coordinator actor's thread; it must not block) when PS task `task` is lost and
// should be restored rather than reported: the handler restores it elsewhere and then sends the
// new VariableDirectory. Empty: a lost PS is a fatal PS-unavailable error.
using PsLostHandler = std::function<void(int32_t task)>;

struct CoordinatorState {
  static inline const char* name = "tessera.coordinator";

  struct Worker {
    worker_actor handle;
    int32_t slot = 0;
    int32_t running = 0;  // closures sent and not answered
    bool busy() const { return running > 0; }
    bool killed = false;  // an exit was sent; its down message has not arrived yet
    int64_t generation = 0;  // of the VariableDirectory it runs with
    bool moved = false;      // stopped on purpose (its shards moved, the run failed)
    bool told = false;       // stopped with the run's failure
  };
  struct Ps {
    int32_t task = 0;
    std::string variables;
  };

  std::shared_ptr<ClosureQueue> queue;
  WorkerFactory factory;
  PsLostHandler on_ps_lost;
  VariableDirectory directory;  // what joining workers fetch (networked mode)
  bool recovering = false;      // a lost PS is being restored: nothing is dispatched
  caf::error failure;           // the run failed (an Aborted Tessera error): see above
  int32_t num_slots = 0;
  int32_t closures_per_worker = 1;  // the most closures in flight per worker
  WorkerId next_worker_id = 1;
  // Shared with the exit functor that stops the workers when the coordinator exits.
  std::shared_ptr<std::map<WorkerId, Worker>> workers =
      std::make_shared<std::map<WorkerId, Worker>>();
  std::map<caf::actor_addr, Ps> ps_nodes;
  std::map<int32_t, std::string> refusals;  // why each refused worker task was refused
  std::set<int32_t> told_of_failure;        // see WorkerPoolStatus::told_of_failure
  std::map<int32_t, WorkerSlotStatus> slots;  // counters per slot (live and running: at query)
  std::set<int32_t> started_slots;  // a second start in a slot is a restart...
  std::set<int32_t> moved_slots;    // ...unless its worker was stopped because shards moved
  int64_t worker_failures = 0;
  int64_t worker_restarts = 0;
  // Null in production. `injector_epoch` counts installations, so that a wake-up asked for by a
  // replaced injector does not reach its successor.
  std::shared_ptr<FaultInjector> fault_injector;
  int64_t injector_epoch = 0;
};

// The behaviour of a coordinator over `queue` with `num_slots` worker slots, starting workers
// with `factory` (it starts none by itself: send add_worker for each slot) and keeping up to
// `closures_per_worker` (>= 1) closures in flight on each.
coordinator_actor::behavior_type CoordinatorActor(
    coordinator_actor::stateful_pointer<CoordinatorState> self,
    std::shared_ptr<ClosureQueue> queue, int32_t num_slots, int32_t closures_per_worker,
    WorkerFactory factory, PsLostHandler on_ps_lost);

coordinator_actor SpawnCoordinator(caf::actor_system& system, std::shared_ptr<ClosureQueue> queue,
                                   int32_t num_slots, int32_t closures_per_worker,
                                   WorkerFactory factory, PsLostHandler on_ps_lost = {});

}  // namespace tessera
