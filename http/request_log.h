// RequestLog: one line per request an HttpServer answers (http_server.h), appended to a file or
// stderr by a thread of its own, so that the server's event loop — the only caller — never takes
// a lock another thread holds for long, nor waits on the log's file.
//
//   2026-01-02T03:04:05.678Z POST /v1/models/recsys:predict 200 41 58 0.213
//
// Fields, space-separated: the time the answer was ready (UTC, milliseconds), the method, the
// request target as sent (path and query; a byte outside printable ASCII, a space or a backslash
// as \xHH), the status, the request body's bytes, the response body's bytes, and the latency in
// milliseconds from the request's first byte to its answer being ready to send. An answer the
// server makes itself before a request line is complete (a connection refused at the limit, a
// malformed request line) shows "-" for the method and target.
//
//   TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RequestLog> log,
//   RequestLog::Open("/var/log/serve.log")); options.request_log = log.get();           //
//   HttpServerOptions; the log outlives the server
//
// Note [Request log off the loop]: Record formats a line into a buffer the loop thread owns
// (the time's text is made once a second); Flush, at the end of each turn of the loop, hands
// that buffer to the writer thread — a swap under a mutex the writer holds only to swap — once
// kHandOverInterval has passed since the last hand-over or kHandOverBytes are waiting, so that a
// busy server wakes the writer (and makes a write) a few dozen times a second rather than at
// every turn of its loop. The loop turns at least every 50 ms, so a line reaches the file within
// about 100 ms plus the write. A writer that falls more than kMaxPendingBytes behind (a stalled
// pipe) makes later lines be dropped and counted, and the count is logged once it catches up:
// the server does not wait for its log.
//
// Thread-safety: Record and Flush from one thread (the server's loop); the destructor writes what
// is pending and joins the writer.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

class RequestLog {
 public:
  static constexpr size_t kMaxPendingBytes = size_t{8} << 20;
  static constexpr size_t kHandOverBytes = size_t{64} << 10;
  static constexpr std::chrono::milliseconds kHandOverInterval{50};

  // Appends to `path` (created 0644 if needed); "-" is stderr. Unavailable naming the path when
  // it cannot be opened.
  static absl::StatusOr<std::unique_ptr<RequestLog>> Open(const std::string& path);
  ~RequestLog();
  RequestLog(const RequestLog&) = delete;
  RequestLog& operator=(const RequestLog&) = delete;

  // One answered request; `method` and `target` empty when unknown.
  void Record(absl::string_view method, absl::string_view target, int status, size_t request_bytes,
              size_t response_bytes, std::chrono::nanoseconds latency);
  // Hands the lines recorded so far to the writer when it is time to (Note [Request log off the
  // loop]); with `now`, whatever the time.
  void Flush(bool now = false);

 private:
  RequestLog(int fd, bool owned);
  void Write();

  const int fd_;
  const bool owned_;  // fd_ is closed by the destructor

  // The loop thread's.
  std::string lines_;
  int64_t second_ = -1;  // the second whose text second_text_ holds
  std::string second_text_;
  std::chrono::steady_clock::time_point handed_over_;

  std::mutex mutex_;
  std::condition_variable ready_;
  std::string pending_;    // guarded by mutex_
  uint64_t dropped_ = 0;   // guarded by mutex_
  bool stopping_ = false;  // guarded by mutex_
  std::thread writer_;
};

}  // namespace tessera
