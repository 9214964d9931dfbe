// FifoWatchdog: what unblocks a reader that (wrongly) waits for a FIFO's writer, so a regression
// fails the test on its check instead of hanging it.
//
//   {
//     testing::FifoWatchdog watchdog(fifo, absl::Seconds(5));
//     CHECK(absl::IsDataLoss(Env::Default()->NewRandomAccessFile(fifo).status()));
//     CHECK(!watchdog.fired());
//   }  // a watchdog that did not fire is called off at once
//
// Thread-safety: constructed and destroyed on one thread; fired() from any.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace tessera::testing {

// Opens `path` for writing (and closes it) after `delay`, unless destroyed first: the destructor
// calls it off at once, so a passing test never waits out the delay.
class FifoWatchdog {
 public:
  FifoWatchdog(std::string path, absl::Duration delay)
      : thread_([this, path = std::move(path), delay] {
          if (called_off_.WaitForNotificationWithTimeout(delay)) return;
          fired_ = true;
          const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
          if (fd >= 0) ::close(fd);
        }) {}
  ~FifoWatchdog() {
    called_off_.Notify();
    thread_.join();
  }
  FifoWatchdog(const FifoWatchdog&) = delete;
  FifoWatchdog& operator=(const FifoWatchdog&) = delete;

  // Whether the delay passed with the watchdog still on (the reader it guards would have hung).
  bool fired() const { return fired_; }

 private:
  absl::Notification called_off_;
  std::atomic<bool> fired_{false};
  std::thread thread_;  // last: it reads the members above
};

}  // namespace tessera::testing
