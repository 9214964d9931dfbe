#include "cluster/network/connection_guard.h"

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

// BASP 0.17's message types (caf/io/basp/message_type.hpp): the first byte of a header.
constexpr uint8_t kServerHandshake = 0x00;
constexpr uint8_t kClientHandshake = 0x01;

// The payload length: bytes 4..7 of a header, in network byte order.
uint32_t PayloadLength(absl::Span<const char> header) {
  uint32_t out = 0;
  for (size_t i = 4; i < 8; ++i) out = (out << 8) | static_cast<uint8_t>(header[i]);
  return out;
}

// A TLS record starts with its content type (22: handshake, 21: alert) and major version 3.
bool LooksLikeTls(absl::Span<const char> bytes) {
  return bytes.size() >= 2 &&
         (static_cast<uint8_t>(bytes[0]) == 22 || static_cast<uint8_t>(bytes[0]) == 21) &&
         static_cast<uint8_t>(bytes[1]) == 3;
}

}  // namespace

absl::Status ConnectionGuard::Screen(absl::Span<const char> bytes) {
  const bool first = !seen_bytes_;
  seen_bytes_ = true;
  last_was_handshake_payload_ = false;
  if (expect_payload_) {
    expect_payload_ = false;
    last_was_handshake_payload_ =
        operation_ == kServerHandshake || operation_ == kClientHandshake;
    return absl::OkStatus();
  }
  if (first && !tls_ && LooksLikeTls(bytes)) {
    return absl::FailedPreconditionError(
        "the peer speaks TLS and this node plain TCP: every node of a cluster needs "
        "--tls_cert, --tls_key and --tls_ca, or none does");
  }
  // BASP reads a header as exactly kBaspHeaderBytes; anything else is not ours to judge.
  if (bytes.size() != kBaspHeaderBytes) return absl::OkStatus();
  const uint32_t length = PayloadLength(bytes);
  if (length == 0) return absl::OkStatus();
  const uint64_t limit = admitted_ ? limits_.max_message_bytes : limits_.max_handshake_bytes;
  if (length > limit) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "it announced a message of ", length, " bytes; the limit is ", limit, " bytes",
        admitted_ ? " (--max_message_bytes)"
                  : " before the version handshake (a peer that has not said hello)"));
  }
  expect_payload_ = true;
  operation_ = static_cast<uint8_t>(bytes[0]);
  payload_bytes_ = length;
  return absl::OkStatus();
}

}  // namespace tessera
