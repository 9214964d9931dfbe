// DelimitedTextSource: examples read from delimited text files (Criteo's TSV layout, or any
// columns a TextFormat describes), plain or gzip, as an ExampleSource (tessera/data.h):
// a worker reads only the rows of its batches, by their index, never the whole file.
//
// Each line is an example; its fields, split at the delimiter, are the format's columns in
// order:
//   label             the label, a number (0/1 for binary tasks, any number for regression)
//   dense:NAME        a number, one column of dense feature NAME; the dense columns naming the
//                     same feature form it in column order (dense:dense*13 is a feature of
//                     width 13); an empty field is 0
//   cat:NAME          a categorical value: id feature NAME = StringId(field) (core/base/hash.h),
//   the
//                     raw id the model hashes into its table; an empty field is StringId("")
//   list:NAME:SEP     categorical values separated by the character SEP: id-list feature NAME,
//                     one StringId per value (empty values are left out, an empty field is an
//                     empty list)
//   skip              a field that is read past
// Numbers are decimal (std::from_chars: "3", "-1", "0.25", "1e-3"; no '+', no spaces) and
// finite. Lines end in "\n" or "\r\n" (the last may have no end); a blank line is no example.
// A field that starts with a quote (TextFormat::quote, '"') is quoted as in CSV (RFC 4180): its
// value runs to the matching quote, may hold the delimiter, and "" inside is one quote, so
// "u5" and u5 are one value; a quoted field cannot hold a line end. With TextFormat::header each
// file's first line (the column names) is no example.
//
// Open indexes each file once (Note [The line index] in delimited_text.cc), checking every line:
// a bad line is InvalidArgument "path:line: what is wrong" ("expected 40 fields, got 39",
// "field 3 (dense[1]): 'x1' is not a number"), or with skip_bad_lines it is left out and
// counted. The index is kept beside the file as `<path>.tsidx`, so later opens of the same file
// (another worker, a restart) load it instead of scanning; a file written since (its size, its
// modification time or a sampled byte changed) is indexed again.
//
// Example: a day of Criteo logs, a model over "dense" [13] and ids "C1".."C26".
//   TESSERA_ASSIGN_OR_RETURN(auto source, DelimitedTextSource::Open({"day_0.gz"}, CriteoFormat()));
//   TESSERA_ASSIGN_OR_RETURN(Dataset train, Dataset::FromSource(source));
//   TESSERA_ASSIGN_OR_RETURN(BatchStream stream, BatchStream::Create(train, 512, true, seed));
//
// Example: a general column spec, with a multi-hot feature.
//   TESSERA_ASSIGN_OR_RETURN(TextFormat format,
//                    ParseTextFormat("label,dense:age,cat:user,list:history:|,skip", ','));
//
// Thread-safety: a source is immutable after Open; Read may be called from any number of
// threads at once (each call has its own buffers and decompression stream).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/data.h"
#include "tessera/env.h"

namespace tessera {

namespace internal {
class TextLineParser;
struct IndexedTextFile;
}  // namespace internal

struct TextColumn {
  enum class Kind { kLabel, kDense, kCategorical, kCategoricalList, kSkip };
  Kind kind = Kind::kSkip;
  std::string feature;   // kDense, kCategorical, kCategoricalList
  char separator = '|';  // kCategoricalList: between the values of one field
};

struct TextFormat {
  char delimiter = '\t';
  std::vector<TextColumn> columns;
  // Leave bad lines out (counted: DelimitedTextSource::skipped_lines) instead of failing Open.
  bool skip_bad_lines = false;
  // The quote character ('\0': no quoting) and whether each file starts with a header line.
  char quote = '"';
  bool header = false;
};

// A format from a column spec: comma-separated columns `kind[:name[:separator]][*count]` (the
// kinds of the header comment). `*count` repeats a column: dense:NAME*13 is 13 columns of
// feature NAME (width 13), cat:C*26 is 26 features C1..C26, list:L:|*2 two features L1 and L2,
// skip*3 three skipped fields. A list's separator is the one character after its second ':'.
// InvalidArgument naming the column for a bad spec, or a format ValidateTextFormat refuses.
//
// Example: CriteoFormat() is ParseTextFormat("label,dense:dense*13,cat:C*26").
absl::StatusOr<TextFormat> ParseTextFormat(absl::string_view spec, char delimiter = '\t');

// OK when `format` can be read: exactly one label column, a name for every feature column,
// each name one feature's (dense columns share theirs), a delimiter, separators and a quote that
// are not line ends, each separator and the quote not the delimiter, the quote no separator.
// InvalidArgument saying what is wrong otherwise.
absl::Status ValidateTextFormat(const TextFormat& format);

// Criteo's layout: tab-separated label, I1..I13 as dense feature "dense" [13], C1..C26 as id
// features "C1".."C26".
TextFormat CriteoFormat();

class DelimitedTextSource final : public ExampleSource {
 public:
  // The files at `paths` (at least one), their rows concatenated in order; each plain text or
  // gzip (told by its first bytes, not its name). Errors: InvalidArgument for a bad format or a
  // bad line (naming file and line); DataLoss for a truncated or corrupt gzip file; the Env's
  // errors opening or reading a file. A sidecar index that is missing, stale or corrupt is
  // rebuilt and rewritten; when it cannot be written (a read-only directory) the index stays in
  // memory.
  static absl::StatusOr<std::shared_ptr<const DelimitedTextSource>> Open(
      std::vector<std::string> paths, TextFormat format, Env* env = Env::Default());
  ~DelimitedTextSource() override;

  int64_t size() const override { return size_; }
  const ExampleSchema& schema() const override { return schema_; }
  // Reads the rows' lines, each run of neighbouring rows with one read (gzip: decompressed from
  // the access point before it). DataLoss naming the file and row when a file no longer holds
  // what was indexed.
  absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const override;
  // Reading contiguous rows is far cheaper than scattered ones (Note [Sequential sources]).
  bool sequential() const override { return true; }
  // The labels' range over every file, each end named "path:line" (recorded by the index).
  std::optional<LabelRange> labels() const override;

  const TextFormat& format() const { return format_; }
  // Bad lines left out over all files (skip_bad_lines), and the first few of them as
  // "path:line: what is wrong".
  int64_t skipped_lines() const { return skipped_lines_; }
  const std::vector<std::string>& first_skipped() const { return first_skipped_; }
  // Whether file `k`'s index was loaded from its sidecar rather than built by a scan.
  bool index_loaded(size_t k) const;

 private:
  DelimitedTextSource(TextFormat format, std::unique_ptr<internal::TextLineParser> parser);

  TextFormat format_;
  std::unique_ptr<internal::TextLineParser> parser_;
  ExampleSchema schema_;
  std::vector<std::unique_ptr<internal::IndexedTextFile>> files_;
  std::vector<int64_t> first_rows_;  // the first row of each file, then size_
  int64_t size_ = 0;
  int64_t skipped_lines_ = 0;
  std::vector<std::string> first_skipped_;
};

}  // namespace tessera
