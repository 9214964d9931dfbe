// ConnectionGuard on byte strings: BASP headers built here the way CAF writes them (32 bytes,
// network byte order), so every limit is checked without a socket.
#include "cluster/network/connection_guard.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/types/span.h"

namespace tessera {
namespace {

constexpr uint8_t kServerHandshake = 0x00;
constexpr uint8_t kClientHandshake = 0x01;
constexpr uint8_t kDirectMessage = 0x02;
constexpr uint8_t kHeartbeat = 0x06;

// A BASP header: operation, two padding bytes, flags, payload length, operation data, source
// and destination actor (the last three zero here).
std::string Header(uint8_t operation, uint32_t payload_bytes) {
  std::string out(kBaspHeaderBytes, '\0');
  out[0] = static_cast<char>(operation);
  for (int i = 0; i < 4; ++i) {
    out[4 + i] = static_cast<char>((payload_bytes >> (8 * (3 - i))) & 0xFF);
  }
  return out;
}

absl::Span<const char> Bytes(const std::string& s) { return absl::MakeConstSpan(s); }

constexpr ConnectionLimits kLimits{/*max_message_bytes=*/1 << 20,
                                   /*max_handshake_bytes=*/64 << 10};

TEST_CASE("connection guard: a forged header announcing 4 GiB is refused before anything is read") {
  ConnectionGuard guard(kLimits, /*tls=*/false);
  const absl::Status status = guard.Screen(Bytes(Header(kClientHandshake, 0xFFFFFFF0u)));
  CHECK(status.code() == absl::StatusCode::kResourceExhausted);
  CHECK_MESSAGE(absl::StrContains(status.message(), "4294967280 bytes"), status);
  CHECK_MESSAGE(absl::StrContains(status.message(), "65536 bytes before the version handshake"),
                status);
}

TEST_CASE("connection guard: before admission a message may be 64 KiB, after it max_message_bytes") {
  ConnectionGuard guard(kLimits, /*tls=*/false);
  // The BASP handshake fits, and its payload is recognised as one.
  REQUIRE(guard.Screen(Bytes(Header(kServerHandshake, 200))).ok());
  CHECK(guard.awaited_payload_bytes() == 200);
  REQUIRE(guard.Screen(Bytes(std::string(200, 'x'))).ok());
  CHECK(guard.last_was_handshake_payload());
  CHECK(guard.expects_header());
  // Exactly the limit passes; one byte more does not.
  CHECK(guard.Screen(Bytes(Header(kDirectMessage, 64 << 10))).ok());
  REQUIRE(guard.Screen(Bytes(std::string(16, 'x'))).ok());  // its payload (BASP checks its size)
  CHECK_FALSE(guard.last_was_handshake_payload());
  CHECK(guard.Screen(Bytes(Header(kDirectMessage, (64 << 10) + 1))).code() ==
        absl::StatusCode::kResourceExhausted);

  ConnectionGuard admitted(kLimits, /*tls=*/false);
  admitted.Admit();
  CHECK(admitted.Screen(Bytes(Header(kDirectMessage, 1 << 20))).ok());
  CHECK(admitted.awaited_payload_bytes() == (1u << 20));
  REQUIRE(admitted.Screen(Bytes(std::string(8, 'x'))).ok());
  const absl::Status over = admitted.Screen(Bytes(Header(kDirectMessage, (1 << 20) + 1)));
  CHECK(over.code() == absl::StatusCode::kResourceExhausted);
  CHECK_MESSAGE(absl::StrContains(over.message(), "--max_message_bytes"), over);
}

TEST_CASE("connection guard: headers without a payload pass, and so does what BASP itself refuses") {
  ConnectionGuard guard(kLimits, /*tls=*/false);
  CHECK(guard.Screen(Bytes(Header(kHeartbeat, 0))).ok());
  CHECK(guard.expects_header());
  CHECK(guard.awaited_payload_bytes() == 0);
  // An unknown operation with a small length is BASP's to refuse (it closes the connection).
  CHECK(guard.Screen(Bytes(Header(0x7F, 10))).ok());
}

TEST_CASE("connection guard: a TLS hello to a plain-TCP node is named as such") {
  ConnectionGuard plain(kLimits, /*tls=*/false);
  std::string hello = Header(0x16, 0);
  hello[1] = 0x03;
  const absl::Status status = plain.Screen(Bytes(hello));
  CHECK(status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(absl::StrContains(status.message(), "speaks TLS and this node plain TCP"), status);

  // Only the first bytes of a connection can be a TLS hello; later, 0x16 0x03 is just a header
  // of an unknown operation (BASP refuses it).
  ConnectionGuard later(kLimits, /*tls=*/false);
  REQUIRE(later.Screen(Bytes(Header(kHeartbeat, 0))).ok());
  CHECK(later.Screen(Bytes(hello)).ok());
}

}  // namespace
}  // namespace tessera
