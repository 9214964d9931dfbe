// The event loop of HttpServer::Loop (server_loop.h) and a connection's lifecycle: accepting it
// (or shedding an idle one, or refusing it, at the connection limit), its epoll events, taking
// the handler threads' answers back, the deadline sweep, and closing.
#include "http/internal/server_loop.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "http/internal/diagnostics.h"
#include "http/internal/response_wire.h"

namespace tessera {
namespace {

using http_internal::Debug;
using http_internal::ErrorResponse;
using http_internal::ResponseWire;
using http_internal::Warn;

epoll_event EpollEvent(uint32_t events, uint64_t id) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = id;
  return event;
}

}  // namespace

HttpServer::Loop::Loop(HttpServer& server)
    : server_(server),
      options_(server.options_),
      limits_{server.options_.max_head_bytes, server.options_.max_body_bytes},
      body_budget_(kBodyBudgetFactor * server.options_.max_body_bytes),
      read_buffer_(new char[kReadChunk]) {}

HttpServer::Loop::~Loop() {
  {
    std::lock_guard<std::mutex> lock(jobs_mutex_);
    shutting_down_ = true;
  }
  jobs_ready_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  for (auto& [id, c] : connections_) ::close(c->fd);
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
}

absl::Status HttpServer::Loop::Serve() {
  int threads = options_.threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  try {
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { Work(); });
  } catch (const std::system_error& e) {  // the destructor joins those started
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot start the request threads: ", e.what()));
  }
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd_ < 0) {
    return absl::InternalError(absl::StrCat("epoll_create1: ", std::strerror(errno)));
  }
  epoll_event listen_event = EpollEvent(EPOLLIN, kListenId);
  epoll_event wake_event = EpollEvent(EPOLLIN, kWakeId);
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, server_.listen_fd_, &listen_event) != 0 ||
      epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, server_.wake_fd_, &wake_event) != 0) {
    return absl::InternalError(absl::StrCat("epoll_ctl: ", std::strerror(errno)));
  }
  epoll_event events[256];
  Clock::time_point next_sweep = Clock::now() + kSweepInterval;
  while (!server_.stop_flag_) {
    const int n = epoll_wait(epoll_fd_, events, 256, static_cast<int>(kSweepInterval.count()));
    if (n < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("epoll_wait: ", std::strerror(errno)));
    }
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      // Note [Out of memory]: a failure serving one connection is that connection's.
      try {
        if (id == kListenId) {
          AcceptAll();
        } else if (id == kWakeId) {
          uint64_t count;
          while (::read(server_.wake_fd_, &count, sizeof(count)) > 0) {
          }
          TakeDone();
        } else {
          OnEvent(id, events[i].events);
        }
      } catch (const std::bad_alloc&) {
        Warn("http: out of memory serving a connection; answering 503 and closing it");
        if (Connection* c = Find(id)) Reject(*c, 503, "out of memory reading this request");
      } catch (const std::exception& e) {
        Warn("http: closing a connection on an error: {}", e.what());
        if (Connection* c = Find(id)) Close(*c);
      }
    }
    const Clock::time_point now = Clock::now();
    if (now >= next_sweep) {
      try {
        Sweep(now);
      } catch (const std::bad_alloc&) {
        // Deadlines are checked again at the next sweep.
      }
      next_sweep = now + kSweepInterval;
    }
    if (options_.request_log != nullptr) options_.request_log->Flush();
  }
  if (options_.request_log != nullptr) options_.request_log->Flush(/*now=*/true);
  return absl::OkStatus();
}

HttpServer::Loop::Connection* HttpServer::Loop::Find(uint64_t id) {
  auto it = connections_.find(id);
  return it == connections_.end() ? nullptr : it->second.get();
}

void HttpServer::Loop::AcceptAll() {
  for (int i = 0; i < 64; ++i) {
    const int fd = accept4(server_.listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: make room by closing an idle connection, or stop accepting for a
        // moment (the listening socket would otherwise wake the loop at once, forever).
        if (!ShedIdle()) {
          epoll_event event = EpollEvent(0, kListenId);
          epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, server_.listen_fd_, &event);
          accept_paused_ = true;
          accept_resume_ = Clock::now() + kAcceptPause;
          Warn("http: out of file descriptors; not accepting for {} ms", kAcceptPause.count());
        }
      }
      return;
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (static_cast<int>(connections_.size()) >= options_.max_connections && !ShedIdle()) {
      Refuse(fd);
      continue;
    }
    const uint64_t id = next_id_++;
    Connection* c = nullptr;
    try {
      auto connection = std::make_unique<Connection>(fd, id, limits_);
      c = connection.get();
      connections_.emplace(id, std::move(connection));
    } catch (const std::bad_alloc&) {
      ::close(fd);
      throw;
    }
    c->idle_since = Clock::now();
    c->deadline = c->idle_since + std::chrono::milliseconds(options_.idle_timeout_ms);
    epoll_event event = EpollEvent(EPOLLIN, id);
    if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
      Close(*c);
      continue;
    }
    c->events = EPOLLIN;
  }
}

bool HttpServer::Loop::ShedIdle() {
  Connection* oldest = nullptr;
  for (auto& [id, c] : connections_) {
    if (c->phase == Phase::kIdle && (oldest == nullptr || c->idle_since < oldest->idle_since)) {
      oldest = c.get();
    }
  }
  if (oldest == nullptr) return false;
  Debug("http: connection limit ({}) reached; closing the longest idle connection",
        options_.max_connections);
  Close(*oldest);
  return true;
}

void HttpServer::Loop::Refuse(int fd) {
  Debug("http: connection limit ({}) reached and none idle; refusing a connection",
        options_.max_connections);
  try {
    const std::string message =
        absl::StrCat("too many connections (the server's limit is ", options_.max_connections, ")");
    const Wire wire =
        ResponseWire(ErrorResponse(503, server_.error_body_(503, message)), false, true);
    LogAnswer("", "", 503, 0, wire.body.size(), Clock::now());
    const std::string bytes = wire.head + wire.body;
    // Best effort: a fresh socket's send buffer takes this at once, or the client does without.
    [[maybe_unused]] ssize_t sent =
        send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  } catch (const std::bad_alloc&) {
  }
  ::close(fd);
}

void HttpServer::Loop::Close(Connection& c) {
  body_bytes_ -= c.budgeted;
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  connections_.erase(c.id);
}

void HttpServer::Loop::SetEvents(Connection& c, uint32_t events) {
  if (c.events == events) return;
  epoll_event event = EpollEvent(events, c.id);
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c.fd, &event);
  c.events = events;
}

void HttpServer::Loop::LogAnswer(absl::string_view method, absl::string_view target, int status,
                                 size_t request_bytes, size_t response_bytes,
                                 Clock::time_point started) {
  if (options_.request_log == nullptr) return;
  options_.request_log->Record(method, target, status, request_bytes, response_bytes,
                               Clock::now() - started);
}

void HttpServer::Loop::TakeDone() {
  std::list<Done> done;
  {
    std::lock_guard<std::mutex> lock(done_mutex_);
    done.swap(done_);
  }
  for (Done& d : done) {
    body_bytes_ -= d.budgeted;
    Connection* c = Find(d.id);
    if (c == nullptr) continue;  // the client left while its request was handled
    if (d.failed) {
      Close(*c);
      continue;
    }
    // Writing may go on to the next pipelined request (Note [Out of memory]).
    try {
      LogAnswer(d.method, d.target, d.status, d.request_bytes, d.wire.body.size(), d.started);
      StartWrite(*c, std::move(d.wire), d.close);
    } catch (const std::bad_alloc&) {
      if ((c = Find(d.id)) != nullptr) Reject(*c, 503, "out of memory reading this request");
    }
  }
}

void HttpServer::Loop::Sweep(Clock::time_point now) {
  if (accept_paused_ && now >= accept_resume_) {
    epoll_event event = EpollEvent(EPOLLIN, kListenId);
    epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, server_.listen_fd_, &event);
    accept_paused_ = false;
  }
  std::vector<uint64_t> expired;
  for (auto& [id, c] : connections_) {
    if (c->phase != Phase::kHandling && now >= c->deadline) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    Connection& c = *Find(id);
    if (c.phase == Phase::kReading) {
      Reject(c, 408,
             absl::StrCat("the request did not arrive within ", options_.read_timeout_ms, " ms"));
    } else if (c.phase == Phase::kWriting) {
      // A client not taking its answer: drop what the kernel still holds for it too (a reset,
      // not a FIN after the rest of the answer).
      const linger abort{1, 0};
      setsockopt(c.fd, SOL_SOCKET, SO_LINGER, &abort, sizeof(abort));
      Close(c);
    } else {
      Close(c);
    }
  }
}

}  // namespace tessera
