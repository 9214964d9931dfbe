#include "actors/scheduling/worker_actor.h"

#include <memory>
#include <utility>

#include "actors/base/error.h"
#include "actors/scheduling/replica.h"

namespace tessera {

worker_actor::behavior_type WorkerActor(worker_actor::stateful_pointer<WorkerState> self,
                                        WorkerInfo info,
                                        std::shared_ptr<const FunctionRegistry> registry) {
  self->state.resources = std::make_shared<WorkerResources>();
  return {
      [self, info, registry](run_atom, const Closure& closure) -> caf::result<ClosureValues> {
        absl::StatusOr<const ReplicaFunction*> fn = registry->FindReplicaFunction(closure.function);
        if (!fn.ok()) return StatusToError(fn.status());
        auto promise = self->make_response_promise<ClosureValues>();
        // The context lives until the function calls `done` (which holds it).
        auto ctx = std::make_shared<ReplicaContext>(std::make_unique<ShardClient>(self), info,
                                                    registry, self->state.resources, closure);
        (**fn)(*ctx, closure.args,
               [promise, ctx](absl::StatusOr<ClosureValues> result) mutable {
                 if (result.ok()) {
                   promise.deliver(*std::move(result));
                 } else {
                   promise.deliver(StatusToError(result.status()));
                 }
               });
        return promise;
      },
  };
}

worker_actor SpawnWorker(caf::actor_system& system, WorkerInfo info,
                         std::shared_ptr<const FunctionRegistry> registry) {
  return system.spawn(WorkerActor, info, std::move(registry));
}

}  // namespace tessera
