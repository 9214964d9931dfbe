// Closure values and remote values: what a closure takes and returns, and the caller's handle on
// its result (TF's RemoteValue).
//
// ClosureValues are named, typed values that serialize, so a closure can travel to a worker in
// another process unchanged (replica functions are registered by name, tessera/coordinator.h).
// Each value is an int64, a double, a string or a Tensor, under a name; a name holds one value.
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
// Example:
//   ClosureValues args;
//   args.Set("batch", int64_t{7}).Set("learning_rate", 0.1);
//   ...
//   TESSERA_ASSIGN_OR_RETURN(int64_t batch, args.Get<int64_t>("batch"));
//   args.Get<double>("batch");  // InvalidArgument: ... "batch" holds an int64, not a double
//
// Thread-safety: ClosureValues are values (const methods are safe from any thread); a RemoteValue
// is safe to use from any thread (the coordinator's threads resolve it, the driver's waits on it).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "tessera/tensor.h"

namespace tessera {

// The types a closure value holds. The numbers are the type tags on the wire: never renumber.
enum class ClosureValueType : uint8_t { kInt64 = 0, kDouble = 1, kString = 2, kTensor = 3 };
inline constexpr int kNumClosureValueTypes = 4;

// "int64", "double", "string", "tensor".
absl::string_view ClosureValueTypeName(ClosureValueType type);

// One value; the alternative's index is its ClosureValueType.
using ClosureValue = std::variant<int64_t, double, std::string, Tensor>;

template <class T>
inline constexpr bool kIsClosureValueType =
    std::is_same_v<T, int64_t> || std::is_same_v<T, double> || std::is_same_v<T, std::string> ||
    std::is_same_v<T, Tensor>;

// The ClosureValueType of T, one of the four types a closure value holds.
template <class T>
constexpr ClosureValueType ClosureValueTypeOf() {
  static_assert(kIsClosureValueType<T>,
                "a closure value is an int64_t, a double, a std::string or a Tensor");
  if constexpr (std::is_same_v<T, int64_t>) {
    return ClosureValueType::kInt64;
  } else if constexpr (std::is_same_v<T, double>) {
    return ClosureValueType::kDouble;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return ClosureValueType::kString;
  } else {
    return ClosureValueType::kTensor;
  }
}

class ClosureValues {
 public:
  // Sets `name` to `value`, replacing what it held (of any type). Returns *this, so sets chain.
  // An int is stored as an int64; a bool is refused at compile time (say int64_t{0 or 1}).
  ClosureValues& Set(std::string name, int64_t value);
  ClosureValues& Set(std::string name, int32_t value) {
    return Set(std::move(name), int64_t{value});
  }
  ClosureValues& Set(std::string name, double value);
  ClosureValues& Set(std::string name, std::string value);
  ClosureValues& Set(std::string name, const char* value) {
    return Set(std::move(name), std::string(value));
  }
  ClosureValues& Set(std::string name, Tensor value);
  ClosureValues& Set(std::string name, bool value) = delete;

  // The value of `name` as T (int64_t, double, std::string or Tensor). InvalidArgument naming
  // `name` and T when there is none, or naming the type it holds when that is not T.
  template <class T>
  absl::StatusOr<T> Get(absl::string_view name) const {
    absl::StatusOr<const ClosureValue*> value = Find(name, ClosureValueTypeOf<T>());
    if (!value.ok()) return value.status();
    return std::get<T>(**value);
  }

  // Whether `name` holds a value (of any type).
  bool Has(absl::string_view name) const { return values_.find(name) != values_.end(); }
  // The type `name` holds. InvalidArgument naming `name` when it holds none.
  absl::StatusOr<ClosureValueType> TypeOf(absl::string_view name) const;
  // Removes `name`; false when it held nothing.
  bool Erase(absl::string_view name);

  bool empty() const { return values_.empty(); }
  size_t size() const { return values_.size(); }
  // Every value by name, in name order (the order they travel in).
  const std::map<std::string, ClosureValue, std::less<>>& values() const { return values_; }

 private:
  // The value of `name` when it holds a `type`; Get's errors otherwise.
  absl::StatusOr<const ClosureValue*> Find(absl::string_view name, ClosureValueType type) const;

  std::map<std::string, ClosureValue, std::less<>> values_;
};

// -- RemoteValue ----------------------------------------------------------------------------------

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

// -- What a coordinator's closures did ----------------------------------------------------------

// Which worker runs what: a worker is named by an id that is never reused (a restarted worker
// with the same index gets a new id), so a late message from a dead worker is recognisable.
using WorkerId = int64_t;

struct ClosureStats {
  int64_t scheduled = 0;  // accepted
  int64_t completed = 0;  // resolved ready
  int64_t failed = 0;     // resolved failed
  int64_t retried = 0;    // queued again because their worker died
  int64_t cancelled = 0;  // resolved cancelled
  int64_t queued = 0;     // waiting now
  int64_t running = 0;    // running now
  std::map<WorkerId, int64_t> completed_by_worker;
};

}  // namespace tessera
