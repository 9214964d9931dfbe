// Closures and RemoteValues: what a coordinator schedules and what the caller gets back.
//
// A closure is a replica function's registered name plus its arguments. Arguments and results are
// ClosureValues: plain values (numbers, tensors, strings) that serialize, so a closure can travel
// to a worker in another process unchanged (DESIGN.md §2: replica functions are registered by
// name). Per-worker resources (a worker's dataset iterator) are named in `strings`; the worker
// resolves the name to its own instance.
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
#include "core/tensor.h"

namespace tessera {

struct ClosureValues {
  std::vector<double> scalars;
  std::vector<Tensor> tensors;
  std::vector<std::string> strings;
};

using ClosureId = int64_t;

struct Closure {
  ClosureId id = 0;          // assigned by the ClosureQueue
  std::string function;      // a registered replica function
  ClosureValues args;
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
  // The values once ready; the closure's error once failed; Cancelled once cancelled. Blocks
  // while the closure is queued, running or being re-run.
  absl::StatusOr<ClosureValues> Fetch() const;
  // As Fetch, but gives up after `timeout` with DeadlineExceeded.
  absl::StatusOr<ClosureValues> FetchWithin(absl::Duration timeout) const;
  // Convenience: scalars[0] of the result; InvalidArgument when there is none.
  absl::StatusOr<double> FetchScalar() const;

 private:
  friend class ClosureQueue;
  struct Shared {
    mutable absl::Mutex mu;
    mutable absl::CondVar resolved;
    RemoteValueState state ABSL_GUARDED_BY(mu) = RemoteValueState::kNotReady;
    std::optional<absl::StatusOr<ClosureValues>> result ABSL_GUARDED_BY(mu);
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
