// PollUntil: the tests' one poll, for what nothing can signal to a test — a child process's output
// or exit, a server process's answers (tests/cli). Where the code under test can signal, wait on
// that instead (tests/event_count.h, a notification, an actor's down message, a coordinator's
// hooks: tests/coordinator/scheduling/coordinator_events.h): a poll costs its period on every
// wait and a little CPU while it lasts.
//
//   REQUIRE(testing::PollUntil([&] { return Has(child.out(), "listening on"); },
//   absl::Seconds(5)));
//
// Thread-safety: `done` runs on the calling thread only.
#pragma once

#include <algorithm>
#include <functional>
#include <thread>

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tessera::testing {

// Checks `done` every `every` until it holds (true) or `limit` passes (false); `done` is checked
// once more at the deadline, so a condition met just then still counts.
inline bool PollUntil(const std::function<bool()>& done, absl::Duration limit,
                      absl::Duration every = absl::Milliseconds(10)) {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    if (done()) return true;
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(absl::ToChronoNanoseconds(std::min(every, deadline - now)));
  }
}

}  // namespace tessera::testing
