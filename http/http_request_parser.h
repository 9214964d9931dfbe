// HttpRequestParser: reads one HTTP/1.1 request at a time from the bytes of a connection, in
// whatever pieces they arrive, and refuses what is malformed or over its limits before holding it.
//
//   HttpRequestParser parser({/*max_head_bytes=*/16 << 10, /*max_body_bytes=*/64 << 20});
//   size_t used = parser.Feed(bytes);      // less than bytes.size() once a request is complete:
//   if (parser.failed()) reply(parser.error_status(), parser.error());   // the rest is the next
//   if (parser.complete()) handle(parser.Take());                        // (pipelined) request
//
// What it takes: a request line `METHOD TARGET HTTP/1.x` (leading empty lines skipped), header
// lines (LF or CRLF), and a body of Content-Length bytes or `Transfer-Encoding: chunked`.
// What it refuses, with the status to answer and then close on: 400 for malformed syntax (a bad
// request line, header line, Content-Length or chunk, or both Content-Length and
// Transfer-Encoding), 413 for a body over max_body_bytes (declared or received), 414 for a
// request line over max_head_bytes, 431 for headers over max_head_bytes or kMaxHeaders, 501 for
// a transfer coding other than chunked, 505 for an HTTP version other than 1.0 and 1.1. A body is
// held only as it arrives (never more than max_body_bytes), the head never beyond max_head_bytes.
//
// Thread-safety: a parser belongs to one connection and is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace tessera {

struct HttpRequest {
  std::string method;      // as sent ("POST")
  std::string target;      // as sent ("/v1/models/m:predict?x=1")
  std::string path;        // the target's path, URL-decoded, without the query
  int minor_version = 1;   // HTTP/1.<minor_version>
  bool keep_alive = true;  // HTTP/1.1 unless "Connection: close"; 1.0 only with "keep-alive"
  std::string body;
};

struct HttpRequestLimits {
  size_t max_head_bytes = size_t{16} << 10;  // the request line and the headers together
  size_t max_body_bytes = size_t{64} << 20;
};

class HttpRequestParser {
 public:
  static constexpr int kMaxHeaders = 100;

  explicit HttpRequestParser(HttpRequestLimits limits) : limits_(limits) {}

  // Reads bytes of the current request and returns how many it used: all of them until the
  // request is complete or has failed, then none more (the rest belongs to whatever follows).
  size_t Feed(absl::string_view data);

  // A byte of the request (beyond empty lines between requests) has arrived.
  bool started() const { return started_; }
  // The head is complete; the body may not be.
  bool head_complete() const { return phase_ > Phase::kHead; }
  // The head asked for "Expect: 100-continue" (HTTP/1.1) and the body has not started.
  bool expects_continue() const { return expects_continue_ && !body_started_; }
  bool complete() const { return phase_ == Phase::kComplete; }
  bool failed() const { return phase_ == Phase::kFailed; }
  // The status to answer a failed request with, and why (for the error body).
  int error_status() const { return error_status_; }
  const std::string& error() const { return error_; }
  // Bytes of body held so far.
  size_t body_bytes() const { return request_.body.size(); }
  // The request line's method and target as sent, once it is read (empty before).
  const std::string& method() const { return request_.method; }
  const std::string& target() const { return request_.target; }

  // The complete request; the parser is then ready for the next one.
  HttpRequest Take();

 private:
  enum class Phase {
    kHead,
    kBody,
    kChunkSize,
    kChunkData,
    kChunkDataEnd,
    kTrailer,
    kComplete,
    kFailed
  };

  // Each consumes from the front of `data`.
  void ReadHead(absl::string_view& data);
  void ReadBody(absl::string_view& data);
  void ReadChunkLine(absl::string_view& data);
  void ReadChunkData(absl::string_view& data);
  void ReadChunkDataEnd(absl::string_view& data);
  void ReadTrailer(absl::string_view& data);

  // One line of the head (without its line ending); sets phase_ after the empty line.
  void HeadLine(absl::string_view line);
  void RequestLine(absl::string_view line);
  void HeaderLine(absl::string_view line);
  void HeadComplete();
  void AppendBody(absl::string_view bytes);
  void Fail(int status, std::string error);

  HttpRequestLimits limits_;
  Phase phase_ = Phase::kHead;
  bool started_ = false;
  bool request_line_done_ = false;
  std::string line_;  // the line being read (head, chunk size or trailer)
  size_t head_bytes_ = 0;
  int headers_ = 0;
  bool has_content_length_ = false;
  uint64_t content_length_ = 0;
  bool chunked_ = false;
  bool expects_continue_ = false;
  bool body_started_ = false;
  bool connection_close_ = false;
  bool connection_keep_alive_ = false;
  uint64_t chunk_left_ = 0;
  int error_status_ = 0;
  std::string error_;
  HttpRequest request_;
};

}  // namespace tessera
