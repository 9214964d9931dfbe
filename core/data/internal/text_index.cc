#include "core/data/internal/text_index.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera::internal {
namespace {

constexpr uint64_t kFileChunkBytes = uint64_t{4} << 20;  // plain text read per scan step

bool IsGzip(RandomAccessFile& file) {
  char magic[2];
  return file.size() >= 2 && file.ReadAt(0, 2, magic).ok() && magic[0] == '\x1f' &&
         magic[1] == '\x8b';
}

// Splits streamed text into lines, hands each to the check and records the rows.
class LineScanner {
 public:
  LineScanner(const std::string& path, bool skip_bad_lines, bool header, LineCheck check,
              LineIndex& index)
      : path_(path), skip_(skip_bad_lines), header_(header), check_(check), index_(index) {}

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
          TESSERA_RETURN_IF_ERROR(TooLong());
        }
        return absl::OkStatus();
      }
      if (discarding_) {
        discarding_ = false;
      } else {
        TESSERA_RETURN_IF_ERROR(Line(carry_, carry_start_));
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
        if (static_cast<int64_t>(carry_.size()) > kMaxLineBytes + 1)
          TESSERA_RETURN_IF_ERROR(TooLong());
        break;
      }
      TESSERA_RETURN_IF_ERROR(Line(absl::string_view(p, static_cast<size_t>(newline - p)),
                                   offset + static_cast<uint64_t>(p - data)));
      p = newline + 1;
    }
    return absl::OkStatus();
  }

  // The text ended: a last line without a newline is a line too.
  absl::Status Finish() {
    if (!carry_.empty() && !discarding_) TESSERA_RETURN_IF_ERROR(Line(carry_, carry_start_));
    carry_.clear();
    return absl::OkStatus();
  }

 private:
  absl::Status Line(absl::string_view line, uint64_t start) {
    ++line_number_;
    if (header_ && line_number_ == 1) return absl::OkStatus();  // the column names
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) return absl::OkStatus();  // a blank line is no example
    std::string error;
    if (static_cast<int64_t>(line.size()) > kMaxLineBytes) {
      error = absl::StrCat("the line is longer than ", kMaxLineBytes, " bytes");
    } else if (check_(line, line_number_, error)) {
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
    if (index_.first_skipped.size() < kNamedSkips) {
      index_.first_skipped.push_back({line_number_, error.substr(0, kMaxSkipText)});
    }
    return absl::OkStatus();
  }

  const std::string& path_;
  const bool skip_;
  const bool header_;
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
    TESSERA_RETURN_IF_ERROR(file.ReadAt(offset, n, chunk.data()));
    TESSERA_RETURN_IF_ERROR(scanner.Feed(chunk.data(), n, offset));
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
    TESSERA_RETURN_IF_ERROR(scanner.Feed(span, produced, scanned_out));
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
      TESSERA_RETURN_IF_ERROR(file.ReadAt(read_offset, n, input.data()));
      read_offset += n;
      strm.next_in = reinterpret_cast<Bytef*>(input.data());
      strm.avail_in = static_cast<uInt>(n);
    }
    if (strm.avail_out == 0) TESSERA_RETURN_IF_ERROR(flush());
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
  TESSERA_RETURN_IF_ERROR(flush());
  if (index.points.empty() || index.points[0].text_offset != 0) {
    return absl::DataLossError(absl::StrCat(path, ": no deflate block starts its text"));
  }
  index.text_size = total_out;
  return scanner.Finish();
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

void LineIndex::Labels::Add(double label, int64_t line) {
  if (min_line == 0 || label < min) {
    min = label;
    min_line = line;
  }
  if (max_line == 0 || label > max) {
    max = label;
    max_line = line;
  }
  if (fraction_line == 0 && label != std::floor(label)) {
    fraction = label;
    fraction_line = line;
  }
}

absl::StatusOr<LineIndex> BuildLineIndex(RandomAccessFile& file, const std::string& path,
                                         bool skip_bad_lines, bool header, LineCheck check) {
  LineIndex index;
  index.file_size = file.size();
  index.gzip = IsGzip(file);
  LineScanner scanner(path, skip_bad_lines, header, check, index);
  if (index.gzip) {
    TESSERA_RETURN_IF_ERROR(ScanGzip(file, path, scanner, index));
  } else {
    TESSERA_RETURN_IF_ERROR(ScanPlain(file, scanner, index));
  }
  return index;
}

}  // namespace tessera::internal
