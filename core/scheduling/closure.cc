#include "core/scheduling/closure.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera {

absl::string_view RemoteValueStateName(RemoteValueState state) {
  switch (state) {
    case RemoteValueState::kNotReady: return "not ready";
    case RemoteValueState::kAborted: return "aborted (its worker died; it will run again)";
    case RemoteValueState::kReady: return "ready";
    case RemoteValueState::kFailed: return "failed";
    case RemoteValueState::kCancelled: return "cancelled";
  }
  return "invalid";
}

RemoteValue::RemoteValue() : shared_(std::make_shared<Shared>()) {
  Resolve(*shared_, RemoteValueState::kFailed,
          absl::FailedPreconditionError("this RemoteValue belongs to no closure"));
}

RemoteValue RemoteValue::Failed(absl::Status status) {
  RemoteValue value(std::make_shared<Shared>());
  Resolve(*value.shared_, RemoteValueState::kFailed, std::move(status));
  return value;
}

RemoteValueState RemoteValue::state() const {
  absl::MutexLock lock(&shared_->mu);
  return shared_->state;
}

std::optional<absl::Time> RemoteValue::resolved_at() const {
  absl::MutexLock lock(&shared_->mu);
  if (!shared_->result.has_value()) return std::nullopt;
  return shared_->resolved_at;
}

absl::StatusOr<ClosureValues> RemoteValue::Fetch() const {
  absl::MutexLock lock(&shared_->mu);
  while (!shared_->result.has_value()) shared_->resolved.Wait(&shared_->mu);
  return *shared_->result;
}

absl::StatusOr<ClosureValues> RemoteValue::FetchWithin(absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;  // InfiniteFuture for an infinite timeout
  absl::MutexLock lock(&shared_->mu);
  while (!shared_->result.has_value()) {
    if (shared_->resolved.WaitWithDeadline(&shared_->mu, deadline) &&
        !shared_->result.has_value()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "the closure's result is not there after ", absl::FormatDuration(timeout),
          " (state: ", RemoteValueStateName(shared_->state), ")"));
    }
  }
  return *shared_->result;
}

void RemoteValue::Resolve(Shared& shared, RemoteValueState state,
                          absl::StatusOr<ClosureValues> result) {
  {
    absl::MutexLock lock(&shared.mu);
    if (shared.result.has_value()) return;
    shared.state = state;
    shared.result = std::move(result);
    shared.resolved_at = absl::Now();
  }
  shared.resolved.SignalAll();
}

void RemoteValue::MarkAborted(Shared& shared) {
  absl::MutexLock lock(&shared.mu);
  if (!shared.result.has_value()) shared.state = RemoteValueState::kAborted;
}

absl::StatusOr<std::vector<ClosureValues>> FetchAll(const std::vector<RemoteValue>& values) {
  std::vector<ClosureValues> out;
  out.reserve(values.size());
  for (const RemoteValue& value : values) {
    absl::StatusOr<ClosureValues> v = value.Fetch();
    if (!v.ok()) return v.status();
    out.push_back(*std::move(v));
  }
  return out;
}

}  // namespace tessera
