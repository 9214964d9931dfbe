// Blocking forms of the non-blocking variable operations, for drivers: run the operation from a
// short-lived event-based actor and wait for its `done` on the calling thread.
//
// Must not be called from an actor's thread (it blocks), nor under CAF's testing scheduler.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <future>
#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace tessera::internal {

// `op(self, done)` starts the operation on `self` and eventually calls done(StatusOr<T>).
template <class T, class Op>
absl::StatusOr<T> Await(caf::actor_system& system, Op op) {
  auto promise = std::make_shared<std::promise<absl::StatusOr<T>>>();
  std::future<absl::StatusOr<T>> result = promise->get_future();
  // The spawned function takes an argument besides `self`: CAF 0.17 dereferences a null
  // argument tuple when there is none (see tests/actors/actor_test_util.h).
  system.spawn(
      [op = std::move(op), promise](caf::event_based_actor* self, int) {
        op(self, [promise](absl::StatusOr<T> r) { promise->set_value(std::move(r)); });
      },
      0);
  return result.get();
}

// The same for operations whose done takes an absl::Status.
template <class Op>
absl::Status AwaitStatus(caf::actor_system& system, Op op) {
  auto promise = std::make_shared<std::promise<absl::Status>>();
  std::future<absl::Status> result = promise->get_future();
  system.spawn(
      [op = std::move(op), promise](caf::event_based_actor* self, int) {
        op(self, [promise](absl::Status s) { promise->set_value(std::move(s)); });
      },
      0);
  return result.get();
}

}  // namespace tessera::internal
