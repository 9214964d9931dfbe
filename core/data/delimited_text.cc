#include "tessera/delimited_text.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/base/logging.h"
#include "core/data/internal/text_index.h"
#include "core/data/internal/text_line_parser.h"
#include "tessera/status.h"

namespace tessera {
namespace internal {

// One file of a source: the open file and its line index.
struct IndexedTextFile {
  std::string path;
  std::unique_ptr<RandomAccessFile> file;
  LineIndex index;
  bool loaded = false;  // from the sidecar

  // A reader for text from `begin`: a gzip stream an earlier read left just before it when there
  // is one (reads of batches in file order then decompress each part of the file once, not
  // again from an access point each), else a new one.
  std::unique_ptr<TextReader> TakeReader(uint64_t begin) {
    if (index.gzip) {
      absl::MutexLock lock(&mu);
      for (auto it = idle.begin(); it != idle.end(); ++it) {
        if ((*it)->ContinuesTo(begin)) {
          std::unique_ptr<TextReader> reader = std::move(*it);
          idle.erase(it);
          return reader;
        }
      }
    }
    return std::make_unique<TextReader>(*file, index, path);
  }

  // Keeps `reader`'s stream for a later read (a few per file: one per concurrent reader of it).
  void ReturnReader(std::unique_ptr<TextReader> reader) {
    if (!index.gzip) return;
    absl::MutexLock lock(&mu);
    if (idle.size() >= kIdleReaders) {
      auto oldest = std::min_element(idle.begin(), idle.end(), [](const auto& a, const auto& b) {
        return a->position() < b->position();
      });
      idle.erase(oldest);
    }
    idle.push_back(std::move(reader));
  }

  static constexpr size_t kIdleReaders = 4;
  absl::Mutex mu;
  std::vector<std::unique_ptr<TextReader>> idle ABSL_GUARDED_BY(mu);
};

}  // namespace internal

namespace {

using internal::kMaxLineBytes;

// Note [The line index]
// Open scans each file once (core/data/internal/text_index.h): every line is parsed then, so a bad
// line is reported before training starts, and each row's start in the text is recorded (for gzip,
// also an access point every 1 MiB of text). Read then sorts its rows, reads each run of
// neighbouring lines with one read (gzip: decompressing from the nearest access point, going on
// from run to run when they are close) and parses them into the batch. The scan's result is written
// beside the file as `<path>.tsidx`, keyed by the file's size and a hash of its first and last 64
// KiB and of the format's checks, so a worker process opening the same file loads it in a fraction
// of a scan (a day of Criteo is 45M lines: about 190 MB of offsets, loaded at disk speed).

// Lines closer than this are read as one run (the bytes between are read and dropped).
constexpr uint64_t kMaxGapBytes = uint64_t{64} << 10;
// One read holds at most this much text, whatever the rows asked.
constexpr uint64_t kMaxRunBytes = uint64_t{64} << 20;

std::string Shown(char c) { return absl::CHexEscape(std::string(1, c)); }

}  // namespace

absl::Status ValidateTextFormat(const TextFormat& format) {
  auto line_end = [](char c) { return c == '\n' || c == '\r'; };
  if (line_end(format.delimiter)) {
    return absl::InvalidArgumentError("the delimiter cannot be a line end");
  }
  if (line_end(format.quote) || (format.quote != '\0' && format.quote == format.delimiter)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the quote '", Shown(format.quote), "' is a line end or the delimiter"));
  }
  int labels = 0;
  std::set<std::string> dense, others;
  for (size_t k = 0; k < format.columns.size(); ++k) {
    const TextColumn& c = format.columns[k];
    const std::string where = absl::StrCat("column ", k + 1);
    if (c.kind == TextColumn::Kind::kLabel) ++labels;
    if (c.kind == TextColumn::Kind::kLabel || c.kind == TextColumn::Kind::kSkip) continue;
    if (c.feature.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " needs a feature name"));
    }
    if (c.kind == TextColumn::Kind::kDense) {
      if (others.count(c.feature) > 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": feature '", c.feature, "' is already an id feature"));
      }
      dense.insert(c.feature);
      continue;
    }
    if (dense.count(c.feature) > 0 || !others.insert(c.feature).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": feature '", c.feature, "' is named twice"));
    }
    if (c.kind == TextColumn::Kind::kCategoricalList &&
        (line_end(c.separator) || c.separator == format.delimiter ||
         (format.quote != '\0' && c.separator == format.quote))) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": separator '", Shown(c.separator),
                       "' is a line end, the delimiter or the quote"));
    }
  }
  if (labels != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a format needs exactly one label column, not ", labels));
  }
  return absl::OkStatus();
}

absl::StatusOr<TextFormat> ParseTextFormat(absl::string_view spec, char delimiter) {
  TextFormat format;
  format.delimiter = delimiter;
  size_t pos = 0;
  int column = 0;
  auto error = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("column spec '", spec, "', column ", column,
                                                   " (at character ", pos + 1, "): ", what));
  };
  auto skip_spaces = [&] {
    while (pos < spec.size() && spec[pos] == ' ') ++pos;
  };
  // A name: up to the next ':', '*', ',' or space.
  auto name = [&] {
    const size_t begin = pos;
    while (pos < spec.size() && std::strchr(":*, ", spec[pos]) == nullptr) ++pos;
    return std::string(spec.substr(begin, pos - begin));
  };
  while (true) {
    ++column;
    skip_spaces();
    const size_t kind_begin = pos;
    while (pos < spec.size() && absl::ascii_isalpha(static_cast<unsigned char>(spec[pos]))) ++pos;
    const absl::string_view kind = spec.substr(kind_begin, pos - kind_begin);
    TextColumn c;
    if (kind == "label") {
      c.kind = TextColumn::Kind::kLabel;
    } else if (kind == "dense") {
      c.kind = TextColumn::Kind::kDense;
    } else if (kind == "cat") {
      c.kind = TextColumn::Kind::kCategorical;
    } else if (kind == "list") {
      c.kind = TextColumn::Kind::kCategoricalList;
    } else if (kind == "skip") {
      c.kind = TextColumn::Kind::kSkip;
    } else {
      return error(absl::StrCat("'", kind, "' is not label, dense, cat, list or skip"));
    }
    const bool named = c.kind != TextColumn::Kind::kLabel && c.kind != TextColumn::Kind::kSkip;
    if (named) {
      if (pos >= spec.size() || spec[pos] != ':') {
        return error(absl::StrCat(kind, " needs a feature name: ", kind, ":NAME"));
      }
      ++pos;
      c.feature = name();
      if (c.feature.empty()) return error("the feature name is empty");
    }
    if (c.kind == TextColumn::Kind::kCategoricalList) {
      if (pos + 1 >= spec.size() || spec[pos] != ':') {
        return error("a list needs its separator: list:NAME:SEP");
      }
      c.separator = spec[pos + 1];
      pos += 2;
    }
    int64_t count = 1;
    if (pos < spec.size() && spec[pos] == '*') {
      ++pos;
      const size_t digits = pos;
      while (pos < spec.size() && absl::ascii_isdigit(static_cast<unsigned char>(spec[pos]))) {
        ++pos;
      }
      if (!absl::SimpleAtoi(spec.substr(digits, pos - digits), &count) || count < 1 ||
          count > 100000) {
        return error("a repeat count is *N with 1 <= N <= 100000");
      }
      if (c.kind == TextColumn::Kind::kLabel) return error("there is one label column");
    }
    for (int64_t k = 1; k <= count; ++k) {
      format.columns.push_back(c);
      const bool numbered = count > 1 && (c.kind == TextColumn::Kind::kCategorical ||
                                          c.kind == TextColumn::Kind::kCategoricalList);
      if (numbered) format.columns.back().feature = absl::StrCat(c.feature, k);
    }
    skip_spaces();
    if (pos == spec.size()) break;
    if (spec[pos] != ',') return error("expected ',' between columns");
    ++pos;
  }
  if (absl::Status valid = ValidateTextFormat(format); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("column spec '", spec, "': ", valid.message()));
  }
  return format;
}

TextFormat CriteoFormat() {
  TextFormat format;
  format.delimiter = '\t';
  format.columns.push_back({TextColumn::Kind::kLabel, "", '|'});
  for (int k = 0; k < 13; ++k) format.columns.push_back({TextColumn::Kind::kDense, "dense", '|'});
  for (int k = 1; k <= 26; ++k) {
    format.columns.push_back({TextColumn::Kind::kCategorical, absl::StrCat("C", k), '|'});
  }
  return format;
}

DelimitedTextSource::DelimitedTextSource(TextFormat format,
                                         std::unique_ptr<internal::TextLineParser> parser)
    : format_(std::move(format)), parser_(std::move(parser)), schema_(parser_->schema()) {}

DelimitedTextSource::~DelimitedTextSource() = default;

bool DelimitedTextSource::index_loaded(size_t k) const {
  return k < files_.size() && files_[k]->loaded;
}

absl::StatusOr<std::shared_ptr<const DelimitedTextSource>> DelimitedTextSource::Open(
    std::vector<std::string> paths, TextFormat format, Env* env) {
  if (env == nullptr) env = Env::Default();
  if (paths.empty()) return absl::InvalidArgumentError("a text source needs at least one file");
  TESSERA_RETURN_IF_ERROR(ValidateTextFormat(format));
  auto parser = std::make_unique<internal::TextLineParser>(format);
  const internal::TextLineParser& checker = *parser;
  std::shared_ptr<DelimitedTextSource> source(
      new DelimitedTextSource(std::move(format), std::move(parser)));
  // The scan parses each line into one scratch example (Note [The line index]).
  Batch scratch;
  internal::ParsedColumns scratch_columns = checker.Bind(scratch, 1);
  internal::LineIndex::Labels labels;  // the file being indexed's
  auto check = [&](absl::string_view line, int64_t number, std::string& error) {
    for (internal::ParsedList& list : scratch_columns.lists) list.ids.clear();
    if (!checker.Parse(line, 0, scratch_columns, error)) return false;
    labels.Add(scratch_columns.labels[0], number);
    return true;
  };
  for (std::string& path : paths) {
    auto file = std::make_unique<internal::IndexedTextFile>();
    file->path = std::move(path);
    TESSERA_ASSIGN_OR_RETURN(file->file, env->NewRandomAccessFile(file->path));
    TESSERA_ASSIGN_OR_RETURN(const absl::Time modified, env->ModifiedTime(file->path));
    TESSERA_ASSIGN_OR_RETURN(
        internal::LineIndexKey key,
        internal::MakeLineIndexKey(*file->file, modified, checker.format_hash()));
    const std::string sidecar = absl::StrCat(file->path, ".tsidx");
    absl::StatusOr<internal::LineIndex> loaded = internal::LoadLineIndex(*env, sidecar, key);
    if (loaded.ok()) {
      file->index = *std::move(loaded);
      file->loaded = true;
    } else {
      // Stale (the file or the format changed) is routine; a sidecar that does not load is not.
      if (absl::IsFailedPrecondition(loaded.status())) {
        Log().info("rebuilding the line index of {}: {}", file->path, loaded.status().message());
      } else if (!absl::IsNotFound(loaded.status())) {
        Log().warn("rebuilding the line index of {}: {}", file->path, loaded.status().message());
      }
      labels = internal::LineIndex::Labels();
      TESSERA_ASSIGN_OR_RETURN(
          file->index,
          internal::BuildLineIndex(*file->file, file->path, source->format_.skip_bad_lines,
                                   source->format_.header, check));
      file->index.labels = labels;
      if (absl::Status saved = internal::SaveLineIndex(*env, sidecar, key, file->index);
          !saved.ok()) {
        Log().warn("keeping the line index of {} in memory only: {}", file->path, saved);
      }
    }
    source->first_rows_.push_back(source->size_);
    source->size_ += static_cast<int64_t>(file->index.row_starts.size());
    source->skipped_lines_ += file->index.skipped_lines;
    for (const internal::SkippedLine& skipped : file->index.first_skipped) {
      if (source->first_skipped_.size() >= internal::kNamedSkips) break;
      source->first_skipped_.push_back(
          absl::StrCat(file->path, ":", skipped.line, ": ", skipped.what));
    }
    source->files_.push_back(std::move(file));
  }
  source->first_rows_.push_back(source->size_);
  return std::shared_ptr<const DelimitedTextSource>(std::move(source));
}

std::optional<LabelRange> DelimitedTextSource::labels() const {
  std::optional<LabelRange> range;
  for (const auto& file : files_) {
    const internal::LineIndex::Labels& l = file->index.labels;
    if (file->index.row_starts.empty()) continue;
    const bool first = !range.has_value();
    if (first) range.emplace();
    if (first || l.min < range->min) {
      range->min = l.min;
      range->min_at = absl::StrCat(file->path, ":", l.min_line);
    }
    if (first || l.max > range->max) {
      range->max = l.max;
      range->max_at = absl::StrCat(file->path, ":", l.max_line);
    }
    if (!range->fraction.has_value() && l.fraction_line > 0) {
      range->fraction = l.fraction;
      range->fraction_at = absl::StrCat(file->path, ":", l.fraction_line);
    }
  }
  return range;
}

absl::StatusOr<Batch> DelimitedTextSource::Read(absl::Span<const int64_t> rows) const {
  const int64_t n = static_cast<int64_t>(rows.size());
  Batch batch;
  internal::ParsedColumns columns = parser_->Bind(batch, n);
  // The rows in file order, each with the example it fills: neighbours become one read.
  std::vector<std::pair<int64_t, int64_t>> order(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    if (rows[k] < 0 || rows[k] >= size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("row ", rows[k], " is outside the text source's ", size_, " rows"));
    }
    order[k] = {rows[k], k};
  }
  if (!std::is_sorted(order.begin(), order.end())) std::sort(order.begin(), order.end());

  std::string text, error;
  std::unique_ptr<internal::TextReader> reader;
  size_t reader_file = files_.size();
  for (size_t k = 0; k < order.size();) {
    const size_t f = static_cast<size_t>(
        std::upper_bound(first_rows_.begin(), first_rows_.end(), order[k].first) -
        first_rows_.begin() - 1);
    const internal::IndexedTextFile& file = *files_[f];
    const internal::RowStarts& starts = file.index.row_starts;
    const int64_t first = first_rows_[f], last = first_rows_[f + 1];
    // Where row `local`'s line ends at the latest: the next row, the text's end, or the longest
    // line a row can have.
    auto line_limit = [&](int64_t local) {
      const uint64_t next = local + 1 < last - first ? starts[local + 1] : file.index.text_size;
      return std::min(next, starts[local] + static_cast<uint64_t>(kMaxLineBytes) + 2);
    };
    const uint64_t begin = starts[order[k].first - first];
    uint64_t end = line_limit(order[k].first - first);
    size_t j = k + 1;
    for (; j < order.size() && order[j].first < last; ++j) {
      const int64_t local = order[j].first - first;
      const uint64_t limit = std::max(end, line_limit(local));
      if (starts[local] > end + kMaxGapBytes || limit - begin > kMaxRunBytes) break;
      end = limit;
    }
    if (reader == nullptr || reader_file != f || !reader->ContinuesTo(begin)) {
      if (reader != nullptr) files_[reader_file]->ReturnReader(std::move(reader));
      reader = files_[f]->TakeReader(begin);
      reader_file = f;
    }
    TESSERA_RETURN_IF_ERROR(reader->Read(begin, end, text));
    for (; k < j; ++k) {
      const int64_t local = order[k].first - first;
      const size_t offset = static_cast<size_t>(starts[local] - begin);
      const size_t limit = static_cast<size_t>(line_limit(local) - begin);
      const char* line = text.data() + offset;
      const char* newline = static_cast<const char*>(std::memchr(line, '\n', limit - offset));
      size_t length = newline != nullptr ? static_cast<size_t>(newline - line) : limit - offset;
      if (length > 0 && line[length - 1] == '\r') --length;
      if (!parser_->Parse(absl::string_view(line, length), order[k].second, columns, error)) {
        return absl::DataLossError(absl::StrCat(file.path, ": row ", local, " (at byte ",
                                                starts[local],
                                                " of its text) no longer parses (the file "
                                                "changed since ",
                                                file.path,
                                                ".tsidx indexed it? "
                                                "remove that to index it again): ",
                                                error));
      }
    }
  }
  if (reader != nullptr) files_[reader_file]->ReturnReader(std::move(reader));
  parser_->Finish(columns, batch);
  return batch;
}

}  // namespace tessera
