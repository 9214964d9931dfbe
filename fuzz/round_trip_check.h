// The property every reader's fuzz target checks, shared by the three targets.
//
// An input is decoded twice: as a whole file (which exercises the envelope; random bytes almost
// never pass its checksum), and as a message body put into a valid envelope (which reaches the
// Cap'n Proto parser and the field decoders). A slice file's body ends in a tail of raw data
// (envelope.h), so for slices the input starts with the tail's size in words (4 bytes,
// little-endian) and the body follows; seeds.cc writes its seeds so. Decoding must never crash, throw or allocate more
// than the input holds (ASan and libFuzzer's -malloc_limit_mb catch that); and whatever decodes
// must encode, and that encoding must decode and encode to the same bytes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/status/statusor.h"
#include "schema/base/internal/envelope.h"

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

  uint64_t tail_bytes = 0;
  if (kind == schema_internal::FileKind::kSlice) {
    if (input.size() < 4) return 0;
    uint32_t tail_words = 0;
    std::memcpy(&tail_words, input.data(), 4);
    tail_bytes = uint64_t{tail_words} * 8;  // Seal clamps it to the body
    input.erase(0, 4);
  }
  input.resize((input.size() + 7) / 8 * 8, '\0');  // a body is whole 8-byte words
  const absl::StatusOr<T> decoded = decode(schema_internal::Seal(kind, input, tail_bytes));
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
