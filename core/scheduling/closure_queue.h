// ClosureQueue: the coordinator's book of closures — what is queued, what runs where, what
// finished — and the semantics of ClusterCoordinator (docs/design.md §3) as plain, thread-safe C++.
// The coordinator actor only moves closures between this queue and its workers.
//
// Semantics:
// - Enqueue never blocks unless the queue holds `capacity` closures waiting to run; then it
//   waits for room (room is made by dispatch, not by completion, so it cannot deadlock while
//   workers live).
// - Dispatch is FIFO: NextFor(worker) hands the oldest queued closure to an idle worker.
// - At least once: when a worker dies, its running closure goes back to the FRONT of the queue
//   (it was the oldest) and its RemoteValue says aborted until the re-run finishes. A late
//   result from a dead worker's attempt is ignored, so the RemoteValue resolves exactly once.
// - The first application error (a closure returning an error) fails its RemoteValue, cancels
//   every queued closure (their RemoteValues say cancelled), and is raised once by the next
//   Enqueue / Join / Done, then cleared; closures running at that moment still finish, and work
//   enqueued after the error has been raised runs normally.
// - A fatal error (SetFatal, e.g. a dead parameter server) is raised by every later Enqueue /
//   Join / Done and is never cleared.
//
// Thread-safety: every method is safe to call from any thread. Blocking methods (Enqueue on a
// full queue, Join) wait on the queue's mutex and must not be called from an actor thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "core/scheduling/closure.h"

namespace tessera {

// A closure handed to a worker: the attempt number tells a current result from a stale one.
struct Dispatch {
  Closure closure;
  int64_t attempt = 0;
};

// Note [Closure ids that survive a restart]
// A queue's identity is random, and its closures are numbered 1, 2, ... in the order queued, so
// that no two queues share an UpdateId (Note [Exactly-once updates], core/ps/update_ledger.h). A
// run that a coordinator started again continues (Note [A restarted coordinator re-adopts its run's
// shards], coordinator/ps/strategy.h) needs the opposite: the new coordinator must name a closure
// the lost one ran exactly as the lost one did, so that the shards drop what they applied. So a
// queue may be given its identity (derived from the run's) and then numbers closures by what they
// are: a closure that trains global step s is given id s + 1 by its caller (ascending, below
// kFirstUnnumberedId), every other closure takes the next id from kFirstUnnumberedId up. A mark is
// the lowest unresolved id, but never above the step after the last one given: steps are queued in
// rising order, so every step below the mark was resolved, and the mark says where a successor must
// start (everything below it is applied everywhere; from it on, the ledgers remember what they
// applied). The other closures' ids stay above every mark, so should they update shards, their ids
// are remembered until the ledger's bound evicts them.
constexpr ClosureId kFirstUnnumberedId = ClosureId{1} << 62;

class ClosureQueue {
 public:
  // `capacity` >= 1: how many closures may wait to run before Enqueue blocks. `identity`: every
  // closure's Closure::queue (non-zero; Note [Closure ids that survive a restart]); random when
  // not given.
  explicit ClosureQueue(int64_t capacity, std::optional<uint64_t> identity = std::nullopt);

  // Queues `function(args)` and returns its RemoteValue. First raises a pending application
  // error (returning it, once) or the fatal error. Blocks while the queue is full, until it has
  // drained to half its capacity (so a producer wakes once per burst, not once per closure).
  // When `was_empty` is given it says whether the queue held nothing before: only then can a
  // worker be idle (a dispatcher drains the queue until it is empty or every worker is busy),
  // so only then does the dispatcher need a nudge.
  // `id`: the closure's id, for a queue given its identity (Note [Closure ids that survive a
  // restart]): in [1, kFirstUnnumberedId) and above every id given before; InvalidArgument
  // otherwise, and for a queue with a random identity. `step`: the global step the closure
  // trains (Closure::step; -1: none).
  absl::StatusOr<RemoteValue> Enqueue(std::string function, ClosureValues args,
                                      bool* was_empty = nullptr,
                                      std::optional<ClosureId> id = std::nullopt,
                                      int64_t step = -1);

  // Every closure's Closure::queue.
  uint64_t identity() const { return identity_; }

  // The oldest queued closure, now running on `worker`; nullopt when nothing is queued.
  std::optional<Dispatch> NextFor(WorkerId worker);

  // The result of `attempt` of closure `id`. Ignored when that attempt is no longer current (its
  // worker was declared dead). An error result is an application error (see above).
  void Complete(ClosureId id, int64_t attempt, absl::StatusOr<ClosureValues> result);

  // `worker` died: its running closure (if any) is queued again at the front — or cancelled when
  // an error is pending or fatal. Returns whether one was re-queued. Idempotent.
  bool WorkerLost(WorkerId worker);

  // `attempt` of closure `id` failed in a way that says nothing about the closure itself (its
  // worker could not reach a parameter server): queued again at the front like a lost worker's
  // closure, or cancelled when an error is pending or fatal. Returns whether it was re-queued;
  // false also for an attempt that is no longer current.
  bool Requeue(ClosureId id, int64_t attempt);

  // Sets the sticky fatal error: every queued closure is cancelled, every later Enqueue / Join /
  // Done returns it. The first fatal error wins.
  void SetFatal(absl::Status status);

  // The coordinator is going away: SetFatal(status), and every running closure is cancelled too
  // (its result will never arrive), so no RemoteValue is left waiting forever.
  void Shutdown(absl::Status status);

  // Waits until nothing is queued or running, then raises the pending application error (once)
  // or the fatal error. Also returns (the fatal error) as soon as one is set.
  absl::Status Join();
  // As Join, but gives up after `timeout` with DeadlineExceeded (nothing is cleared then).
  absl::Status JoinWithin(absl::Duration timeout);
  // Whether nothing is queued or running, without waiting. Raises the pending error like Join.
  absl::StatusOr<bool> Done();

  ClosureStats stats() const;

 private:
  struct Entry {
    Closure closure;
    std::shared_ptr<RemoteValue::Shared> value;
    int64_t attempt = 0;
    std::optional<WorkerId> worker;  // set while running
  };

  // Returns and clears the pending application error, or the fatal error, or OK.
  absl::Status TakeErrorLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CancelQueuedLocked(const absl::Status& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts a running closure's entry back at the front of the queue, or cancels it (see Requeue).
  void RequeueLocked(Entry entry) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool IdleLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return queue_.empty() && running_.empty();
  }

  const int64_t capacity_;
  const uint64_t identity_;  // Closure::queue of every closure it issues
  const bool numbered_;      // identity given: callers may number closures (Note [Closure ids...])
  mutable absl::Mutex mu_;
  absl::CondVar changed_;  // something finished, or an error was set
  absl::CondVar room_;     // the queue drained to half its capacity, or an error
  ClosureId next_id_ ABSL_GUARDED_BY(mu_);            // the next id not given by the caller
  ClosureId last_given_id_ ABSL_GUARDED_BY(mu_) = 0;  // the highest id a caller gave
  std::deque<Entry> queue_ ABSL_GUARDED_BY(mu_);
  std::map<ClosureId, Entry> running_ ABSL_GUARDED_BY(mu_);
  // Closures queued or running: the lowest is every dispatch's Closure::resolved_below.
  std::set<ClosureId> unresolved_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> pending_error_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> fatal_error_ ABSL_GUARDED_BY(mu_);
  ClosureStats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tessera
