#include "actors/mirrored/ring_link.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <random>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

constexpr size_t kTokenBytes = 16;  // sent as 32 hex characters
constexpr size_t kTokenChars = 2 * kTokenBytes;

absl::Status SocketError(const std::string& what) {
  return absl::UnavailableError(absl::StrCat("ring link: ", what, ": ", std::strerror(errno)));
}

std::string NewToken() {
  std::random_device device;
  std::string bytes(kTokenBytes, '\0');
  for (char& c : bytes) c = static_cast<char>(device() & 0xff);
  return absl::BytesToHexString(bytes);
}

void Configure(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void SetReceiveTimeout(int fd, absl::Duration timeout) {
  timeval tv = absl::ToTimeval(timeout);
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

// Reads exactly `size` bytes. OK; OutOfRange at a clean end before the first byte; DataLoss at an
// end after it (a truncated message); Unavailable for a socket error or timeout.
absl::Status ReadFull(int fd, void* data, size_t size) {
  char* at = static_cast<char*>(data);
  size_t done = 0;
  while (done < size) {
    const ssize_t n = recv(fd, at + done, size - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
    } else if (n == 0) {
      if (done == 0) return absl::OutOfRangeError("ring link: closed");
      return absl::DataLossError(
          absl::StrCat("ring link: truncated: ", done, " of ", size, " bytes, then the end"));
    } else if (errno != EINTR) {
      return SocketError("read");
    }
  }
  return absl::OkStatus();
}

// Writes every byte of `iov`, adjusting it as the kernel takes parts; the socket's send timeout
// is `stall`.
absl::Status WriteFull(int fd, iovec* iov, int count, absl::Duration stall) {
  while (count > 0) {
    msghdr message{};
    message.msg_iov = iov;
    message.msg_iovlen = static_cast<size_t>(count);
    ssize_t n = sendmsg(fd, &message, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        return absl::UnavailableError(
            absl::StrCat("ring link: the receiver took nothing for ", absl::FormatDuration(stall)));
      }
      return SocketError("write");
    }
    while (count > 0 && static_cast<size_t>(n) >= iov->iov_len) {
      n -= static_cast<ssize_t>(iov->iov_len);
      ++iov;
      --count;
    }
    if (count > 0) {
      iov->iov_base = static_cast<char*>(iov->iov_base) + n;
      iov->iov_len -= static_cast<size_t>(n);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RingLinkSender>> RingLinkSender::Connect(
    const std::string& host, uint16_t port, const std::string& token, absl::Duration timeout,
    absl::Duration send_timeout) {
  if (token.size() != kTokenChars) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring link: a token of ", token.size(), " characters, not ", kTokenChars));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int err = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
      err != 0) {
    return absl::UnavailableError(
        absl::StrCat("ring link: cannot resolve ", host, ": ", gai_strerror(err)));
  }
  absl::Status last = absl::UnavailableError(absl::StrCat("ring link: no address for ", host));
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last = SocketError("socket");
      continue;
    }
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0 && errno != EINPROGRESS) {
      last = SocketError(absl::StrCat("connect to ", host, ":", port));
      close(fd);
      fd = -1;
      continue;
    }
    pollfd p{fd, POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof(error);
    if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0 || error != 0) {
      if (error != 0) errno = error;
      last = error != 0 ? SocketError(absl::StrCat("connect to ", host, ":", port))
                        : absl::DeadlineExceededError(absl::StrCat("ring link: connect to ", host,
                                                                   ":", port, " timed out"));
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) return last;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  Configure(fd);
  const timeval stall = absl::ToTimeval(send_timeout);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &stall, sizeof(stall));
  std::unique_ptr<RingLinkSender> sender(new RingLinkSender(fd, send_timeout));
  iovec hello[2] = {{const_cast<char*>(kRingLinkMagic), sizeof(kRingLinkMagic)},
                    {const_cast<char*>(token.data()), token.size()}};
  if (absl::Status sent = WriteFull(fd, hello, 2, send_timeout); !sent.ok()) return sent;
  return sender;
}

RingLinkSender::~RingLinkSender() {
  if (fd_ >= 0) close(fd_);
}

absl::Status RingLinkSender::Send(int64_t collective, const RingChunk& chunk) {
  if (fd_ < 0) return absl::UnavailableError("ring link: broken earlier");
  RingLinkHeader header;
  header.collective = collective;
  header.chunk = chunk.chunk;
  header.elements = chunk.values.size();
  header.step = chunk.step;
  header.magic = kRingLinkHeaderMagic;
  const absl::Span<const float> values = chunk.values.span();
  iovec iov[2] = {{&header, sizeof(header)},
                  {const_cast<float*>(values.data()), values.size() * sizeof(float)}};
  absl::Status sent = WriteFull(fd_, iov, values.empty() ? 1 : 2, send_timeout_);
  if (!sent.ok()) {
    close(fd_);
    fd_ = -1;
  }
  return sent;
}

absl::StatusOr<std::unique_ptr<RingLinkReceiver>> RingLinkReceiver::Listen(
    const std::string& bind, int64_t max_elements, absl::Duration accept_timeout,
    ChunkHandler on_chunk, EndHandler on_end) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICHOST;
  addrinfo* found = nullptr;
  if (const int err = getaddrinfo(bind.c_str(), "0", &hints, &found); err != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring link: cannot listen on '", bind, "': ", gai_strerror(err)));
  }
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, found->ai_protocol);
  if (fd < 0) {
    freeaddrinfo(found);
    return SocketError("socket");
  }
  if (::bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 4) != 0) {
    absl::Status error = SocketError(absl::StrCat("listen on ", bind));
    freeaddrinfo(found);
    close(fd);
    return error;
  }
  freeaddrinfo(found);
  sockaddr_storage address{};
  socklen_t length = sizeof(address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  std::unique_ptr<RingLinkReceiver> receiver(new RingLinkReceiver());
  receiver->listen_fd_ = fd;
  receiver->port_ =
      ntohs(address.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&address)->sin6_port
                                          : reinterpret_cast<sockaddr_in*>(&address)->sin_port);
  receiver->token_ = NewToken();
  receiver->max_elements_ = max_elements;
  receiver->on_chunk_ = std::move(on_chunk);
  receiver->on_end_ = std::move(on_end);
  RingLinkReceiver* self = receiver.get();
  receiver->reader_ = std::thread([self, accept_timeout] { self->Run(accept_timeout); });
  return receiver;
}

RingLinkReceiver::~RingLinkReceiver() {
  // Dekker's pattern on two seq_cst atomics: either the reader sees stop_ after it published its
  // connection, or this sees the connection and wakes the read blocked on it.
  stop_ = true;
  if (const int fd = fd_.load(); fd >= 0) shutdown(fd, SHUT_RDWR);
  if (reader_.joinable()) reader_.join();
  if (fd_ >= 0) close(fd_);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void RingLinkReceiver::Run(absl::Duration accept_timeout) {
  absl::Status end = Accept(accept_timeout);
  if (end.ok()) end = ReadMessages();
  if (absl::IsOutOfRange(end) || stop_) end = absl::OkStatus();  // a clean close
  on_end_(end);
}

absl::Status RingLinkReceiver::Accept(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!stop_) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "ring link: no sender presented the token within ", absl::FormatDuration(timeout)));
    }
    pollfd p{listen_fd_, POLLIN, 0};
    const int ready =
        poll(&p, 1, static_cast<int>(std::min<int64_t>(100, absl::ToInt64Milliseconds(left) + 1)));
    if (ready <= 0) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    SetReceiveTimeout(fd, kHelloTimeout);
    char hello[sizeof(kRingLinkMagic) + kTokenChars];
    const bool good = ReadFull(fd, hello, sizeof(hello)).ok() &&
                      std::memcmp(hello, kRingLinkMagic, sizeof(kRingLinkMagic)) == 0 &&
                      std::memcmp(hello + sizeof(kRingLinkMagic), token_.data(), kTokenChars) == 0;
    if (!good) {  // a stranger, or garbage: wait for the real sender
      close(fd);
      continue;
    }
    SetReceiveTimeout(fd, absl::ZeroDuration());
    Configure(fd);
    close(listen_fd_);
    listen_fd_ = -1;
    fd_ = fd;
    return absl::OkStatus();
  }
  return absl::OkStatus();
}

absl::Status RingLinkReceiver::ReadMessages() {
  const int fd = fd_;
  while (!stop_) {
    RingLinkHeader header;
    if (absl::Status read = ReadFull(fd, &header, sizeof(header)); !read.ok()) return read;
    if (header.magic != kRingLinkHeaderMagic || header.collective < 0 || header.chunk < 0 ||
        header.step < 0 || header.elements < 0 || header.elements > max_elements_) {
      return absl::DataLossError(absl::StrCat("ring link: a malformed message header (collective ",
                                              header.collective, ", chunk ", header.chunk,
                                              ", step ", header.step, ", ", header.elements,
                                              " floats; at most ", max_elements_, ")"));
    }
    Tensor values(Shape{header.elements});
    if (header.elements > 0) {
      absl::Status read =
          ReadFull(fd, values.data(), static_cast<size_t>(header.elements) * sizeof(float));
      if (absl::IsOutOfRange(read)) {
        read = absl::DataLossError("ring link: truncated: a header, then the end");
      }
      if (!read.ok()) return read;
    }
    on_chunk_(header.collective,
              RingChunk{header.chunk, header.step, RingValues::Own(std::move(values))});
  }
  return absl::OkStatus();
}

}  // namespace tessera
