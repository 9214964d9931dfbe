// The frame around every Tessera file (slice, manifest, exported model): a 24-byte header naming
// the kind of file, the body's size and the body's CRC-32, followed by the body (one Cap'n Proto
// message, a whole number of 8-byte words).
//
//   bytes  0..7   magic, e.g. "TSRSLICE" (one per FileKind)
//   bytes  8..15  body size in bytes, little-endian uint64
//   bytes 16..19  zlib's CRC-32 of the body, little-endian
//   bytes 20..23  zero (reserved)
//   bytes 24..    the body
//
// See Note [Checksums] in field_codec.cc for why there is a CRC here as well as per data chunk.
// No Cap'n Proto types appear here: tests and fuzzers use this header to reseal forged bodies.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {
namespace schema_internal {

enum class FileKind { kSlice, kManifest, kModel };

inline constexpr size_t kEnvelopeHeaderBytes = 24;

// zlib's CRC-32 of `bytes` (any length).
uint32_t Crc32(absl::string_view bytes);

// "slice file", "checkpoint manifest", "exported model": for messages.
absl::string_view FileKindName(FileKind kind);

// The largest file of each kind that a reader accepts (DataLoss beyond): a guard against
// allocating for an absurd size, not a format limit.
int64_t MaxFileBytes(FileKind kind);

// Fills in the header of `bytes`, whose first kEnvelopeHeaderBytes are reserved for it and whose
// remainder is the body.
void SealInPlace(FileKind kind, std::string& bytes);

// Header + body: for tests and fuzzers that build or alter a body.
std::string Seal(FileKind kind, absl::string_view body);

// The body of a sealed file, after checking its size (against MaxFileBytes too), magic and
// checksum. DataLoss naming what is wrong (the file's kind and e.g. "checksum mismatch").
absl::StatusOr<absl::string_view> OpenEnvelope(FileKind kind, absl::string_view bytes);

}  // namespace schema_internal
}  // namespace tessera
