// A TCP listener on a free port of 127.0.0.1, closed at scope exit: another process's server, as
// far as the code under test can tell — what tests hold to make a port busy.
//
//   Listener busy;
//   CHECK(Bind("127.0.0.1", busy.port()).status().code() == absl::StatusCode::kUnavailable);
//
// Thread-safety: a Listener is used by one thread.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tessera::testing {

class Listener {
 public:
  Listener() : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(addr);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(listen(fd_, 4) == 0);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

}  // namespace tessera::testing
