// The line index of a text file, plain or gzip, that lets tessera/delimited_text.h read any run
// of lines without scanning the file: where each line starts in the text, and for gzip the access
// points to start decompressing from (zlib's examples/zran.c: at a deflate block boundary, the
// compressed byte and bit offset and the 32 KiB of text before it). It is built by one pass over
// the file, which also checks every line, and is kept beside the data file as a sidecar
// `<data>.tsidx` so that the next process to open the file loads it instead of scanning.
//
// Building and RowStarts are in text_index.cc, the sidecar in text_index_sidecar.cc, TextReader
// in text_reader.cc.
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(LineIndex index, BuildLineIndex(*file, path, /*skip_bad_lines=*/false,
//                                                    check_line));
//   TextReader reader(*file, index, path);
//   std::string text;
//   TESSERA_RETURN_IF_ERROR(reader.Read(index.row_starts[7], index.row_starts[9], text));  // rows
//   7, 8
//
// Thread-safety: a LineIndex is immutable once built, read by any thread; a TextReader belongs
// to one thread (it holds its own decompression stream), any number of them may share a file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tessera/env.h"

struct z_stream_s;

namespace tessera::internal {

// No row is longer than this (its '\n' and a '\r' aside): a longer line is a bad line, so that a
// file of garbage without newlines never makes a reader hold all of it.
inline constexpr int64_t kMaxLineBytes = int64_t{1} << 20;
// zlib's window: an access point holds the text this far back.
inline constexpr int64_t kGzipWindowBytes = 32768;
// Text between access points: a read decompresses half of it on average before its first byte.
inline constexpr int64_t kGzipSpanBytes = int64_t{1} << 20;
// Compressed input read at a time.
inline constexpr uint64_t kGzipInputBytes = uint64_t{256} << 10;

struct GzipAccessPoint {
  uint64_t text_offset = 0;  // where the deflate block starting here begins in the text
  uint64_t file_offset = 0;  // the first whole byte of that block in the file
  uint64_t bits = 0;         // 0-7 bits of the byte before file_offset that belong to the block
};

// Where each row's line starts in the text, in about 4 bytes a row rather than 8 (a day of
// Criteo logs is 45M rows or more, in every worker that reads it): a 64-bit base per block of 64
// rows and each row's 32-bit distance from its block's base. A row that does not fit (4 GiB or
// more past its base, or before it: only after gigabytes of skipped lines, or in a forged index)
// is kept whole on the side.
class RowStarts {
 public:
  size_t size() const { return deltas_.size(); }
  bool empty() const { return deltas_.empty(); }
  uint64_t operator[](size_t row) const {
    const uint32_t delta = deltas_[row];
    return delta != kFar ? bases_[row / kBlockRows] + delta : Far(row);
  }
  uint64_t back() const { return (*this)[size() - 1]; }
  void push_back(uint64_t start);
  // The bytes a sidecar stores (core/data/internal/text_index.cc) and their inverse.
  const std::vector<uint64_t>& bases() const { return bases_; }
  const std::vector<uint32_t>& deltas() const { return deltas_; }
  const std::vector<std::pair<uint64_t, uint64_t>>& far() const { return far_; }
  // False when the parts do not fit together (a base per block, the far rows increasing, each
  // marked in deltas and listed once).
  bool Assign(std::vector<uint64_t> bases, std::vector<uint32_t> deltas,
              std::vector<std::pair<uint64_t, uint64_t>> far);

  static constexpr size_t kBlockRows = 64;
  static constexpr uint32_t kFar = 0xffffffffu;

 private:
  uint64_t Far(size_t row) const;

  std::vector<uint64_t> bases_;
  std::vector<uint32_t> deltas_;
  std::vector<std::pair<uint64_t, uint64_t>> far_;  // (row, start), by row
};

// A bad line left out (skip_bad_lines): its number in the file (from 1) and what was wrong.
struct SkippedLine {
  int64_t line = 0;
  std::string what;
};
// The skipped lines an index names (the first ones), and the most a name's text keeps.
inline constexpr size_t kNamedSkips = 5;
inline constexpr size_t kMaxSkipText = 400;

struct LineIndex {
  bool gzip = false;
  uint64_t file_size = 0;  // bytes of the file
  uint64_t text_size = 0;  // bytes of its text (uncompressed)
  // Where each row's line starts in the text, increasing. Blank lines and skipped bad lines are
  // not rows.
  RowStarts row_starts;
  int64_t skipped_lines = 0;            // bad lines left out (skip_bad_lines)
  std::vector<SkippedLine> first_skipped;  // the first kNamedSkips of them
  // The rows' labels, as the caller's check saw them (a sidecar keeps them): the least and the
  // greatest with their line numbers, and the first with a fractional part (line 0: none).
  struct Labels {
    double min = 0;
    double max = 0;
    int64_t min_line = 0;
    int64_t max_line = 0;
    double fraction = 0;
    int64_t fraction_line = 0;
    // Takes the label of row line `line` into account.
    void Add(double label, int64_t line);
  };
  Labels labels;
  std::vector<GzipAccessPoint> points;  // gzip only; points[0].text_offset is 0
  std::string windows;                  // kGzipWindowBytes of text before each point, in order
};

// Decides whether line `number` (from 1; without its line end) is a row: true, or false with
// `error` saying what is wrong with it.
using LineCheck =
    absl::FunctionRef<bool(absl::string_view line, int64_t number, std::string& error)>;

// Scans `file` (gzip when it starts with 1f 8b, else plain text), checking each non-blank line
// with `check` (but the first, a header, with `header`). A bad line is InvalidArgument
// "path:line: what", or with `skip_bad_lines` left out, counted and, the first few, named; a line
// longer than kMaxLineBytes is bad. DataLoss naming the file for a truncated or corrupt gzip
// stream, or a file that shrank; the file's read errors.
absl::StatusOr<LineIndex> BuildLineIndex(RandomAccessFile& file, const std::string& path,
                                         bool skip_bad_lines, bool header, LineCheck check);

// What a sidecar index must have been built for: the data file (its size, its modification time
// and a hash of samples of its bytes: the first and last 64 KiB, 4 KiB at 64 places between) and
// the checks its lines passed (a hash of the format and skip setting).
struct LineIndexKey {
  uint64_t file_size = 0;
  uint64_t file_fingerprint = 0;
  uint64_t format_hash = 0;
};

// The key of the data file `file`, last written at `modified`, for an index built under
// `format_hash`. The fingerprint covers the modification time and samples of the bytes (the first
// and last 64 KiB, 4 KiB at 64 places between): a file edited anywhere, even in place and to the
// same size, has another key once its time moved.
absl::StatusOr<LineIndexKey> MakeLineIndexKey(RandomAccessFile& file, absl::Time modified,
                                              uint64_t format_hash);

// The index stored in `sidecar`: NotFound when there is none, FailedPrecondition when it was
// built for another key or layout version (the data, the format or the build changed: stale),
// DataLoss when it is not a well-formed index (corrupt, forged). Every offset is checked against the
// key's file, so a forged index can misplace rows but never make a read leave the file.
absl::StatusOr<LineIndex> LoadLineIndex(Env& env, const std::string& sidecar,
                                        const LineIndexKey& key);
// Writes `index` to `sidecar` atomically (temporary file and rename).
absl::Status SaveLineIndex(Env& env, const std::string& sidecar, const LineIndexKey& key,
                           const LineIndex& index);

// Reads the text of a file by its index: plain bytes, or gzip decompressed from the access point
// nearest before, continuing from where the last read ended when the next one is ahead of it
// (reads in increasing order decompress each part of the file once).
class TextReader {
 public:
  TextReader(RandomAccessFile& file, const LineIndex& index, const std::string& path);
  ~TextReader();
  TextReader(const TextReader&) = delete;
  TextReader& operator=(const TextReader&) = delete;

  // Replaces `out` with text bytes [begin, end) (end <= text_size). DataLoss naming the file when
  // the file does not hold them (it changed since it was indexed).
  absl::Status Read(uint64_t begin, uint64_t end, std::string& out);
  // Whether a Read from `begin` would go on decompressing from where the last one stopped
  // rather than start again from an access point (always false for plain text: nothing to keep).
  bool ContinuesTo(uint64_t begin) const;
  // The text offset the next read would decompress next.
  uint64_t position() const { return text_position_; }

 private:
  // Starts decompressing at the access point at or before `offset`.
  absl::Status StartAt(uint64_t offset);
  // Decompresses the next `n` bytes of text into `out` (null: discards them).
  absl::Status Inflate(char* out, uint64_t n);
  absl::Status Refill();
  absl::Status Corrupt(absl::string_view what) const;
  void Close();

  RandomAccessFile& file_;
  const LineIndex& index_;
  const std::string& path_;
  z_stream_s* stream_ = nullptr;  // gzip: created at the first read
  bool raw_ = true;               // decoding a raw deflate stream (from a point), not gzip
  uint64_t text_position_ = 0;    // the text offset the stream produces next
  uint64_t file_position_ = 0;    // the file offset of the next input to read
  std::string input_;
  std::string discard_;
};

}  // namespace tessera::internal
