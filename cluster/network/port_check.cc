#include "cluster/network/port_check.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace tessera {
namespace {

constexpr char kListenState[] = "0A";  // TCP_LISTEN in /proc/net/tcp's "st" column

// Whether the table (/proc/net/tcp or tcp6: a header line, then one socket a line, its
// "local_address" as HEXADDR:HEXPORT and its state) has a listener on `port`; nullopt when the
// file cannot be read.
std::optional<bool> TableListensOn(const char* path, uint16_t port) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  std::getline(in, line);  // the header
  while (std::getline(in, line)) {
    const std::vector<absl::string_view> fields =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    if (fields.size() < 4 || fields[3] != kListenState) continue;
    const size_t colon = fields[1].rfind(':');
    uint32_t local_port = 0;
    if (colon != absl::string_view::npos &&
        absl::SimpleHexAtoi(fields[1].substr(colon + 1), &local_port) && local_port == port) {
      return true;
    }
  }
  return false;
}

}  // namespace

std::optional<bool> SomeoneListensOn(uint16_t port) {
  const std::optional<bool> v4 = TableListensOn("/proc/net/tcp", port);
  const std::optional<bool> v6 = TableListensOn("/proc/net/tcp6", port);
  if (!v4.has_value() && !v6.has_value()) return std::nullopt;
  return v4.value_or(false) || v6.value_or(false);
}

std::string PortTakenMessage(absl::string_view who, absl::string_view bind, uint16_t port,
                             absl::string_view how_to_change) {
  return absl::StrCat(who, " cannot listen on ", bind, ":", port,
                      ": another process listens on port ", port, " (`ss -ltnp 'sport = :", port,
                      "'` names it); ", how_to_change);
}

absl::Status CheckCanListen(absl::string_view who, const std::string& bind, uint16_t port,
                            absl::string_view how_to_change) {
  const auto cannot = [&](absl::string_view why) {
    return absl::UnavailableError(
        absl::StrCat(who, " cannot listen on ", bind, ":", port, ": ", why, "; ", how_to_change));
  };
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* addresses = nullptr;
  const std::string service = std::to_string(port);
  if (const int resolved = getaddrinfo(bind.empty() ? nullptr : bind.c_str(), service.c_str(),
                                       &hints, &addresses);
      resolved != 0) {
    return cannot(gai_strerror(resolved));
  }
  int error = 0;
  const int fd = socket(addresses->ai_family, addresses->ai_socktype | SOCK_CLOEXEC,
                        addresses->ai_protocol);
  if (fd < 0) {
    error = errno;
  } else {
    const int yes = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, addresses->ai_addr, addresses->ai_addrlen) != 0) error = errno;
    ::close(fd);
  }
  freeaddrinfo(addresses);
  if (error == 0) return absl::OkStatus();
  if (error == EADDRINUSE) {
    // A listener is another process's server: waiting will not help. Connections end by
    // themselves (nullopt: no /proc to tell; the caller's patience decides).
    if (SomeoneListensOn(port).value_or(false)) {
      return absl::UnavailableError(PortTakenMessage(who, bind, port, how_to_change));
    }
    return absl::OkStatus();
  }
  if (error == EACCES) {
    return cannot(absl::StrCat(std::strerror(error), " (ports below 1024 need privileges)"));
  }
  return cannot(std::strerror(error));
}

}  // namespace tessera
