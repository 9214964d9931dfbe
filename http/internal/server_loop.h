// HttpServer::Loop: the machinery behind HttpServer (http_server.h) — one event-loop thread that
// owns every connection, and the handler threads it hands complete requests to (Note [One loop,
// handler threads], Note [Out of memory] below). Its members are defined by job:
//   server_loop.cc      the epoll loop, accepting, deadlines, closing: a connection's lifecycle
//   connection_io.cc    a connection's bytes in (parsing, bounds, dispatch) and out (answers)
//   handler_threads.cc  the handler threads: a request in, its answer (or an error's) out
//
// Thread-safety: HttpServer::Run builds, serves and destroys a Loop on its one thread; only
// Work and Answer run on the handler threads, and they share with the loop thread only jobs_ and
// done_, under their mutexes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "http/http_request_parser.h"
#include "http/http_server.h"
#include "http/internal/response_wire.h"

namespace tessera {

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
  using Clock = std::chrono::steady_clock;
  using Wire = http_internal::Wire;

  // Ids in epoll's data: the listening socket, the wake-up eventfd, then connections.
  static constexpr uint64_t kListenId = 0;
  static constexpr uint64_t kWakeId = 1;
  static constexpr uint64_t kFirstConnectionId = 2;

  static constexpr size_t kReadChunk = size_t{64} << 10;
  // How often deadlines are checked (and so how late a timeout may fire).
  static constexpr auto kSweepInterval = std::chrono::milliseconds(50);
  // After a closing response, the input is read and dropped this long (or until the client
  // closes) so that closing with unread input does not reset the connection under the response.
  static constexpr auto kLinger = std::chrono::seconds(2);
  // Accepting stops this long when the process is out of file descriptors.
  static constexpr auto kAcceptPause = std::chrono::milliseconds(100);

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

  // server_loop.cc
  Connection* Find(uint64_t id);
  void AcceptAll();
  bool ShedIdle();
  void Refuse(int fd);
  void Close(Connection& c);
  void SetEvents(Connection& c, uint32_t events);
  void LogAnswer(absl::string_view method, absl::string_view target, int status,
                 size_t request_bytes, size_t response_bytes, Clock::time_point started);
  void TakeDone();
  void Sweep(Clock::time_point now);

  // connection_io.cc
  void OnEvent(uint64_t id, uint32_t events);
  void OnReadable(Connection& c);
  void ProcessInput(Connection& c, absl::string_view data);
  void Dispatch(Connection& c, absl::string_view rest);
  void Reject(Connection& c, int status, absl::string_view message);
  void StartWrite(Connection& c, Wire wire, bool close);
  void TryWrite(Connection& c);
  void BeginClose(Connection& c);
  void ReleaseBody(Connection& c);

  // handler_threads.cc
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

}  // namespace tessera
