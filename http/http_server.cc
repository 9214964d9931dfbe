#include "http/http_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "http/internal/server_loop.h"

namespace tessera {

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
