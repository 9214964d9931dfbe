// The property every reader's fuzz target checks, shared by the three targets.
//
// An input is decoded twice: as a whole file (which exercises the envelope; random bytes almost
// never pass its checksum), and as a message body put into a valid envelope (which reaches the
// Cap'n Proto parser and the field decoders). Decoding must never crash, throw or allocate more
// than the input holds (ASan and libFuzzer's -malloc_limit_mb catch that); and whatever decodes
// must encode, and that encoding must decode and encode to the same bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/statusor.h"
#include "schema/internal/envelope.h"

namespace tessera {
namespace fuzz {

template <typename T>
using Decoder = absl::StatusOr<T> (*)(const std::string&);
template <typename T>
using Encoder = absl::StatusOr<std::string> (*)(const T&);

[[noreturn]] inline void Fail(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "round trip property violated: %s: %s\n", what, status.ToString().c_str());
  std::abort();
}

template <typename T>
int CheckReader(const uint8_t* data, size_t size, schema_internal::FileKind kind, Decoder<T> decode,
                Encoder<T> encode) {
  std::string input(reinterpret_cast<const char*>(data), size);
  (void)decode(input);

  input.resize((input.size() + 7) / 8 * 8, '\0');  // a body is whole 8-byte words
  const absl::StatusOr<T> decoded = decode(schema_internal::Seal(kind, input));
  if (!decoded.ok()) return 0;
  const absl::StatusOr<std::string> bytes = encode(*decoded);
  if (!bytes.ok()) Fail("a decoded value does not encode", bytes.status());
  const absl::StatusOr<T> again = decode(*bytes);
  if (!again.ok()) Fail("an encoding does not decode", again.status());
  const absl::StatusOr<std::string> bytes_again = encode(*again);
  if (!bytes_again.ok()) Fail("a decoded value does not encode", bytes_again.status());
  if (*bytes_again != *bytes) Fail("decode(encode(x)) encodes differently", absl::OkStatus());
  return 0;
}

}  // namespace fuzz
}  // namespace tessera
