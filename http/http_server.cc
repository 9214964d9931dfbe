#include "http/http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <list>
#include <memory>
#include <new>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

// Ids in epoll's data: the listening socket, the wake-up eventfd, then connections.
constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
constexpr uint64_t kFirstConnectionId = 2;

constexpr size_t kReadChunk = size_t{64} << 10;
// How often deadlines are checked (and so how late a timeout may fire).
constexpr auto kSweepInterval = std::chrono::milliseconds(50);
// After a closing response, the input is read and dropped this long (or until the client closes)
// so that closing with unread input does not reset the connection under the response.
constexpr auto kLinger = std::chrono::seconds(2);
// Accepting stops this long when the process is out of file descriptors.
constexpr auto kAcceptPause = std::chrono::milliseconds(100);

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return status < 400 ? "OK" : "Error";
  }
}

// The status line and headers of `response`, with Content-Length and, when `close`,
// "Connection: close".
std::string ResponseHead(const HttpResponse& response, bool close) {
  std::string head = absl::StrCat("HTTP/1.1 ", response.status, " ", Reason(response.status),
                                  "\r\nContent-Type: ", response.content_type,
                                  "\r\nContent-Length: ", response.body.size(), "\r\n");
  for (const auto& [name, value] : response.headers)
    absl::StrAppend(&head, name, ": ", value, "\r\n");
  if (close) head += "Connection: close\r\n";
  head += "\r\n";
  return head;
}

// An answer on its way out: the head and the body, sent together with one sendmsg.
struct Wire {
  std::string head;
  std::string body;
  size_t sent = 0;

  size_t size() const { return head.size() + body.size(); }
};

// A diagnostic that never throws: it may be written while memory is short.
template <typename... Args>
void Warn(spdlog::format_string_t<Args...> format, Args&&... args) noexcept {
  try {
    Log().warn(format, std::forward<Args>(args)...);
  } catch (...) {
  }
}
template <typename... Args>
void Debug(spdlog::format_string_t<Args...> format, Args&&... args) noexcept {
  try {
    Log().debug(format, std::forward<Args>(args)...);
  } catch (...) {
  }
}

HttpResponse ErrorResponse(int status, std::string body) {
  HttpResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

epoll_event EpollEvent(uint32_t events, uint64_t id) {
  epoll_event event{};
  event.events = events;
  event.data.u64 = id;
  return event;
}

Wire ResponseWire(HttpResponse response, bool head_only, bool close) {
  Wire wire;
  wire.head = ResponseHead(response, close);
  if (!head_only) wire.body = std::move(response.body);
  return wire;
}

}  // namespace

// Note [One loop, handler threads]: the loop thread owns every connection (its socket, parser,
// buffers, deadline) and is the only one to touch them; a complete request is moved to a handler
// thread with the connection's id, and the answer comes back by id through `done_` and the
// eventfd. A connection closed meanwhile (its client gone, the server stopping) simply finds no
// one to take the answer. Nothing blocks the loop but epoll_wait, so no client can stall another,
// and the handler threads only ever see complete, bounded requests.
//
// Note [Out of memory]: running out of memory costs one request a 503, never the process. On the
// loop thread, a std::bad_alloc (reading a request, queueing it, writing an answer) is caught
// around each event and answers that connection 503 and closes it. On a handler thread, where a
// request's real work and memory are, it is caught at the handler's boundary (Answer), after
// which the request's memory is freed before the 503 is made. What runs between the failure and
// the answer does not allocate: a handler thread hands its answer back by splicing a list node
// the loop allocated with the job, and diagnostics there swallow their own failures. Handlers
// must not hold a JSON tree that grows with the request either: nlohmann's destructor allocates
// (it flattens a tree into a vector), and a destructor that throws while an exception unwinds
// ends the process (so ModelService writes its predictions a batch at a time).
//
// A handler thread also takes its allocator arena when it starts, not at its first request.
// glibc gives each thread an arena on its first allocation, reserving 64 MiB (twice that while
// aligning) of address space for it; a thread whose first request comes when memory is already
// short gets no arena, and glibc then serves each of its allocations, however small, with an
// mmap of its own: a large request then takes minutes instead of running out of memory at once.
class HttpServer::Loop {
 public:
  explicit Loop(HttpServer& server);
  ~Loop();

  absl::Status Serve();

 private:
  enum class Phase {
    kIdle,      // between requests (or before the first): idle deadline
    kReading,   // part of a request has arrived: read deadline
    kHandling,  // a request is with a handler thread: no deadline, no reading
    kWriting,   // an answer is going out: write deadline
    kClosing,   // the answer is out and the connection closing: linger deadline
  };
  struct Connection {
    Connection(int fd, uint64_t id, HttpRequestLimits limits) : fd(fd), id(id), parser(limits) {}
    int fd;
    uint64_t id;
    Phase phase = Phase::kIdle;
    HttpRequestParser parser;
    std::string pending;  // bytes read past the request being handled (pipelined requests)
    Wire out;
    bool close_after_write = false;
    bool continue_sent = false;
    size_t budgeted = 0;  // body bytes of this connection counted in body_bytes_
    Clock::time_point deadline;
    Clock::time_point idle_since;
    Clock::time_point started;  // the current request's first byte
    uint32_t events = 0;
  };
  struct Done {
    uint64_t id = 0;
    Wire wire;
    bool close = false;
    size_t budgeted = 0;
    bool failed = false;  // no answer could be made: close
    // For the request log (set only with one).
    int status = 0;
    std::string method;
    std::string target;
    size_t request_bytes = 0;
    Clock::time_point started;
  };
  struct Job {
    uint64_t id;
    HttpRequest request;
    size_t budgeted;
    // The answer's place in done_, allocated with the job on the loop thread, so that a handler
    // thread hands it over without allocating (Note [Out of memory]).
    std::list<Done> answer;
  };

  Connection* Find(uint64_t id);
  void AcceptAll();
  bool ShedIdle();
  void Refuse(int fd);
  void OnEvent(uint64_t id, uint32_t events);
  void OnReadable(Connection& c);
  void ProcessInput(Connection& c, absl::string_view data);
  void Dispatch(Connection& c, absl::string_view rest);
  void Reject(Connection& c, int status, absl::string_view message);
  void StartWrite(Connection& c, Wire wire, bool close);
  void TryWrite(Connection& c);
  void BeginClose(Connection& c);
  void Close(Connection& c);
  void ReleaseBody(Connection& c);
  void SetEvents(Connection& c, uint32_t events);
  void LogAnswer(absl::string_view method, absl::string_view target, int status,
                 size_t request_bytes, size_t response_bytes, Clock::time_point started);
  void TakeDone();
  void Sweep(Clock::time_point now);

  void Work();
  void Answer(Job& job);

  HttpServer& server_;
  const HttpServerOptions& options_;
  const HttpRequestLimits limits_;
  const size_t body_budget_;
  int epoll_fd_ = -1;
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> connections_;
  uint64_t next_id_ = kFirstConnectionId;
  size_t body_bytes_ = 0;  // request body bytes held: arriving, queued or being handled
  bool accept_paused_ = false;
  Clock::time_point accept_resume_;
  std::unique_ptr<char[]> read_buffer_;

  std::vector<std::thread> workers_;
  std::mutex jobs_mutex_;
  std::condition_variable jobs_ready_;
  std::deque<Job> jobs_;        // guarded by jobs_mutex_
  bool shutting_down_ = false;  // guarded by jobs_mutex_
  std::mutex done_mutex_;
  std::list<Done> done_;  // guarded by done_mutex_
};

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

void HttpServer::Loop::Work() {
  // Note [Out of memory]: the thread's arena, while memory is plentiful. The volatile pointer
  // keeps the compiler from removing the pair.
  void* volatile arena_claim = std::malloc(1);
  std::free(arena_claim);
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(jobs_mutex_);
      jobs_ready_.wait(lock, [&] { return shutting_down_ || !jobs_.empty(); });
      if (shutting_down_) return;  // queued requests' connections are being closed anyway
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    Answer(job);
    {
      std::lock_guard<std::mutex> lock(done_mutex_);
      done_.splice(done_.end(), job.answer);
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(server_.wake_fd_, &one, sizeof(one));
  }
}

void HttpServer::Loop::Answer(Job& job) {
  Done& done = job.answer.front();
  done.id = job.id;
  done.close = !job.request.keep_alive;
  done.budgeted = job.budgeted;
  const bool head_only = job.request.method == "HEAD";
  // Note [Out of memory]: an allocation that fails anywhere in the handler unwinds to here, where
  // nothing allocates until the request's memory is gone.
  int status = 500;
  std::exception_ptr error;
  try {
    HttpResponse response = server_.handler_(job.request);
    job.request = HttpRequest();
    done.status = response.status;
    done.wire = ResponseWire(std::move(response), head_only, done.close);
    return;
  } catch (const std::bad_alloc&) {
    status = 503;
  } catch (...) {
    error = std::current_exception();
  }
  job.request.body = std::string();
  try {
    std::string message = "out of memory answering this request";
    if (status != 503) {
      message = "internal error";
      try {
        std::rethrow_exception(error);
      } catch (const std::exception& e) {
        message = absl::StrCat("internal error: ", e.what());
      } catch (...) {
      }
    }
    done.status = status;
    done.wire = ResponseWire(ErrorResponse(status, server_.error_body_(status, message)), head_only,
                             done.close);
    Warn("http: {} {}: answered {}: {}", job.request.method, job.request.path, status, message);
  } catch (...) {
    done.failed = true;  // not even an error fits: the connection is closed
  }
}

HttpServer::HttpServer(Handler handler, ErrorBody error_body, HttpServerOptions options)
    : handler_(std::move(handler)), error_body_(std::move(error_body)), options_(options) {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
}

HttpServer::~HttpServer() {
  Stop();
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

absl::StatusOr<int> HttpServer::Bind(const std::string& host, int port) {
  const auto at_least = [](int value, int min, const char* name) {
    return value >= min ? absl::OkStatus()
                        : absl::InvalidArgumentError(
                              absl::StrCat(name, " must be at least ", min, ", got ", value));
  };
  for (absl::Status status : {at_least(options_.max_connections, 1, "max_connections"),
                              at_least(options_.read_timeout_ms, 1, "read_timeout_ms"),
                              at_least(options_.idle_timeout_ms, 1, "idle_timeout_ms"),
                              at_least(options_.write_timeout_ms, 1, "write_timeout_ms"),
                              at_least(options_.threads, 0, "threads"),
                              at_least(options_.listen_backlog, 1, "listen_backlog")}) {
    if (!status.ok()) return status;
  }
  if (wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("eventfd: ", std::strerror(errno)));
  }
  const std::string where = absl::StrCat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const int resolved = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &addresses);
  if (resolved != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", where, ": ", gai_strerror(resolved)));
  }
  int error = 0;
  int fd = -1;
  for (addrinfo* a = addresses; a != nullptr; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    // SO_REUSEADDR (not SO_REUSEPORT): a restart may bind while old connections linger in
    // TIME_WAIT, but a port another server holds is an error rather than shared traffic.
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (bind(fd, a->ai_addr, a->ai_addrlen) == 0 && listen(fd, options_.listen_backlog) == 0) {
      break;
    }
    error = errno;
    ::close(fd);
    fd = -1;
  }
  freeaddrinfo(addresses);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", where, ": ", std::strerror(error != 0 ? error : EINVAL)));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = fd;
  return bound_port;
}

absl::Status HttpServer::Run() {
  if (listen_fd_ < 0) return absl::FailedPreconditionError("HttpServer::Run before Bind");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stop_requested_) return absl::OkStatus();
    running_ = true;
  }
  absl::Status status;
  {
    Loop loop(*this);
    status = loop.Serve();
  }  // the handler threads are joined and the connections closed here
  ::close(listen_fd_);  // new connections are refused rather than left waiting
  listen_fd_ = -1;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = false;
  }
  stopped_.notify_all();
  return status;
}

void HttpServer::Stop() {
  std::unique_lock<std::mutex> lock(mutex_);
  stop_requested_ = true;
  stop_flag_ = true;
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t written = ::write(wake_fd_, &one, sizeof(one));
  }
  stopped_.wait(lock, [&] { return !running_; });
}

}  // namespace tessera
