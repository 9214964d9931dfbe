// Closures and RemoteValues: what a coordinator schedules and what the caller gets back.
//
// A closure is a replica function's registered name plus its arguments. Arguments and results are
// ClosureValues (core/scheduling/closure_values.h): named, typed values that serialize, so a
// closure can travel to a worker in another process unchanged. Per-worker resources (a worker's
// dataset iterator) are not arguments: the replica function names them and the worker resolves the
// name to its own instance (actors/scheduling/replica.h).
//
// A RemoteValue is the caller's handle on one closure's result. It resolves exactly once (ready,
// failed or cancelled) even when the closure runs more than once because its worker died.
//
//   state        meaning                                          Fetch()
//   kNotReady    queued or running                                waits
//   kAborted     its worker died; it is queued to run again       waits
//   kReady       finished                                         the values
//   kFailed      the replica function returned an error           that error
//   kCancelled   an earlier closure failed, so it never ran       Cancelled
//
// Thread-safety: RemoteValue is safe to use from any thread (the coordinator's threads resolve
// it, the driver's waits on it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/scheduling/closure_values.h"

namespace tessera {

using ClosureId = int64_t;

struct Closure {
  ClosureId id = 0;          // assigned by the ClosureQueue
  std::string function;      // a registered replica function
  ClosureValues args;
  // The global step the closure trains (-1: none): a train step's batch is the step's (Note
  // [Closure ids that survive a restart] in core/scheduling/closure_queue.h numbers it by it too).
  int64_t step = -1;
  // Which queue issued `id` (random per queue), and, as dispatched, the lowest id of that queue
  // not yet resolved: what the closure's updates carry so that each shard applies them once
  // (Note [Exactly-once updates] in core/ps/update_ledger.h).
  uint64_t queue = 0;
  ClosureId resolved_below = 0;
};

enum class RemoteValueState : int { kNotReady, kAborted, kReady, kFailed, kCancelled };
absl::string_view RemoteValueStateName(RemoteValueState state);  // "not ready", "ready", ...

class RemoteValue {
 public:
  // A RemoteValue that is already failed with `status` (a default-constructed one is failed
  // with FailedPrecondition "no closure").
  RemoteValue();
  static RemoteValue Failed(absl::Status status);

  RemoteValueState state() const;
  // When it resolved (ready, failed or cancelled); none before.
  std::optional<absl::Time> resolved_at() const;
  // The values once ready; the closure's error once failed; Cancelled once cancelled. Blocks
  // while the closure is queued, running or being re-run.
  absl::StatusOr<ClosureValues> Fetch() const;
  // As Fetch, but gives up after `timeout` with DeadlineExceeded.
  absl::StatusOr<ClosureValues> FetchWithin(absl::Duration timeout) const;
  // Fetch, then the result's value `name` as T (ClosureValues::Get): the closure's error, or
  // InvalidArgument when the result has no `name` of type T.
  // Example: TESSERA_ASSIGN_OR_RETURN(double loss, remote_value.Fetch<double>("loss"));
  template <class T>
  absl::StatusOr<T> Fetch(absl::string_view name) const {
    absl::StatusOr<ClosureValues> values = Fetch();
    if (!values.ok()) return values.status();
    return values->Get<T>(name);
  }

 private:
  friend class ClosureQueue;
  struct Shared {
    mutable absl::Mutex mu;
    mutable absl::CondVar resolved;
    RemoteValueState state ABSL_GUARDED_BY(mu) = RemoteValueState::kNotReady;
    std::optional<absl::StatusOr<ClosureValues>> result ABSL_GUARDED_BY(mu);
    absl::Time resolved_at ABSL_GUARDED_BY(mu);
  };
  explicit RemoteValue(std::shared_ptr<Shared> shared) : shared_(std::move(shared)) {}
  // Resolves once; later calls are ignored (a closure resolves exactly once).
  static void Resolve(Shared& shared, RemoteValueState state, absl::StatusOr<ClosureValues> r);
  static void MarkAborted(Shared& shared);

  std::shared_ptr<Shared> shared_;
};

// Fetches every value in order; the first error wins.
absl::StatusOr<std::vector<ClosureValues>> FetchAll(const std::vector<RemoteValue>& values);

}  // namespace tessera
