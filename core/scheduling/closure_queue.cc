#include "core/scheduling/closure_queue.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace tessera {

namespace {

// A queue's identity: random, so no two queues (two coordinators, or one started again) are
// likely ever to share one (Note [Exactly-once updates]); never 0.
uint64_t NewQueueIdentity() {
  std::random_device device;
  const uint64_t id = (uint64_t{device()} << 32) ^ device();
  return id == 0 ? 1 : id;
}

}  // namespace

ClosureQueue::ClosureQueue(int64_t capacity, std::optional<uint64_t> identity)
    : capacity_(capacity < 1 ? 1 : capacity),
      identity_(identity.value_or(0) != 0 ? *identity : NewQueueIdentity()),
      numbered_(identity.value_or(0) != 0),
      next_id_(numbered_ ? kFirstUnnumberedId : 1) {}

absl::StatusOr<RemoteValue> ClosureQueue::Enqueue(std::string function, ClosureValues args,
                                                  bool* was_empty, std::optional<ClosureId> id,
                                                  int64_t step) {
  absl::MutexLock lock(&mu_);
  if (absl::Status error = TakeErrorLocked(); !error.ok()) return error;
  while (static_cast<int64_t>(queue_.size()) >= capacity_ && !fatal_error_.has_value() &&
         !pending_error_.has_value()) {
    room_.Wait(&mu_);
  }
  // An error that arrived while we waited cancelled the queue; raise it now rather than queue
  // behind it.
  if (absl::Status error = TakeErrorLocked(); !error.ok()) return error;
  if (id.has_value()) {
    if (!numbered_) {
      return absl::InvalidArgumentError(
          "a closure id can only be given to a queue with a run's identity");
    }
    if (*id < 1 || *id >= kFirstUnnumberedId || *id <= last_given_id_) {
      return absl::InvalidArgumentError(absl::StrCat("closure id ", *id, " is not in (",
                                                     last_given_id_, ", ", kFirstUnnumberedId,
                                                     "): ids given must rise"));
    }
  }
  Entry entry;
  if (id.has_value()) {
    entry.closure.id = *id;
    last_given_id_ = *id;
  } else {
    entry.closure.id = next_id_++;
  }
  entry.closure.queue = identity_;
  unresolved_.insert(entry.closure.id);
  entry.closure.function = std::move(function);
  entry.closure.args = std::move(args);
  entry.closure.step = step;
  entry.value = std::make_shared<RemoteValue::Shared>();
  RemoteValue handle(entry.value);
  if (was_empty != nullptr) *was_empty = queue_.empty();
  queue_.push_back(std::move(entry));
  ++stats_.scheduled;
  return handle;
}

std::optional<Dispatch> ClosureQueue::NextFor(WorkerId worker) {
  std::optional<Dispatch> out;
  bool wake_producers = false;
  {
    absl::MutexLock lock(&mu_);
    if (queue_.empty()) return std::nullopt;
    Entry entry = std::move(queue_.front());
    queue_.pop_front();
    ++entry.attempt;
    entry.worker = worker;
    entry.closure.resolved_below = *unresolved_.begin();  // this closure's own id at most
    // Note [Closure ids that survive a restart]: never past the next step's id.
    if (numbered_) {
      entry.closure.resolved_below = std::min(entry.closure.resolved_below, last_given_id_ + 1);
    }
    out = Dispatch{entry.closure, entry.attempt};
    running_.emplace(entry.closure.id, std::move(entry));
    wake_producers = static_cast<int64_t>(queue_.size()) == capacity_ / 2;
  }
  if (wake_producers) room_.SignalAll();  // drained to half its capacity
  return out;
}

void ClosureQueue::Complete(ClosureId id, int64_t attempt, absl::StatusOr<ClosureValues> result) {
  bool result_ok = true;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(id);
    if (it == running_.end() || it->second.attempt != attempt) return;  // stale
    std::shared_ptr<RemoteValue::Shared> value = it->second.value;
    RemoteValueState state = RemoteValueState::kReady;
    result_ok = result.ok();
    const WorkerId worker = *it->second.worker;
    running_.erase(it);
    unresolved_.erase(id);
    if (result.ok()) {
      ++stats_.completed;
      ++stats_.completed_by_worker[worker];
    } else {
      ++stats_.failed;
      state = RemoteValueState::kFailed;
      if (!pending_error_.has_value() && !fatal_error_.has_value()) {
        pending_error_ = result.status();
        CancelQueuedLocked(absl::CancelledError(absl::StrCat(
            "cancelled: an earlier closure failed: ", result.status().ToString())));
      }
    }
    // Resolved under mu_ (lock order: mu_, then the value's own mutex), so nobody can observe
    // the queue idle, or the error raised, before this RemoteValue is resolved.
    RemoteValue::Resolve(*value, state, std::move(result));
  }
  changed_.SignalAll();
  if (!result_ok) room_.SignalAll();  // an error releases blocked producers
}

void ClosureQueue::RequeueLocked(Entry entry) {
  entry.worker.reset();
  // With an error pending, the queue was cancelled: cancel this closure too rather than run it
  // again (TF does the same).
  const std::optional<absl::Status>& error =
      fatal_error_.has_value() ? fatal_error_ : pending_error_;
  if (error.has_value()) {
    ++stats_.cancelled;
    unresolved_.erase(entry.closure.id);
    RemoteValue::Resolve(*entry.value, RemoteValueState::kCancelled,
                         absl::CancelledError(absl::StrCat(
                             "cancelled: its attempt was lost after an error: ",
                             error->ToString())));
    return;
  }
  RemoteValue::MarkAborted(*entry.value);
  ++stats_.retried;
  queue_.push_front(std::move(entry));
}

bool ClosureQueue::WorkerLost(WorkerId worker) {
  bool requeued = false;
  {
    absl::MutexLock lock(&mu_);
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->second.worker != worker) {
        ++it;
        continue;
      }
      Entry entry = std::move(it->second);
      it = running_.erase(it);
      RequeueLocked(std::move(entry));
      requeued = requeued || (!pending_error_.has_value() && !fatal_error_.has_value());
    }
  }
  changed_.SignalAll();
  return requeued;
}

bool ClosureQueue::Requeue(ClosureId id, int64_t attempt) {
  bool requeued = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = running_.find(id);
    if (it == running_.end() || it->second.attempt != attempt) return false;
    Entry entry = std::move(it->second);
    running_.erase(it);
    requeued = !pending_error_.has_value() && !fatal_error_.has_value();
    RequeueLocked(std::move(entry));
  }
  changed_.SignalAll();
  return requeued;
}

void ClosureQueue::SetFatal(absl::Status status) {
  {
    absl::MutexLock lock(&mu_);
    if (fatal_error_.has_value()) return;
    fatal_error_ = status;
    CancelQueuedLocked(absl::CancelledError(absl::StrCat("cancelled: ", status.ToString())));
  }
  changed_.SignalAll();
  room_.SignalAll();
}

void ClosureQueue::Shutdown(absl::Status status) {
  SetFatal(status);
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, entry] : running_) {
      ++stats_.cancelled;
      unresolved_.erase(id);
      RemoteValue::Resolve(*entry.value, RemoteValueState::kCancelled,
                           absl::CancelledError(absl::StrCat("cancelled: ", status.ToString())));
    }
    running_.clear();
  }
  changed_.SignalAll();
}

absl::Status ClosureQueue::Join() {
  absl::MutexLock lock(&mu_);
  while (!IdleLocked() && !fatal_error_.has_value()) changed_.Wait(&mu_);
  return TakeErrorLocked();
}

absl::Status ClosureQueue::JoinWithin(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;  // InfiniteFuture for an infinite timeout
  absl::MutexLock lock(&mu_);
  while (!IdleLocked() && !fatal_error_.has_value()) {
    if (changed_.WaitWithDeadline(&mu_, deadline) && !IdleLocked() && !fatal_error_.has_value()) {
      return absl::DeadlineExceededError(
          absl::StrCat("join: ", queue_.size(), " closures queued and ", running_.size(),
                       " running after ", absl::FormatDuration(timeout)));
    }
  }
  return TakeErrorLocked();
}

absl::StatusOr<bool> ClosureQueue::Done() {
  absl::MutexLock lock(&mu_);
  if (absl::Status error = TakeErrorLocked(); !error.ok()) return error;
  return IdleLocked();
}

ClosureStats ClosureQueue::stats() const {
  absl::MutexLock lock(&mu_);
  ClosureStats out = stats_;
  out.queued = static_cast<int64_t>(queue_.size());
  out.running = static_cast<int64_t>(running_.size());
  return out;
}

absl::Status ClosureQueue::TakeErrorLocked() {
  if (fatal_error_.has_value()) return *fatal_error_;
  if (pending_error_.has_value()) {
    absl::Status error = *std::move(pending_error_);
    pending_error_.reset();
    return error;
  }
  return absl::OkStatus();
}

void ClosureQueue::CancelQueuedLocked(const absl::Status& why) {
  for (Entry& entry : queue_) {
    ++stats_.cancelled;
    unresolved_.erase(entry.closure.id);
    RemoteValue::Resolve(*entry.value, RemoteValueState::kCancelled, why);
  }
  queue_.clear();
}

}  // namespace tessera
