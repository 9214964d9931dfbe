// Whole-buffer reads and writes on a socket or pipe, for the benches that measure raw TCP beside
// Tessera's own transport (net_ops, allreduce). SIGPIPE must be ignored by the program.
//
// Thread-safety: plain functions.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstddef>

namespace tessera::bench {

// Writes all `n` bytes (retrying partial writes and EINTR); false when the peer is gone.
inline bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// Reads exactly `n` bytes (retrying partial reads and EINTR); false at end of stream or error.
inline bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::read(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

}  // namespace tessera::bench
