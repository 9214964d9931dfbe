// TextReader (core/data/internal/text_index.h): a file's text by its line index, plain or gzip.
#include <zlib.h>

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/data/internal/text_index.h"
#include "tessera/status.h"

namespace tessera::internal {
namespace {

// The access point to start from for text offset `offset`; end() when there is none (only in a
// forged index).
std::vector<GzipAccessPoint>::const_iterator PointBefore(const LineIndex& index, uint64_t offset) {
  auto after = std::upper_bound(
      index.points.begin(), index.points.end(), offset,
      [](uint64_t o, const GzipAccessPoint& point) { return o < point.text_offset; });
  return after == index.points.begin() ? index.points.end() : std::prev(after);
}

}  // namespace

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
  if (!ContinuesTo(begin)) TESSERA_RETURN_IF_ERROR(StartAt(begin));
  TESSERA_RETURN_IF_ERROR(Inflate(nullptr, begin - text_position_));
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
    TESSERA_RETURN_IF_ERROR(file_.ReadAt(point.file_offset - 1, 1, &byte));
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
  TESSERA_RETURN_IF_ERROR(file_.ReadAt(file_position_, n, input_.data()));
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
      if (stream_->avail_in == 0) TESSERA_RETURN_IF_ERROR(Refill());
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
          if (stream_->avail_in == 0) TESSERA_RETURN_IF_ERROR(Refill());
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
