// The sidecar file of a line index (core/data/internal/text_index.h): its layout, checks and
// writing.
//
// Layout (native byte order, 8-byte words; the magic word tells another byte order apart):
//   header  magic, version, flags (1: gzip), file size, file fingerprint, format hash,
//           text size, rows, skipped lines, access points, far rows, named skips, the least
//           and greatest label (double bits) and their lines, the first fractional label and
//           its line
//   rows    a base per block of 64 rows, a 32-bit delta per row (padded to 8 bytes), then
//           (row, start) per far row (RowStarts)
//   points  text offset, file offset, bits, then the 32 KiB window, per access point
//   skips   line number, text length, then the text (padded to 8 bytes), per named skip
//   a checksum of everything before it
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/base/hash.h"
#include "core/data/internal/text_index.h"
#include "tessera/status.h"

namespace tessera::internal {
namespace {

constexpr uint64_t kFingerprintBytes = uint64_t{64} << 10;

// A hash of bytes whose length is a multiple of 8, word by word, streamable in such pieces.
class Checksum {
 public:
  void Add(absl::string_view bytes) {
    for (size_t k = 0; k + 8 <= bytes.size(); k += 8) {
      uint64_t word;
      std::memcpy(&word, bytes.data() + k, 8);
      hash_ = Mix64(hash_ ^ word);
    }
  }
  uint64_t value() const { return hash_; }

 private:
  uint64_t hash_ = 0x74736964785f7631ULL;
};

// "TSIDX\0v1" as a native word: a sidecar from a machine of the other byte order reads as not
// an index, and is rebuilt.
constexpr uint64_t kMagic = 0x3176005844495354ULL;
constexpr uint64_t kVersion = 3;
constexpr uint64_t kHeaderWords = 18;
constexpr uint64_t kHeaderBytes = kHeaderWords * 8;
constexpr uint64_t kPointBytes = 3 * 8 + static_cast<uint64_t>(kGzipWindowBytes);

// The sidecar's row starts: a base per block, a 32-bit delta per row (padded to 8 bytes), and
// (row, start) for each far row. Precondition: the counts are bounded by a file size.
uint64_t BlocksOf(uint64_t rows) {
  return (rows + RowStarts::kBlockRows - 1) / RowStarts::kBlockRows;
}
uint64_t Padded(uint64_t bytes) { return (bytes + 7) / 8 * 8; }
uint64_t RowStartsBytes(uint64_t rows, uint64_t far) {
  return 8 * BlocksOf(rows) + Padded(4 * rows) + 16 * far;
}

void PutWord(std::string& out, uint64_t word) {
  char bytes[8];
  std::memcpy(bytes, &word, 8);
  out.append(bytes, 8);
}

uint64_t Bits(double value) {
  uint64_t word;
  std::memcpy(&word, &value, 8);
  return word;
}

uint64_t GetWord(const char* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return word;
}

absl::Status Malformed(const std::string& sidecar, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(sidecar, " is not a valid line index: ", what));
}

}  // namespace

absl::StatusOr<LineIndexKey> MakeLineIndexKey(RandomAccessFile& file, absl::Time modified,
                                              uint64_t format_hash) {
  LineIndexKey key;
  key.file_size = file.size();
  key.format_hash = format_hash;
  // The first and last 64 KiB and 4 KiB at 64 places between: a file written again (a new
  // day's data, a regenerated set) differs there even when its size does not.
  const uint64_t head = std::min(kFingerprintBytes, key.file_size);
  const uint64_t tail = std::min(kFingerprintBytes, key.file_size - head);
  std::string bytes(static_cast<size_t>(head + tail), '\0');
  TESSERA_RETURN_IF_ERROR(file.ReadAt(0, head, bytes.data()));
  TESSERA_RETURN_IF_ERROR(file.ReadAt(key.file_size - tail, tail, bytes.data() + head));
  const uint64_t middle = key.file_size - head - tail;
  constexpr uint64_t kSamples = 64, kSampleBytes = 4096;
  if (middle >= kSamples * kSampleBytes) {
    std::string sample(kSampleBytes, '\0');
    for (uint64_t k = 0; k < kSamples; ++k) {
      TESSERA_RETURN_IF_ERROR(
          file.ReadAt(head + middle / kSamples * k, kSampleBytes, sample.data()));
      bytes += sample;
    }
  }
  // The time as well: an edit in place between the samples keeps them.
  key.file_fingerprint =
      static_cast<uint64_t>(StringId(bytes)) ^
      Mix64(static_cast<uint64_t>(absl::ToUnixNanos(modified)) + 0x9e3779b97f4a7c15ULL);
  return key;
}

absl::StatusOr<LineIndex> LoadLineIndex(Env& env, const std::string& sidecar,
                                        const LineIndexKey& key) {
  if (!env.FileExists(sidecar)) return absl::NotFoundError(absl::StrCat("no ", sidecar));
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file,
                           env.NewRandomAccessFile(sidecar));
  const uint64_t size = file->size();
  if (size < kHeaderBytes + 8) return Malformed(sidecar, "too short");
  char header[kHeaderBytes];
  TESSERA_RETURN_IF_ERROR(file->ReadAt(0, kHeaderBytes, header));
  uint64_t h[kHeaderWords];
  for (uint64_t k = 0; k < kHeaderWords; ++k) h[k] = GetWord(header + 8 * k);
  if (h[0] != kMagic) return Malformed(sidecar, "no index magic");
  if (h[1] != kVersion) {  // another build's layout: stale, not broken
    return absl::FailedPreconditionError(absl::StrCat(
        "its index is of another layout (version ", h[1], "; this build writes ", kVersion, ")"));
  }
  if (h[3] != key.file_size || h[4] != key.file_fingerprint) {
    return absl::FailedPreconditionError("the file changed since its index was built");
  }
  if (h[5] != key.format_hash) {
    return absl::FailedPreconditionError(
        "its index was built for another format (the column spec, the quoting, the header or "
        "the bad-line policy changed)");
  }
  LineIndex index;
  index.gzip = (h[2] & 1) != 0;
  index.file_size = h[3];
  index.text_size = h[6];
  const uint64_t rows = h[7], points = h[9], far = h[10], skips = h[11];
  // Sizes checked against the sidecar's own before anything is allocated for them (the skips'
  // texts are bounded, so a size within their bounds leaves the rest to match exactly).
  const uint64_t fixed = kHeaderBytes + 8;
  if (h[2] > 1 || rows > size / 4 || points > size / kPointBytes || far > size / 16 ||
      skips > kNamedSkips || size < fixed ||
      h[8] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Malformed(sidecar, "its counts do not match its size");
  }
  const uint64_t sections = RowStartsBytes(rows, far) + kPointBytes * points;
  const uint64_t skip_bytes = size - fixed - std::min(size - fixed, sections);
  if (sections > size - fixed || skip_bytes < 16 * skips ||
      skip_bytes > skips * (16 + Padded(kMaxSkipText))) {
    return Malformed(sidecar, "its counts do not match its size");
  }
  std::string body(static_cast<size_t>(size - kHeaderBytes), '\0');
  TESSERA_RETURN_IF_ERROR(file->ReadAt(kHeaderBytes, body.size(), body.data()));
  Checksum checksum;
  checksum.Add(absl::string_view(header, kHeaderBytes));
  checksum.Add(absl::string_view(body.data(), body.size() - 8));
  if (checksum.value() != GetWord(body.data() + body.size() - 8)) {
    return Malformed(sidecar, "its checksum does not match");
  }
  index.skipped_lines = static_cast<int64_t>(h[8]);
  LineIndex::Labels& labels = index.labels;
  std::memcpy(&labels.min, &h[12], 8);
  std::memcpy(&labels.max, &h[13], 8);
  std::memcpy(&labels.fraction, &h[16], 8);
  labels.min_line = static_cast<int64_t>(h[14]);
  labels.max_line = static_cast<int64_t>(h[15]);
  labels.fraction_line = static_cast<int64_t>(h[17]);
  constexpr uint64_t kMaxLine = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (h[14] > kMaxLine || h[15] > kMaxLine || h[17] > kMaxLine ||
      (rows > 0) != (labels.min_line > 0 && labels.max_line > 0) || !std::isfinite(labels.min) ||
      !std::isfinite(labels.max) || !std::isfinite(labels.fraction) || labels.min > labels.max) {
    return Malformed(sidecar, "its labels are out of bounds");
  }
  const char* p = body.data();
  std::vector<uint64_t> bases(static_cast<size_t>(BlocksOf(rows)));
  std::vector<uint32_t> deltas(static_cast<size_t>(rows));
  std::vector<std::pair<uint64_t, uint64_t>> far_rows(static_cast<size_t>(far));
  if (!bases.empty()) std::memcpy(bases.data(), p, 8 * bases.size());
  p += 8 * bases.size();
  if (!deltas.empty()) std::memcpy(deltas.data(), p, 4 * deltas.size());
  p += Padded(4 * rows);
  for (auto& [row, start] : far_rows) {
    row = GetWord(p);
    start = GetWord(p + 8);
    p += 16;
  }
  if (!index.row_starts.Assign(std::move(bases), std::move(deltas), std::move(far_rows))) {
    return Malformed(sidecar, "its row blocks do not fit together");
  }
  index.points.resize(static_cast<size_t>(points));
  index.windows.resize(static_cast<size_t>(points * kGzipWindowBytes));
  for (uint64_t k = 0; k < points; ++k, p += kPointBytes) {
    GzipAccessPoint& point = index.points[k];
    point.text_offset = GetWord(p);
    point.file_offset = GetWord(p + 8);
    point.bits = GetWord(p + 16);
    std::memcpy(index.windows.data() + k * kGzipWindowBytes, p + 24, kGzipWindowBytes);
  }
  const char* const skips_end = body.data() + body.size() - 8;
  for (uint64_t k = 0; k < skips; ++k) {
    if (skips_end - p < 16) return Malformed(sidecar, "its named skips run past its end");
    SkippedLine skipped;
    const uint64_t line = GetWord(p), length = GetWord(p + 8);
    p += 16;
    if (line < 1 || line > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        length > kMaxSkipText || static_cast<uint64_t>(skips_end - p) < Padded(length)) {
      return Malformed(sidecar, absl::StrCat("named skip ", k, " is out of bounds"));
    }
    skipped.line = static_cast<int64_t>(line);
    skipped.what.assign(p, static_cast<size_t>(length));
    p += Padded(length);
    index.first_skipped.push_back(std::move(skipped));
  }
  if (p != skips_end) return Malformed(sidecar, "its sections do not fill it");
  if (index.first_skipped.size() > static_cast<size_t>(h[8])) {
    return Malformed(sidecar, "it names more skipped lines than it counts");
  }
  // Every offset inside the file, in order: a forged index misplaces rows at worst.
  if (!index.gzip && (index.text_size != index.file_size || points != 0)) {
    return Malformed(sidecar, "a plain file's text is the file");
  }
  if (index.gzip && (points == 0 || index.points[0].text_offset != 0)) {
    return Malformed(sidecar, "a gzip file's first access point is not at its start");
  }
  for (uint64_t k = 0; k < points; ++k) {
    const GzipAccessPoint& point = index.points[k];
    if (point.bits > 7 || (point.bits > 0 && point.file_offset == 0) ||
        point.file_offset > index.file_size || point.text_offset > index.text_size ||
        (k > 0 && (point.text_offset <= index.points[k - 1].text_offset ||
                   point.file_offset < index.points[k - 1].file_offset))) {
      return Malformed(sidecar, absl::StrCat("access point ", k, " is out of place"));
    }
  }
  uint64_t previous = 0;
  for (uint64_t k = 0; k < rows; ++k) {
    const uint64_t start = index.row_starts[k];
    if (start >= index.text_size || (k > 0 && start <= previous)) {
      return Malformed(sidecar, absl::StrCat("row ", k, " is out of place"));
    }
    previous = start;
  }
  return index;
}

absl::Status SaveLineIndex(Env& env, const std::string& sidecar, const LineIndexKey& key,
                           const LineIndex& index) {
  std::string header;
  for (const uint64_t word :
       {kMagic, kVersion, uint64_t{index.gzip ? 1u : 0u}, key.file_size, key.file_fingerprint,
        key.format_hash, index.text_size, static_cast<uint64_t>(index.row_starts.size()),
        static_cast<uint64_t>(index.skipped_lines), static_cast<uint64_t>(index.points.size()),
        static_cast<uint64_t>(index.row_starts.far().size()),
        static_cast<uint64_t>(std::min(index.first_skipped.size(), kNamedSkips)),
        Bits(index.labels.min), Bits(index.labels.max),
        static_cast<uint64_t>(index.labels.min_line), static_cast<uint64_t>(index.labels.max_line),
        Bits(index.labels.fraction), static_cast<uint64_t>(index.labels.fraction_line)}) {
    PutWord(header, word);
  }
  return WriteFileAtomically(
      env, sidecar,
      [&](WritableFile& out) -> absl::Status {
        Checksum checksum;
        uint64_t offset = 0;
        auto write = [&](absl::string_view bytes) -> absl::Status {
          checksum.Add(bytes);
          TESSERA_RETURN_IF_ERROR(out.WriteAt(offset, bytes));
          offset += bytes.size();
          return absl::OkStatus();
        };
        TESSERA_RETURN_IF_ERROR(write(header));
        const RowStarts& starts = index.row_starts;
        TESSERA_RETURN_IF_ERROR(write(absl::string_view(
            reinterpret_cast<const char*>(starts.bases().data()), 8 * starts.bases().size())));
        std::string deltas(static_cast<size_t>(Padded(4 * starts.size())), '\0');
        if (!starts.empty()) std::memcpy(deltas.data(), starts.deltas().data(), 4 * starts.size());
        TESSERA_RETURN_IF_ERROR(write(deltas));
        std::string far;
        for (const auto& [row, start] : starts.far()) {
          PutWord(far, row);
          PutWord(far, start);
        }
        TESSERA_RETURN_IF_ERROR(write(far));
        for (size_t k = 0; k < index.points.size(); ++k) {
          std::string point;
          PutWord(point, index.points[k].text_offset);
          PutWord(point, index.points[k].file_offset);
          PutWord(point, index.points[k].bits);
          point.append(index.windows, k * kGzipWindowBytes, kGzipWindowBytes);
          TESSERA_RETURN_IF_ERROR(write(point));
        }
        std::string skips;
        for (size_t k = 0; k < std::min(index.first_skipped.size(), kNamedSkips); ++k) {
          const std::string what = index.first_skipped[k].what.substr(0, kMaxSkipText);
          PutWord(skips, static_cast<uint64_t>(index.first_skipped[k].line));
          PutWord(skips, what.size());
          skips += what;
          skips.resize(Padded(skips.size()), '\0');
        }
        TESSERA_RETURN_IF_ERROR(write(skips));
        std::string tail;
        PutWord(tail, checksum.value());
        return out.WriteAt(offset, tail);
      },
      /*sync_directory=*/false);
}

}  // namespace tessera::internal
