#include "schema/base/internal/envelope.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tessera {
namespace schema_internal {
namespace {

absl::string_view Magic(FileKind kind) {
  switch (kind) {
    case FileKind::kSlice:
      return "TSRSLICE";
    case FileKind::kManifest:
      return "TSRMANIF";
    case FileKind::kModel:
      return "TSRMODEL";
  }
  return "TSR?????";
}

// Little-endian fields, whatever the host's byte order.
void StoreLE(char* at, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) at[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
uint64_t LoadLE(const char* at, int bytes) {
  uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= uint64_t{static_cast<unsigned char>(at[i])} << (8 * i);
  return value;
}

}  // namespace

uint32_t Crc32(absl::string_view bytes) {
  // zlib takes the length as a uInt (32 bits): feed large bodies in pieces.
  uLong crc = crc32(0L, Z_NULL, 0);
  constexpr size_t kStep = size_t{1} << 30;
  for (size_t at = 0; at < bytes.size(); at += kStep) {
    const size_t n = std::min(kStep, bytes.size() - at);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at), static_cast<uInt>(n));
  }
  return static_cast<uint32_t>(crc);
}

absl::string_view FileKindName(FileKind kind) {
  switch (kind) {
    case FileKind::kSlice:
      return "slice file";
    case FileKind::kManifest:
      return "checkpoint manifest";
    case FileKind::kModel:
      return "exported model";
  }
  return "file";
}

int64_t MaxFileBytes(FileKind kind) {
  // A manifest holds names and row ranges only. Slices and models hold float data: 16 GiB is
  // several times the largest unsharded variable of the reference workloads (600k x 1000 floats
  // with two optimizer slots is 7.2 GB), and far beyond what a reader should try to allocate.
  return kind == FileKind::kManifest ? (int64_t{256} << 20) : (int64_t{16} << 30);
}

void SealInPlace(FileKind kind, std::string& bytes, uint64_t tail_bytes) {
  const absl::string_view message = absl::string_view(bytes).substr(kEnvelopeHeaderBytes);
  char* header = bytes.data();
  std::memcpy(header, Magic(kind).data(), 8);
  StoreLE(header + 8, message.size() + tail_bytes, 8);
  StoreLE(header + 16, Crc32(message), 4);
  StoreLE(header + 20, tail_bytes / 8, 4);
}

std::string Seal(FileKind kind, absl::string_view body, uint64_t tail_bytes) {
  tail_bytes = std::min<uint64_t>(tail_bytes, body.size()) / 8 * 8;
  std::string bytes(kEnvelopeHeaderBytes, '\0');
  bytes.append(body.data(), body.size() - tail_bytes);
  SealInPlace(kind, bytes, tail_bytes);
  bytes.append(body.data() + body.size() - tail_bytes, tail_bytes);
  return bytes;
}

absl::StatusOr<EnvelopeHeader> ParseEnvelopeHeader(FileKind kind, absl::string_view header,
                                                   uint64_t file_bytes) {
  const absl::string_view what = FileKindName(kind);
  if (file_bytes < kEnvelopeHeaderBytes || header.size() < kEnvelopeHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(what, ": truncated to ", file_bytes, " bytes, shorter than its header"));
  }
  if (file_bytes > static_cast<uint64_t>(MaxFileBytes(kind))) {
    return absl::DataLossError(absl::StrCat(what, ": ", file_bytes, " bytes, more than the ",
                                            MaxFileBytes(kind), " allowed"));
  }
  if (header.substr(0, 8) != Magic(kind)) {
    return absl::DataLossError(absl::StrCat(what, ": bad magic '",
                                            absl::CHexEscape(header.substr(0, 8)), "', expected '",
                                            Magic(kind), "'"));
  }
  EnvelopeHeader parsed;
  parsed.body_bytes = LoadLE(header.data() + 8, 8);
  parsed.crc = static_cast<uint32_t>(LoadLE(header.data() + 16, 4));
  parsed.tail_bytes = LoadLE(header.data() + 20, 4) * 8;
  if (parsed.body_bytes != file_bytes - kEnvelopeHeaderBytes) {
    return absl::DataLossError(absl::StrCat(what, ": the header says ", parsed.body_bytes,
                                            " bytes of content, the file has ",
                                            file_bytes - kEnvelopeHeaderBytes));
  }
  if (parsed.body_bytes % 8 != 0 || parsed.tail_bytes > parsed.body_bytes ||
      (kind == FileKind::kManifest && parsed.tail_bytes != 0)) {
    return absl::DataLossError(absl::StrCat(what, ": malformed header"));
  }
  return parsed;
}

absl::Status CheckMessageChecksum(FileKind kind, const EnvelopeHeader& header,
                                  absl::string_view message) {
  const uint32_t crc = Crc32(message);
  if (crc != header.crc) {
    return absl::DataLossError(
        absl::StrFormat("%s: checksum mismatch in its content (stored %08x, computed %08x)",
                        FileKindName(kind), header.crc, crc));
  }
  return absl::OkStatus();
}

absl::StatusOr<Envelope> OpenEnvelope(FileKind kind, absl::string_view bytes) {
  absl::StatusOr<EnvelopeHeader> header = ParseEnvelopeHeader(kind, bytes, bytes.size());
  if (!header.ok()) return header.status();
  Envelope envelope;
  envelope.message = bytes.substr(kEnvelopeHeaderBytes, header->message_bytes());
  envelope.tail = bytes.substr(kEnvelopeHeaderBytes + header->message_bytes());
  absl::Status status = CheckMessageChecksum(kind, *header, envelope.message);
  if (!status.ok()) return status;
  return envelope;
}

}  // namespace schema_internal
}  // namespace tessera
