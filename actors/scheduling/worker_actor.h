// The worker actor: runs closures — a registered replica function applied to ClosureValues — and
// replies with the function's result (docs/design.md §1). It runs as many at once as it is sent
// (the coordinator sends one at a time by default); each has its own ReplicaContext.
//
//   request                  reply           errors
//   (run_atom, Closure)      ClosureValues   NotFound (unregistered function), or the function's
//                                            own error
//
// The worker never blocks its thread: a replica function issues non-blocking variable operations
// from the worker (its ReplicaContext's) and finishes from their reply handlers. Its per-worker
// resources live in its state and die with it.
//
// Thread-safety: a CAF actor; its state is touched only by its own handlers.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_behavior.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <map>
#include <memory>
#include <string>

#include "actors/base/actor_handles.h"
#include "actors/base/messages.h"
#include "core/scheduling/closure.h"
#include "tessera/coordinator.h"

namespace tessera {

// The interface, worker_actor, is declared with the other actor handles
// (actors/base/actor_handles.h).

struct WorkerState {
  static inline const char* name = "tessera.worker";
  // Per-worker resources by name (actors/scheduling/replica.h), shared by the worker's closures.
  std::shared_ptr<std::map<std::string, std::shared_ptr<void>, std::less<>>> resources;
};

// The behaviour of worker `info` running functions from `registry`.
worker_actor::behavior_type WorkerActor(worker_actor::stateful_pointer<WorkerState> self,
                                        WorkerInfo info,
                                        std::shared_ptr<const FunctionRegistry> registry);

// Spawns a worker. The caller must make it exit before the system shuts down.
worker_actor SpawnWorker(caf::actor_system& system, WorkerInfo info,
                         std::shared_ptr<const FunctionRegistry> registry);

}  // namespace tessera
