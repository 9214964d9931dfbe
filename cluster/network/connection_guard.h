// ConnectionGuard: what one network connection's peer may make this node allocate, decided from
// the BASP headers (CAF's wire protocol) before CAF's BASP broker sees them. The transport
// (cluster/network/transport.h) runs one per connection and closes the connection when it says no.
//
// BASP frames every message as a 32-byte header followed by the payload it announces; CAF 0.17
// sizes its read buffer from the header's payload length alone, so 32 forged bytes announcing
// 4 GiB made a node allocate 4 GiB (Note [Allocation follows bytes the guard allowed],
// cluster/network/internal/guarded_connection.cc). The guard allows a payload of at most
//   - max_handshake_bytes until the peer is admitted (it has completed Tessera's version
//     handshake with this node: NodeGate's hello; BASP's own handshake messages come before
//     that and are tiny), and
//   - max_message_bytes afterwards (every node of a cluster is configured alike:
//     --max_message_bytes).
// It also recognises a TLS handshake sent to a node speaking plain TCP, so that mismatch is
// named rather than reported as a malformed message.
//
// Example (what the transport's connection does with each complete read):
//   ConnectionGuard guard(limits, /*tls=*/false);
//   absl::Status ok = guard.Screen(bytes);  // a header, then the payload it announced, ...
//   if (!ok.ok()) { ... close the connection, log ok.message() ... }
//   if (guard.last_was_handshake_payload()) { ... learn the peer's node id from `bytes` ... }
//
// Thread-safety: none; one connection's reads come from one thread (CAF's multiplexer).
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace tessera {

// The size of a BASP header on the wire (caf/io/basp/header.hpp: header_size).
inline constexpr size_t kBaspHeaderBytes = 32;

struct ConnectionLimits {
  uint64_t max_message_bytes = uint64_t{1} << 30;  // a payload of an admitted peer
  uint64_t max_handshake_bytes = 64 << 10;         // a payload before the peer is admitted
};

class ConnectionGuard {
 public:
  ConnectionGuard(ConnectionLimits limits, bool tls) : limits_(limits), tls_(tls) {}

  // Screens one complete read: a BASP header while one is expected, otherwise the payload the
  // last header announced. OK, or
  //   - ResourceExhausted when a header announces a payload above the peer's limit;
  //   - FailedPrecondition when a plain-TCP node's first bytes are a TLS handshake.
  // The connection must be closed after an error; the message names the sizes or the mismatch.
  absl::Status Screen(absl::Span<const char> bytes);

  // The peer completed the version handshake: max_message_bytes applies from now on.
  void Admit() { admitted_ = true; }
  bool admitted() const { return admitted_; }

  // Whether the read just screened was the payload of a BASP handshake message (its first
  // field is the peer's node id).
  bool last_was_handshake_payload() const { return last_was_handshake_payload_; }
  // Whether the next read is a header (not the payload of the last one).
  bool expects_header() const { return !expect_payload_; }
  // The payload size the last accepted header announced (0 when none is awaited).
  uint32_t awaited_payload_bytes() const { return expect_payload_ ? payload_bytes_ : 0; }

 private:
  ConnectionLimits limits_;
  bool tls_;
  bool admitted_ = false;
  bool seen_bytes_ = false;
  bool expect_payload_ = false;
  bool last_was_handshake_payload_ = false;
  uint8_t operation_ = 0;
  uint32_t payload_bytes_ = 0;
};

}  // namespace tessera
