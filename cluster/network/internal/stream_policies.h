// The protocol policies the transport's connections read and write through (what
// caf::io::network::stream_impl<Policy> calls, cluster/network/internal/guarded_connection.cc):
// plain TCP, and TLS over a caf::openssl::session that keeps OpenSSL's error queue clean and says
// why a TLS call failed.
//
// Thread-safety: a policy belongs to one connection and is used on the multiplexer's thread only.
#pragma once

#include <caf/io/network/native_socket.hpp>
#include <caf/io/network/rw_state.hpp>
#include <caf/openssl/session.hpp>
#include <caf/policy/tcp.hpp>
#include <cstddef>
#include <utility>

#include <openssl/err.h>

#include "cluster/network/transport.h"

namespace tessera {
namespace transport_internal {

using caf::io::network::native_socket;
using caf::io::network::rw_state;

// What a failed TLS call means, from the first error in OpenSSL's queue (0: none, the socket
// closed). `established`: whether the TLS handshake had completed. An empty reason: a plain close.
ConnectionFailure DescribeTlsFailure(unsigned long code, bool established);

// Plain TCP: CAF's own reads and writes.
class PlainPolicy {
 public:
  static constexpr bool kTls = false;
  explicit PlainPolicy(ConnectionFailure* /*failure*/) {}
  rw_state read_some(size_t& result, native_socket fd, void* buf, size_t len) {
    return caf::policy::tcp::read_some(result, fd, buf, len);
  }
  rw_state write_some(size_t& result, native_socket fd, const void* buf, size_t len) {
    return caf::policy::tcp::write_some(result, fd, buf, len);
  }
  bool must_read_more(native_socket, size_t) { return false; }
};

// Note [OpenSSL's error queue is per thread]
// OpenSSL records why a call failed in a queue per thread, and SSL_get_error() reports an error
// for a call that merely would block when that queue is not empty. CAF 0.17's TLS session never
// clears it (the call that would is inside a log statement compiled out of Debian's build), and
// every connection of a node is served by one I/O thread: so when one TLS connection closed
// (say a worker that finished), the next read on every other one failed and closed it too —
// the coordinator lost its PS nodes at the end of a run, and each PS dropped its shards. The
// transport's TLS connections clear the queue before every OpenSSL call and read the reason of
// a failure from it right after.
class TlsPolicy {
 public:
  static constexpr bool kTls = true;
  TlsPolicy(ConnectionFailure* failure, caf::openssl::session_ptr session)
      : failure_(failure), session_(std::move(session)) {}
  rw_state read_some(size_t& result, native_socket fd, void* buf, size_t len) {
    ERR_clear_error();
    return Judge(session_->read_some(result, fd, buf, len), result);
  }
  rw_state write_some(size_t& result, native_socket fd, const void* buf, size_t len) {
    ERR_clear_error();
    return Judge(session_->write_some(result, fd, buf, len), result);
  }
  bool must_read_more(native_socket fd, size_t threshold) {
    return session_->must_read_more(fd, threshold);
  }

 private:
  rw_state Judge(rw_state state, size_t transferred) {
    if (state == rw_state::failure) {
      if (failure_->reason.empty()) *failure_ = DescribeTlsFailure(ERR_peek_error(), established_);
      ERR_clear_error();
    } else if (transferred > 0) {
      established_ = true;  // application data flows only after the TLS handshake
    }
    return state;
  }

  ConnectionFailure* failure_;
  caf::openssl::session_ptr session_;
  bool established_ = false;
};

}  // namespace transport_internal
}  // namespace tessera
