// Whether a node can listen on its port (cluster/network/port_check.h): a listener of another
// process is found and named with the way to change the port; a port held only by a connection is
// not an error (it frees itself); an address that is not this machine's is named with the reason.
#include "cluster/network/port_check.h"

#include <doctest/doctest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace tessera {
namespace {

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

// A TCP socket on 127.0.0.1, bound to `port` (0: any), closed at scope exit.
class Socket {
 public:
  explicit Socket(uint16_t port = 0) : fd_(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in addr = Loopback(port);
    REQUIRE(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~Socket() { close(fd_); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  static sockaddr_in Loopback(uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    return addr;
  }
  uint16_t port() const {
    sockaddr_in addr{};
    socklen_t length = sizeof(addr);
    REQUIRE(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
    return ntohs(addr.sin_port);
  }
  void Listen() { REQUIRE(listen(fd_, 4) == 0); }
  void ConnectTo(uint16_t port) {
    sockaddr_in addr = Loopback(port);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }

 private:
  int fd_;
};

constexpr char kHow[] = "start tessera ps with another --port";

TEST_CASE("port check: a listener of another process is found, named, with how to move") {
  Socket server;
  const uint16_t port = server.port();
  CHECK(SomeoneListensOn(port) == std::optional<bool>(false));  // bound, not listening
  server.Listen();
  CHECK(SomeoneListensOn(port) == std::optional<bool>(true));

  const absl::Status taken = CheckCanListen("ps 0", "127.0.0.1", port, kHow);
  CHECK(taken.code() == absl::StatusCode::kUnavailable);
  CHECK(taken.message() ==
        absl::StrCat("ps 0 cannot listen on 127.0.0.1:", port, ": another process listens on "
                     "port ", port, " (`ss -ltnp 'sport = :", port, "'` names it); ", kHow));
  // Every interface conflicts with a loopback listener too.
  CHECK_MESSAGE(Contains(CheckCanListen("ps 0", "0.0.0.0", port, kHow).message(),
                         "another process listens on port"),
                CheckCanListen("ps 0", "0.0.0.0", port, kHow));
}

TEST_CASE("port check: a free port, and one held only by a connection, are not errors") {
  uint16_t free_port = 0;
  {
    Socket probe;
    free_port = probe.port();
  }
  CHECK(CheckCanListen("the coordinator", "127.0.0.1", free_port, kHow).ok());
  CHECK(SomeoneListensOn(free_port) == std::optional<bool>(false));

  // A client socket bound to a port (without SO_REUSEADDR, as an outgoing connection's local
  // port is) and connected elsewhere: binding the port fails, but nobody listens on it.
  Socket server;
  server.Listen();
  Socket client;
  const uint16_t held = client.port();
  client.ConnectTo(server.port());
  CHECK(SomeoneListensOn(held) == std::optional<bool>(false));
  CHECK(CheckCanListen("the coordinator", "127.0.0.1", held, kHow).ok());
}

TEST_CASE("port check: an address that is not this machine's is named with the reason") {
  // 192.0.2.1 is TEST-NET-1 (RFC 5737): never an address of this machine.
  const absl::Status status = CheckCanListen("tessera serve", "192.0.2.1", 8501,
                                             "give tessera serve another --port (or --host)");
  CHECK(status.code() == absl::StatusCode::kUnavailable);
  CHECK_MESSAGE(Contains(status.message(), "tessera serve cannot listen on 192.0.2.1:8501: "),
                status);
  CHECK_MESSAGE(Contains(status.message(), "; give tessera serve another --port (or --host)"),
                status);
  const absl::Status unresolved = CheckCanListen("ps 0", "no-such-host.invalid", 7733, kHow);
  CHECK(unresolved.code() == absl::StatusCode::kUnavailable);
  CHECK_MESSAGE(Contains(unresolved.message(), "ps 0 cannot listen on no-such-host.invalid:7733"),
                unresolved);
}

}  // namespace
}  // namespace tessera
