#include "schema/internal/envelope.h"

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

void SealInPlace(FileKind kind, std::string& bytes) {
  const absl::string_view body = absl::string_view(bytes).substr(kEnvelopeHeaderBytes);
  char* header = bytes.data();
  std::memcpy(header, Magic(kind).data(), 8);
  StoreLE(header + 8, body.size(), 8);
  StoreLE(header + 16, Crc32(body), 4);
  StoreLE(header + 20, 0, 4);
}

std::string Seal(FileKind kind, absl::string_view body) {
  std::string bytes(kEnvelopeHeaderBytes, '\0');
  bytes.append(body.data(), body.size());
  SealInPlace(kind, bytes);
  return bytes;
}

absl::StatusOr<absl::string_view> OpenEnvelope(FileKind kind, absl::string_view bytes) {
  const absl::string_view what = FileKindName(kind);
  if (bytes.size() < kEnvelopeHeaderBytes) {
    return absl::DataLossError(
        absl::StrCat(what, ": truncated to ", bytes.size(), " bytes, shorter than its header"));
  }
  if (static_cast<int64_t>(bytes.size()) > MaxFileBytes(kind)) {
    return absl::DataLossError(absl::StrCat(what, ": ", bytes.size(), " bytes, more than the ",
                                            MaxFileBytes(kind), " allowed"));
  }
  if (bytes.substr(0, 8) != Magic(kind)) {
    return absl::DataLossError(absl::StrCat(what, ": bad magic '",
                                            absl::CHexEscape(bytes.substr(0, 8)), "', expected '",
                                            Magic(kind), "'"));
  }
  const uint64_t size = LoadLE(bytes.data() + 8, 8);
  const uint32_t stored_crc = static_cast<uint32_t>(LoadLE(bytes.data() + 16, 4));
  const uint32_t reserved = static_cast<uint32_t>(LoadLE(bytes.data() + 20, 4));
  const absl::string_view body = bytes.substr(kEnvelopeHeaderBytes);
  if (size != body.size()) {
    return absl::DataLossError(absl::StrCat(what, ": the header says ", size,
                                            " bytes of content, the file has ", body.size()));
  }
  if (size % 8 != 0 || reserved != 0) {
    return absl::DataLossError(absl::StrCat(what, ": malformed header"));
  }
  const uint32_t crc = Crc32(body);
  if (crc != stored_crc) {
    return absl::DataLossError(
        absl::StrFormat("%s: checksum mismatch in its content (stored %08x, computed %08x)", what,
                        stored_crc, crc));
  }
  return body;
}

}  // namespace schema_internal
}  // namespace tessera
