#include "core/internal/text_index.h"

#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/hash.h"
#include "core/status.h"

namespace tessera::internal {
namespace {

constexpr uint64_t kFileChunkBytes = uint64_t{4} << 20;    // plain text read per scan step
constexpr uint64_t kGzipInputBytes = uint64_t{256} << 10;  // compressed input per read
constexpr uint64_t kFingerprintBytes = uint64_t{64} << 10;

bool IsGzip(RandomAccessFile& file) {
  char magic[2];
  return file.size() >= 2 && file.ReadAt(0, 2, magic).ok() && magic[0] == '\x1f' &&
         magic[1] == '\x8b';
}

// Splits streamed text into lines, hands each to the check and records the rows.
class LineScanner {
 public:
  LineScanner(const std::string& path, bool skip_bad_lines, LineCheck check, LineIndex& index)
      : path_(path), skip_(skip_bad_lines), check_(check), index_(index) {}

  // The next `n` bytes of text, which start at text offset `offset`.
  absl::Status Feed(const char* data, size_t n, uint64_t offset) {
    const char* const end = data + n;
    const char* p = data;
    if (!carry_.empty() || discarding_) {
      const char* newline = static_cast<const char*>(std::memchr(p, '\n', n));
      const char* piece_end = newline != nullptr ? newline : end;
      if (!discarding_) carry_.append(p, static_cast<size_t>(piece_end - p));
      if (newline == nullptr) {
        if (!discarding_ && static_cast<int64_t>(carry_.size()) > kMaxLineBytes + 1) {
          RETURN_IF_ERROR(TooLong());
        }
        return absl::OkStatus();
      }
      if (discarding_) {
        discarding_ = false;
      } else {
        RETURN_IF_ERROR(Line(carry_, carry_start_));
        carry_.clear();
      }
      p = newline + 1;
    }
    while (p < end) {
      const char* newline =
          static_cast<const char*>(std::memchr(p, '\n', static_cast<size_t>(end - p)));
      if (newline == nullptr) {
        carry_start_ = offset + static_cast<uint64_t>(p - data);
        carry_.assign(p, static_cast<size_t>(end - p));
        if (static_cast<int64_t>(carry_.size()) > kMaxLineBytes + 1) RETURN_IF_ERROR(TooLong());
        break;
      }
      RETURN_IF_ERROR(Line(absl::string_view(p, static_cast<size_t>(newline - p)),
                           offset + static_cast<uint64_t>(p - data)));
      p = newline + 1;
    }
    return absl::OkStatus();
  }

  // The text ended: a last line without a newline is a line too.
  absl::Status Finish() {
    if (!carry_.empty() && !discarding_) RETURN_IF_ERROR(Line(carry_, carry_start_));
    carry_.clear();
    return absl::OkStatus();
  }

 private:
  absl::Status Line(absl::string_view line, uint64_t start) {
    ++line_number_;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) return absl::OkStatus();  // a blank line is no example
    std::string error;
    if (static_cast<int64_t>(line.size()) > kMaxLineBytes) {
      error = absl::StrCat("the line is longer than ", kMaxLineBytes, " bytes");
    } else if (check_(line, error)) {
      index_.row_starts.push_back(start);
      return absl::OkStatus();
    }
    return Bad(error);
  }

  // The carried line is already too long to be a row: bad, without waiting for its end.
  absl::Status TooLong() {
    ++line_number_;
    carry_.clear();
    discarding_ = true;  // the rest of the line goes, whatever happens to this one
    return Bad(absl::StrCat("the line is longer than ", kMaxLineBytes, " bytes"));
  }

  absl::Status Bad(const std::string& error) {
    if (!skip_)
      return absl::InvalidArgumentError(absl::StrCat(path_, ":", line_number_, ": ", error));
    ++index_.skipped_lines;
    return absl::OkStatus();
  }

  const std::string& path_;
  const bool skip_;
  LineCheck check_;
  LineIndex& index_;
  int64_t line_number_ = 0;
  std::string carry_;  // the start of a line the last chunk ended inside
  uint64_t carry_start_ = 0;
  bool discarding_ = false;  // inside a line already found too long
};

absl::Status ScanPlain(RandomAccessFile& file, LineScanner& scanner, LineIndex& index) {
  std::string chunk;
  for (uint64_t offset = 0; offset < index.file_size;) {
    const uint64_t n = std::min(kFileChunkBytes, index.file_size - offset);
    chunk.resize(n);
    RETURN_IF_ERROR(file.ReadAt(offset, n, chunk.data()));
    RETURN_IF_ERROR(scanner.Feed(chunk.data(), n, offset));
    offset += n;
  }
  index.text_size = index.file_size;
  return scanner.Finish();
}

// Closes a zlib inflate stream on every path out.
struct InflateStream {
  z_stream stream{};
  bool live = false;
  ~InflateStream() {
    if (live) inflateEnd(&stream);
  }
};

// Note [Access points while scanning]
// zran.c decompresses into a 32 KiB circular window; the scan here decompresses into a buffer
// of the window plus a span, and whenever the span is full hands it to the line scanner and moves
// its last 32 KiB to the front. The 32 KiB before the next output byte are then always one
// contiguous range of the buffer (zeros before the first: a deflate stream never refers to text
// before its start), which is what an access point keeps.
absl::Status ScanGzip(RandomAccessFile& file, const std::string& path, LineScanner& scanner,
                      LineIndex& index) {
  InflateStream z;
  if (inflateInit2(&z.stream, 15 + 16) != Z_OK) {  // gzip only
    return absl::ResourceExhaustedError("cannot start a zlib stream");
  }
  z.live = true;
  z_stream& strm = z.stream;
  std::string input;
  std::string buffer(static_cast<size_t>(kGzipWindowBytes + kGzipSpanBytes), '\0');
  char* const span = buffer.data() + kGzipWindowBytes;
  strm.next_out = reinterpret_cast<Bytef*>(span);
  strm.avail_out = static_cast<uInt>(kGzipSpanBytes);
  uint64_t read_offset = 0, total_in = 0, total_out = 0, scanned_out = 0, last_point = 0;
  auto flush = [&]() -> absl::Status {
    const char* produced_end = reinterpret_cast<const char*>(strm.next_out);
    const size_t produced = static_cast<size_t>(produced_end - span);
    RETURN_IF_ERROR(scanner.Feed(span, produced, scanned_out));
    scanned_out += produced;
    // Note [Access points while scanning]
    std::memmove(buffer.data(), produced_end - kGzipWindowBytes, kGzipWindowBytes);
    strm.next_out = reinterpret_cast<Bytef*>(span);
    strm.avail_out = static_cast<uInt>(kGzipSpanBytes);
    return absl::OkStatus();
  };
  for (;;) {
    if (strm.avail_in == 0) {
      if (read_offset == index.file_size) {
        return absl::DataLossError(
            absl::StrCat(path, " is a truncated gzip file: its data ends at byte ", index.file_size,
                         " without the end of its compressed stream"));
      }
      const uint64_t n = std::min(kGzipInputBytes, index.file_size - read_offset);
      input.resize(n);
      RETURN_IF_ERROR(file.ReadAt(read_offset, n, input.data()));
      read_offset += n;
      strm.next_in = reinterpret_cast<Bytef*>(input.data());
      strm.avail_in = static_cast<uInt>(n);
    }
    if (strm.avail_out == 0) RETURN_IF_ERROR(flush());
    const uInt in_before = strm.avail_in, out_before = strm.avail_out;
    const int ret = inflate(&strm, Z_BLOCK);  // returns at each block boundary
    total_in += in_before - strm.avail_in;
    total_out += out_before - strm.avail_out;
    if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR || ret == Z_MEM_ERROR ||
        (ret == Z_BUF_ERROR && strm.avail_in > 0 && strm.avail_out > 0)) {
      return absl::DataLossError(absl::StrCat(path, ": corrupt gzip data near byte ", total_in,
                                              ": ",
                                              strm.msg != nullptr ? strm.msg : "no progress"));
    }
    if (ret == Z_STREAM_END) {
      if (strm.avail_in > 0 || read_offset < index.file_size) {
        // Another gzip member follows (bgzip, `cat a.gz b.gz`): its header is checked next.
        if (inflateReset(&strm) != Z_OK) return absl::InternalError("zlib reset failed");
        continue;
      }
      break;
    }
    // At a block boundary that is not the stream's end (bit 6: the last block is being read),
    // far enough from the last point: a new access point.
    if ((strm.data_type & 128) != 0 && (strm.data_type & 64) == 0 &&
        (total_out == 0 || total_out - last_point > static_cast<uint64_t>(kGzipSpanBytes))) {
      GzipAccessPoint point;
      point.text_offset = total_out;
      point.file_offset = total_in;
      point.bits = static_cast<uint64_t>(strm.data_type & 7);
      index.points.push_back(point);
      index.windows.append(reinterpret_cast<const char*>(strm.next_out) - kGzipWindowBytes,
                           static_cast<size_t>(kGzipWindowBytes));
      last_point = total_out;
    }
  }
  RETURN_IF_ERROR(flush());
  if (index.points.empty() || index.points[0].text_offset != 0) {
    return absl::DataLossError(absl::StrCat(path, ": no deflate block starts its text"));
  }
  index.text_size = total_out;
  return scanner.Finish();
}

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
constexpr uint64_t kVersion = 2;
constexpr uint64_t kHeaderWords = 11;
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

uint64_t GetWord(const char* p) {
  uint64_t word;
  std::memcpy(&word, p, 8);
  return word;
}

absl::Status Malformed(const std::string& sidecar, absl::string_view what) {
  return absl::DataLossError(absl::StrCat(sidecar, " is not a valid line index: ", what));
}

}  // namespace

void RowStarts::push_back(uint64_t start) {
  const size_t row = deltas_.size();
  if (row % kBlockRows == 0) bases_.push_back(start);
  const uint64_t base = bases_.back();
  if (start >= base && start - base < kFar) {
    deltas_.push_back(static_cast<uint32_t>(start - base));
  } else {
    deltas_.push_back(kFar);
    far_.emplace_back(row, start);
  }
}

uint64_t RowStarts::Far(size_t row) const {
  auto it = std::lower_bound(far_.begin(), far_.end(), std::make_pair(uint64_t{row}, uint64_t{0}));
  return it != far_.end() && it->first == row ? it->second : 0;  // Assign checked it is there
}

bool RowStarts::Assign(std::vector<uint64_t> bases, std::vector<uint32_t> deltas,
                       std::vector<std::pair<uint64_t, uint64_t>> far) {
  if (bases.size() != (deltas.size() + kBlockRows - 1) / kBlockRows) return false;
  size_t marked = 0;
  for (const uint32_t delta : deltas) marked += delta == kFar ? 1 : 0;
  if (marked != far.size()) return false;
  for (size_t k = 0; k < far.size(); ++k) {
    if (far[k].first >= deltas.size() || deltas[far[k].first] != kFar ||
        (k > 0 && far[k].first <= far[k - 1].first)) {
      return false;
    }
  }
  bases_ = std::move(bases);
  deltas_ = std::move(deltas);
  far_ = std::move(far);
  return true;
}

absl::StatusOr<LineIndex> BuildLineIndex(RandomAccessFile& file, const std::string& path,
                                         bool skip_bad_lines, LineCheck check) {
  LineIndex index;
  index.file_size = file.size();
  index.gzip = IsGzip(file);
  LineScanner scanner(path, skip_bad_lines, check, index);
  if (index.gzip) {
    RETURN_IF_ERROR(ScanGzip(file, path, scanner, index));
  } else {
    RETURN_IF_ERROR(ScanPlain(file, scanner, index));
  }
  return index;
}

absl::StatusOr<LineIndexKey> MakeLineIndexKey(RandomAccessFile& file, uint64_t format_hash) {
  LineIndexKey key;
  key.file_size = file.size();
  key.format_hash = format_hash;
  // The first and last 64 KiB and 4 KiB at 64 places between: a file written again (a new
  // day's data, a regenerated set) differs there even when its size does not.
  const uint64_t head = std::min(kFingerprintBytes, key.file_size);
  const uint64_t tail = std::min(kFingerprintBytes, key.file_size - head);
  std::string bytes(static_cast<size_t>(head + tail), '\0');
  RETURN_IF_ERROR(file.ReadAt(0, head, bytes.data()));
  RETURN_IF_ERROR(file.ReadAt(key.file_size - tail, tail, bytes.data() + head));
  const uint64_t middle = key.file_size - head - tail;
  constexpr uint64_t kSamples = 64, kSampleBytes = 4096;
  if (middle >= kSamples * kSampleBytes) {
    std::string sample(kSampleBytes, '\0');
    for (uint64_t k = 0; k < kSamples; ++k) {
      RETURN_IF_ERROR(file.ReadAt(head + middle / kSamples * k, kSampleBytes, sample.data()));
      bytes += sample;
    }
  }
  key.file_fingerprint = static_cast<uint64_t>(StringId(bytes));
  return key;
}

absl::StatusOr<LineIndex> LoadLineIndex(Env& env, const std::string& sidecar,
                                        const LineIndexKey& key) {
  if (!env.FileExists(sidecar)) return absl::NotFoundError(absl::StrCat("no ", sidecar));
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env.NewRandomAccessFile(sidecar));
  const uint64_t size = file->size();
  if (size < kHeaderBytes + 8) return Malformed(sidecar, "too short");
  char header[kHeaderBytes];
  RETURN_IF_ERROR(file->ReadAt(0, kHeaderBytes, header));
  uint64_t h[kHeaderWords];
  for (uint64_t k = 0; k < kHeaderWords; ++k) h[k] = GetWord(header + 8 * k);
  if (h[0] != kMagic) return Malformed(sidecar, "no index magic");
  if (h[1] != kVersion) return Malformed(sidecar, absl::StrCat("version ", h[1], " is unknown"));
  if (h[3] != key.file_size || h[4] != key.file_fingerprint || h[5] != key.format_hash) {
    return absl::FailedPreconditionError(
        absl::StrCat(sidecar, " was built for another version of the file or another format"));
  }
  LineIndex index;
  index.gzip = (h[2] & 1) != 0;
  index.file_size = h[3];
  index.text_size = h[6];
  const uint64_t rows = h[7], points = h[9], far = h[10];
  // Sizes checked against the sidecar's own before anything is allocated for them.
  if (h[2] > 1 || rows > size / 4 || points > size / kPointBytes || far > size / 16 ||
      size != kHeaderBytes + RowStartsBytes(rows, far) + kPointBytes * points + 8 ||
      h[8] > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return Malformed(sidecar, "its counts do not match its size");
  }
  std::string body(static_cast<size_t>(size - kHeaderBytes), '\0');
  RETURN_IF_ERROR(file->ReadAt(kHeaderBytes, body.size(), body.data()));
  Checksum checksum;
  checksum.Add(absl::string_view(header, kHeaderBytes));
  checksum.Add(absl::string_view(body.data(), body.size() - 8));
  if (checksum.value() != GetWord(body.data() + body.size() - 8)) {
    return Malformed(sidecar, "its checksum does not match");
  }
  index.skipped_lines = static_cast<int64_t>(h[8]);
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
        static_cast<uint64_t>(index.row_starts.far().size())}) {
    PutWord(header, word);
  }
  return WriteFileAtomically(
      env, sidecar,
      [&](WritableFile& out) -> absl::Status {
        Checksum checksum;
        uint64_t offset = 0;
        auto write = [&](absl::string_view bytes) -> absl::Status {
          checksum.Add(bytes);
          RETURN_IF_ERROR(out.WriteAt(offset, bytes));
          offset += bytes.size();
          return absl::OkStatus();
        };
        RETURN_IF_ERROR(write(header));
        const RowStarts& starts = index.row_starts;
        RETURN_IF_ERROR(write(absl::string_view(
            reinterpret_cast<const char*>(starts.bases().data()), 8 * starts.bases().size())));
        std::string deltas(static_cast<size_t>(Padded(4 * starts.size())), '\0');
        if (!starts.empty()) std::memcpy(deltas.data(), starts.deltas().data(), 4 * starts.size());
        RETURN_IF_ERROR(write(deltas));
        std::string far;
        for (const auto& [row, start] : starts.far()) {
          PutWord(far, row);
          PutWord(far, start);
        }
        RETURN_IF_ERROR(write(far));
        for (size_t k = 0; k < index.points.size(); ++k) {
          std::string point;
          PutWord(point, index.points[k].text_offset);
          PutWord(point, index.points[k].file_offset);
          PutWord(point, index.points[k].bits);
          point.append(index.windows, k * kGzipWindowBytes, kGzipWindowBytes);
          RETURN_IF_ERROR(write(point));
        }
        std::string tail;
        PutWord(tail, checksum.value());
        return out.WriteAt(offset, tail);
      },
      /*sync_directory=*/false);
}

TextReader::TextReader(RandomAccessFile& file, const LineIndex& index, const std::string& path)
    : file_(file), index_(index), path_(path) {}

TextReader::~TextReader() { Close(); }

void TextReader::Close() {
  if (stream_ == nullptr) return;
  inflateEnd(stream_);
  delete stream_;
  stream_ = nullptr;
}

absl::Status TextReader::Corrupt(absl::string_view what) const {
  return absl::DataLossError(
      absl::StrCat(path_, " changed since it was indexed, or its index ", "is wrong: ", what));
}

// The access point to start from for text offset `offset`; end() when there is none (only in a
// forged index).
std::vector<GzipAccessPoint>::const_iterator PointBefore(const LineIndex& index, uint64_t offset) {
  auto after = std::upper_bound(
      index.points.begin(), index.points.end(), offset,
      [](uint64_t o, const GzipAccessPoint& point) { return o < point.text_offset; });
  return after == index.points.begin() ? index.points.end() : std::prev(after);
}

bool TextReader::ContinuesTo(uint64_t begin) const {
  if (stream_ == nullptr || text_position_ > begin) return false;
  auto point = PointBefore(index_, begin);
  return point != index_.points.end() && point->text_offset <= text_position_;
}

absl::Status TextReader::Read(uint64_t begin, uint64_t end, std::string& out) {
  if (begin > end || end > index_.text_size) {
    return Corrupt(
        absl::StrCat("text [", begin, ", ", end, ") is outside its ", index_.text_size, " bytes"));
  }
  out.resize(static_cast<size_t>(end - begin));
  if (!index_.gzip) return file_.ReadAt(begin, out.size(), out.data());
  // Continue the current stream when it is between the last point before `begin` and `begin`
  // (nothing is decompressed twice).
  if (!ContinuesTo(begin)) RETURN_IF_ERROR(StartAt(begin));
  RETURN_IF_ERROR(Inflate(nullptr, begin - text_position_));
  return Inflate(out.data(), end - begin);
}

absl::Status TextReader::StartAt(uint64_t offset) {
  auto before = PointBefore(index_, offset);
  if (before == index_.points.end()) return Corrupt("no access point before its text");
  const size_t k = static_cast<size_t>(before - index_.points.begin());
  const GzipAccessPoint& point = index_.points[k];
  if (stream_ == nullptr) {
    stream_ = new z_stream{};
    if (inflateInit2(stream_, -15) != Z_OK) {
      delete stream_;
      stream_ = nullptr;
      return absl::ResourceExhaustedError("cannot start a zlib stream");
    }
  } else if (inflateReset2(stream_, -15) != Z_OK) {
    return absl::InternalError("zlib reset failed");
  }
  raw_ = true;
  stream_->avail_in = 0;
  file_position_ = point.file_offset;
  if (point.bits > 0) {  // the block starts inside the byte before
    char byte;
    RETURN_IF_ERROR(file_.ReadAt(point.file_offset - 1, 1, &byte));
    const int bits = static_cast<int>(point.bits);
    inflatePrime(stream_, bits, static_cast<uint8_t>(byte) >> (8 - bits));
  }
  inflateSetDictionary(stream_,
                       reinterpret_cast<const Bytef*>(index_.windows.data() + k * kGzipWindowBytes),
                       static_cast<uInt>(kGzipWindowBytes));
  text_position_ = point.text_offset;
  return absl::OkStatus();
}

absl::Status TextReader::Refill() {
  if (file_position_ >= file_.size()) return Corrupt("its compressed data ends early");
  const uint64_t n = std::min(kGzipInputBytes, file_.size() - file_position_);
  input_.resize(n);
  RETURN_IF_ERROR(file_.ReadAt(file_position_, n, input_.data()));
  file_position_ += n;
  stream_->next_in = reinterpret_cast<Bytef*>(input_.data());
  stream_->avail_in = static_cast<uInt>(n);
  return absl::OkStatus();
}

absl::Status TextReader::Inflate(char* out, uint64_t n) {
  if (out == nullptr && n > 0) discard_.resize(static_cast<size_t>(kGzipWindowBytes));
  while (n > 0) {
    const uint64_t step = out != nullptr
                              ? std::min<uint64_t>(n, std::numeric_limits<uInt>::max())
                              : std::min<uint64_t>(n, static_cast<uint64_t>(kGzipWindowBytes));
    stream_->next_out = reinterpret_cast<Bytef*>(out != nullptr ? out : discard_.data());
    stream_->avail_out = static_cast<uInt>(step);
    while (stream_->avail_out > 0) {
      if (stream_->avail_in == 0) RETURN_IF_ERROR(Refill());
      const uInt before = stream_->avail_out;
      const int ret = inflate(stream_, Z_NO_FLUSH);
      text_position_ += before - stream_->avail_out;
      if (ret == Z_NEED_DICT || ret == Z_DATA_ERROR || ret == Z_MEM_ERROR) {
        Close();  // the stream is unusable: the next read starts afresh
        return Corrupt("its gzip data does not decode there");
      }
      if (ret == Z_BUF_ERROR && stream_->avail_in > 0) {
        Close();
        return Corrupt("zlib made no progress");
      }
      if (ret == Z_STREAM_END && stream_->avail_out > 0) {
        // A gzip member ended; the text continues in the next one. From a point the stream is raw
        // deflate, whose member's 8-byte trailer (CRC and size) is still to be passed.
        for (int trailer = raw_ ? 8 : 0; trailer > 0;) {
          if (stream_->avail_in == 0) RETURN_IF_ERROR(Refill());
          const uInt skip = std::min<uInt>(stream_->avail_in, static_cast<uInt>(trailer));
          stream_->next_in += skip;
          stream_->avail_in -= skip;
          trailer -= static_cast<int>(skip);
        }
        if (inflateReset2(stream_, 15 + 16) != Z_OK) return absl::InternalError("zlib reset");
        raw_ = false;
      }
    }
    if (out != nullptr) out += step;
    n -= step;
  }
  return absl::OkStatus();
}

}  // namespace tessera::internal
