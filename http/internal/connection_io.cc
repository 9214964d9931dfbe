// A connection's bytes, in and out (HttpServer::Loop, server_loop.h): reading a request into its
// parser under the server's bounds (its size, the body budget, 100-continue), dispatching it to
// a handler thread, rejecting it with an error, and writing an answer (then the next pipelined
// request, or a lingering close).
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <cerrno>
#include <chrono>
#include <list>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "http/internal/diagnostics.h"
#include "http/internal/response_wire.h"
#include "http/internal/server_loop.h"

namespace tessera {

using http_internal::Debug;
using http_internal::ErrorResponse;
using http_internal::ResponseWire;

void HttpServer::Loop::OnEvent(uint64_t id, uint32_t events) {
  Connection* c = Find(id);
  if (c == nullptr) return;
  if ((events & EPOLLERR) != 0 || ((events & EPOLLHUP) != 0 && (events & EPOLLIN) == 0)) {
    Close(*c);
    return;
  }
  if ((events & EPOLLOUT) != 0 && c->phase == Phase::kWriting) {
    TryWrite(*c);
    c = Find(id);
    if (c == nullptr) return;
  }
  if ((events & EPOLLIN) != 0 && c->phase != Phase::kHandling && c->phase != Phase::kWriting) {
    OnReadable(*c);
  }
}

void HttpServer::Loop::OnReadable(Connection& c) {
  const ssize_t n = recv(c.fd, read_buffer_.get(), kReadChunk, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
  if (n <= 0) {  // the client closed (or reset) its side; an unfinished request goes with it
    Close(c);
    return;
  }
  if (c.phase == Phase::kClosing) return;  // lingering: input dropped
  ProcessInput(c, absl::string_view(read_buffer_.get(), static_cast<size_t>(n)));
}

void HttpServer::Loop::ProcessInput(Connection& c, absl::string_view data) {
  const size_t before = c.parser.body_bytes();
  const size_t used = c.parser.Feed(data);
  data.remove_prefix(used);
  const size_t received = c.parser.body_bytes() - before;
  c.budgeted += received;
  body_bytes_ += received;
  if (c.phase == Phase::kIdle && c.parser.started()) {
    c.phase = Phase::kReading;
    c.started = Clock::now();
    c.deadline = c.started + std::chrono::milliseconds(options_.read_timeout_ms);
  }
  if (c.parser.failed()) {
    Reject(c, c.parser.error_status(), c.parser.error());
    return;
  }
  if (body_bytes_ > body_budget_) {
    Reject(c, 503,
           absl::StrCat("the server holds too many request bytes (over ", body_budget_,
                        "); retry later"));
    return;
  }
  if (c.parser.expects_continue() && !c.continue_sent) {
    c.continue_sent = true;
    static constexpr char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
    // Best effort, like Refuse: without it the client sends the body after its own short wait.
    [[maybe_unused]] ssize_t sent =
        send(c.fd, kContinue, sizeof(kContinue) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  if (c.parser.complete()) Dispatch(c, data);
}

void HttpServer::Loop::Dispatch(Connection& c, absl::string_view rest) {
  // What may fail to allocate comes first, so that a failure leaves the connection as it was.
  c.pending.assign(rest.data(), rest.size());
  std::list<Done> answer(1);
  if (options_.request_log != nullptr) {
    Done& done = answer.front();
    done.method = c.parser.method();
    done.target = c.parser.target();
    done.request_bytes = c.parser.body_bytes();
    done.started = c.started;
  }
  {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    jobs_.push_back(Job{c.id, c.parser.Take(), c.budgeted, std::move(answer)});
  }
  jobs_ready_.notify_one();
  c.budgeted = 0;  // the job carries them now
  c.continue_sent = false;
  c.phase = Phase::kHandling;
  SetEvents(c, 0);  // pipelined requests wait in the socket until this one is answered
}

void HttpServer::Loop::Reject(Connection& c, int status, absl::string_view message) {
  Debug("http: answering {} and closing: {}", status, message);
  Wire wire;
  try {
    // Before the parser is reset: `message` may be its error.
    wire = ResponseWire(ErrorResponse(status, server_.error_body_(status, message)), false, true);
    LogAnswer(c.parser.method(), c.parser.target(), status, c.parser.body_bytes(), wire.body.size(),
              c.phase == Phase::kReading ? c.started : Clock::now());
  } catch (const std::bad_alloc&) {
    Close(c);
    return;
  }
  ReleaseBody(c);
  c.pending.clear();
  StartWrite(c, std::move(wire), true);
}

void HttpServer::Loop::StartWrite(Connection& c, Wire wire, bool close) {
  c.out = std::move(wire);
  c.close_after_write = close;
  c.phase = Phase::kWriting;
  c.deadline = Clock::now() + std::chrono::milliseconds(options_.write_timeout_ms);
  TryWrite(c);
}

void HttpServer::Loop::TryWrite(Connection& c) {
  while (c.out.sent < c.out.size()) {
    iovec parts[2];
    int count = 0;
    const size_t sent = c.out.sent;
    if (sent < c.out.head.size()) {
      parts[count++] = {c.out.head.data() + sent, c.out.head.size() - sent};
      if (!c.out.body.empty()) parts[count++] = {c.out.body.data(), c.out.body.size()};
    } else {
      const size_t offset = sent - c.out.head.size();
      parts[count++] = {c.out.body.data() + offset, c.out.body.size() - offset};
    }
    msghdr message{};
    message.msg_iov = parts;
    message.msg_iovlen = count;
    const ssize_t n = sendmsg(c.fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        SetEvents(c, EPOLLOUT);
        return;
      }
      Close(c);
      return;
    }
    c.out.sent += static_cast<size_t>(n);
  }
  c.out = Wire();
  if (c.close_after_write) {
    BeginClose(c);
    return;
  }
  const Clock::time_point now = Clock::now();
  c.phase = Phase::kIdle;
  c.idle_since = now;
  c.deadline = now + std::chrono::milliseconds(options_.idle_timeout_ms);
  SetEvents(c, EPOLLIN);
  if (!c.pending.empty()) {
    const std::string pending = std::move(c.pending);
    c.pending.clear();
    ProcessInput(c, pending);  // may dispatch the next pipelined request, or close
  }
}

void HttpServer::Loop::BeginClose(Connection& c) {
  ReleaseBody(c);
  c.pending.clear();
  shutdown(c.fd, SHUT_WR);
  c.phase = Phase::kClosing;
  c.deadline = Clock::now() + kLinger;
  SetEvents(c, EPOLLIN);
}

void HttpServer::Loop::ReleaseBody(Connection& c) {
  body_bytes_ -= c.budgeted;
  c.budgeted = 0;
  c.parser = HttpRequestParser(limits_);
}

}  // namespace tessera
