// A bare HTTP/1.1 client on a TCP socket for the serving tests: it sends exactly the bytes it is
// given (a byte at a time, pipelined, malformed) and reads responses with a deadline, so a test
// can behave like a careless or hostile client and still never hang.
//
//   RawConnection c(port);
//   c.Send(HttpPost("/v1/models/m:predict", R"({"instances": [1]})"));
//   std::optional<RawResponse> r = c.Read(std::chrono::seconds(5));
//
// Thread-safety: a connection is used by one thread.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace tessera::testing {

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
};

// A POST of `body` with Content-Length; `extra` header lines end in "\r\n".
inline std::string HttpPost(absl::string_view path, absl::string_view body,
                            absl::string_view extra = "") {
  return absl::StrCat("POST ", path,
                      " HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n", extra,
                      "Content-Length: ", body.size(), "\r\n\r\n", body);
}

class RawConnection {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RawConnection(int port) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd_ >= 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_port = htons(static_cast<uint16_t>(port));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
    const int one = 1;
    setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  ~RawConnection() {
    if (fd_ >= 0) close(fd_);
  }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  // False when the server has closed the connection.
  bool Send(absl::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  // The next response, or nullopt when the connection closes or `timeout` passes first. The head
  // of a 1xx response is returned like any other (with no body); `head_only`: the answer to a
  // HEAD, whose Content-Length has no body behind it.
  std::optional<RawResponse> Read(std::chrono::milliseconds timeout, bool head_only = false) {
    const Clock::time_point deadline = Clock::now() + timeout;
    size_t head_end;
    while ((head_end = buffer_.find("\r\n\r\n")) == std::string::npos) {
      if (!Fill(deadline)) return std::nullopt;
    }
    RawResponse response;
    const std::vector<absl::string_view> lines =
        absl::StrSplit(absl::string_view(buffer_).substr(0, head_end), "\r\n");
    const std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], ' ');
    if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &response.status)) {
      return std::nullopt;
    }
    for (size_t i = 1; i < lines.size(); ++i) {
      const size_t colon = lines[i].find(':');
      if (colon == absl::string_view::npos) continue;
      response.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    size_t length = 0;
    if (!head_only && response.status >= 200 && response.headers.count("content-length") != 0 &&
        !absl::SimpleAtoi(response.headers["content-length"], &length)) {
      return std::nullopt;
    }
    const size_t body_start = head_end + 4;
    while (buffer_.size() < body_start + length) {
      if (!Fill(deadline)) return std::nullopt;
    }
    response.body = buffer_.substr(body_start, length);
    buffer_.erase(0, body_start + length);
    return response;
  }

  // True when the server closes the connection (EOF or reset) within `timeout`; what it sends
  // meanwhile is read and dropped.
  bool ClosedWithin(std::chrono::milliseconds timeout) {
    const Clock::time_point deadline = Clock::now() + timeout;
    while (Fill(deadline)) buffer_.clear();
    return closed_;
  }

  // Bytes read past the responses returned so far.
  const std::string& unread() const { return buffer_; }
  int fd() const { return fd_; }

 private:
  // Reads what arrives before `deadline` into buffer_; false at EOF, error or the deadline.
  bool Fill(Clock::time_point deadline) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char chunk[1 << 16];
    const ssize_t n = recv(fd_, chunk, sizeof(chunk), 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  std::string buffer_;
  bool closed_ = false;
};

}  // namespace tessera::testing
