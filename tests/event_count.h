// EventCount: how many times something has happened (a request reached a handler, a directory was
// listed, an actor was asked to wait), for a test to wait on without polling or sleeping: the
// thread that counts wakes the waiter, since absl::Mutex evaluates a waiter's condition again
// whenever it is unlocked.
//
//   testing::EventCount entered;                     // shared with the code that counts
//   ... entered.Add(); ...                           // on any thread
//   REQUIRE(entered.AwaitAtLeast(2, absl::Seconds(20)));
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <cstdint>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace tessera::testing {

class EventCount {
 public:
  void Add(int64_t n = 1) {
    absl::MutexLock lock(&mu_);
    count_ += n;
  }
  int64_t count() const {
    absl::MutexLock lock(&mu_);
    return count_;
  }
  // Whether the count has reached `n`, waiting up to `limit` for it.
  bool AwaitAtLeast(int64_t n, absl::Duration limit) const {
    absl::MutexLock lock(&mu_);
    auto reached = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), limit);
  }

 private:
  mutable absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera::testing
