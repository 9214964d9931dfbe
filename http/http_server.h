// HttpServer: a small HTTP/1.1 server whose cost is bounded whatever its clients do — what
// `tessera serve` puts a ModelService on (model_server.h).
//
//   HttpServer server([](const HttpRequest& r) { return HttpResponse{200, "{}"}; },
//                     [](int status, absl::string_view why) { return ErrorBody(why); },
//                     HttpServerOptions{});
//   TESSERA_ASSIGN_OR_RETURN(int port, server.Bind("127.0.0.1", 0));   // 0: any free port
//   std::thread thread([&] { server.Run(); });                   // serves until Stop
//   ...
//   server.Stop();
//   thread.join();
//
// One event-loop thread (epoll) accepts, reads and writes every connection without blocking;
// `threads` handler threads run the handler on complete requests only, so a slow or idle client
// holds a socket and a few buffers, never a thread. A connection has one request in the handler
// at a time; pipelined requests wait in the socket and are answered in order. Each response goes
// out in one write (and TCP_NODELAY is set), so keep-alive requests do not wait for delayed ACKs.
//
// Bounds (HttpServerOptions), each answered with the error body of `error_body` and a close:
//   - a request (head and body) must arrive within read_timeout_ms of its first byte (408);
//   - a keep-alive connection idle for idle_timeout_ms is closed; a response not taken by the
//     client within write_timeout_ms is dropped with its connection;
//   - at most max_connections are open: a new one closes the longest idle keep-alive connection,
//     and when none is idle it is answered 503;
//   - heads over max_head_bytes (414, 431), bodies over max_body_bytes (413, before reading them),
//     and request bodies held at once over kBodyBudgetFactor * max_body_bytes (503);
//   - the handler's exceptions are answered 500, and std::bad_alloc (anywhere in a request's
//     life: reading it, handling it, writing the answer) 503, closing only that connection.
// With options.request_log, every answer (the server's own errors included) is a line of it
// (request_log.h), recorded by the loop thread.
// Headers a handler does not know about (Range, ...) are ignored: a response is what the handler
// returns.
//
// Thread-safety: Bind, then Run on one thread; Stop may be called from any thread at any time
// (before Run too: Run then returns at once) and returns once Run has. The handler and
// error_body are called from the handler threads concurrently.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "http/http_request_parser.h"
#include "http/request_log.h"

namespace tessera {

struct HttpResponse {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;  // extra ones, e.g. {"Allow", "POST"}
};

struct HttpServerOptions {
  size_t max_body_bytes = size_t{64} << 20;
  size_t max_head_bytes = size_t{16} << 10;
  int max_connections = 1024;
  int read_timeout_ms = 30'000;   // one whole request, from its first byte
  int idle_timeout_ms = 60'000;   // a keep-alive connection between requests
  int write_timeout_ms = 30'000;  // one whole response
  int threads = 0;                // handler threads; 0: one per core
  int listen_backlog = 1024;
  RequestLog* request_log = nullptr;  // not owned; must outlive the server's Run
};

class HttpServer {
 public:
  // Request bodies held at once (arriving or being handled) total at most this many times
  // max_body_bytes.
  static constexpr size_t kBodyBudgetFactor = 4;

  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  // The body of an error the server answers itself (400, 408, 413, 500, 503, ...).
  using ErrorBody = std::function<std::string(int status, absl::string_view message)>;

  HttpServer(Handler handler, ErrorBody error_body, HttpServerOptions options);
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;
  ~HttpServer();

  // Listens on host:port (port 0: a free port) and returns the port. Unavailable when the address
  // cannot be bound (in use, not local); InvalidArgument for options out of range.
  absl::StatusOr<int> Bind(const std::string& host, int port);
  // Serves until Stop, once per Bind. FailedPrecondition without one.
  absl::Status Run();
  // Makes Run return (waiting until it has) and closes the listening socket and every connection;
  // requests in a handler finish first. Not from a handler (it would wait for itself).
  void Stop();

 private:
  class Loop;

  const Handler handler_;
  const ErrorBody error_body_;
  const HttpServerOptions options_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // an eventfd: Stop and finished requests wake the loop

  std::mutex mutex_;
  std::condition_variable stopped_;
  bool stop_requested_ = false;  // guarded by mutex_
  bool running_ = false;         // guarded by mutex_
  std::atomic<bool> stop_flag_{false};
};

}  // namespace tessera
