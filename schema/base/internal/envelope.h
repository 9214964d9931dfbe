// The frame around every Tessera file (slice, manifest, exported model): a 24-byte header naming
// the kind of file, the body's size and a CRC-32, followed by the body: one Cap'n Proto message
// and, in slice files and format-2 exported models, a tail of raw data after it. The body is a whole number of 8-byte
// words, and so is the tail.
//
//   bytes  0..7   magic, e.g. "TSRSLICE" (one per FileKind)
//   bytes  8..15  body size in bytes, little-endian uint64
//   bytes 16..19  zlib's CRC-32 of the body's message (the body without its tail), little-endian
//   bytes 20..23  the tail's size in 8-byte words, little-endian uint32 (zero in manifests and
//                 format-1 models; older builds called it reserved and always wrote zero)
//   bytes 24..    the body: the message, then the tail
//
// The tail carries its own checksums (Note [Slice file layout] in slice_file.cc, Note [Model
// file layout] in model_format.h), so every byte of a file is covered by exactly one checksum. See
// Note [Checksums] in field_codec.cc for the files whose data lives inside the message.
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
// remainder is the body's message; `tail_bytes` (a multiple of 8) more bytes of body follow the
// message in the file but not in `bytes`.
void SealInPlace(FileKind kind, std::string& bytes, uint64_t tail_bytes = 0);

// Header + body, the last `tail_bytes` of the body being its tail: for tests and fuzzers that
// build or alter a body. `tail_bytes` is clamped to the body's size and rounded down to words.
std::string Seal(FileKind kind, absl::string_view body, uint64_t tail_bytes = 0);

// A parsed header.
struct EnvelopeHeader {
  uint64_t body_bytes = 0;
  uint64_t tail_bytes = 0;
  uint32_t crc = 0;  // of the message
  uint64_t message_bytes() const { return body_bytes - tail_bytes; }
};

// Checks the header (the file's first kEnvelopeHeaderBytes) of a `file_bytes`-byte file: its
// size (against MaxFileBytes too), magic, body size, and a tail that fits in the body and is
// zero for a manifest. DataLoss naming the file's kind and what is wrong.
absl::StatusOr<EnvelopeHeader> ParseEnvelopeHeader(FileKind kind, absl::string_view header,
                                                   uint64_t file_bytes);
// DataLoss "checksum mismatch" unless `message` has the header's CRC.
absl::Status CheckMessageChecksum(FileKind kind, const EnvelopeHeader& header,
                                  absl::string_view message);

// A sealed file in memory, split.
struct Envelope {
  absl::string_view message;
  absl::string_view tail;  // empty in manifests and format-1 models
};

// The body of a sealed file, after checking its header and its message's checksum.
absl::StatusOr<Envelope> OpenEnvelope(FileKind kind, absl::string_view bytes);

}  // namespace schema_internal
}  // namespace tessera
