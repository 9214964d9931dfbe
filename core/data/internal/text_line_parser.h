// TextLineParser: one line of delimited text (tessera/delimited_text.h) into one example of a
// batch, the hot loop of the reader: fields split by hand, numbers by std::from_chars, categorical
// values hashed in place, no string made per field.
//
// Example, the examples of a batch of n lines:
//   TextLineParser parser(format);  // format passed ValidateTextFormat
//   Batch batch;
//   ParsedColumns columns = parser.Bind(batch, n);
//   for (int64_t k = 0; k < n; ++k) {
//     if (!parser.Parse(lines[k], k, columns, error)) return ...;
//   }
//   parser.Finish(columns, batch);
//
// Thread-safety: a parser is immutable; Parse may run on any number of threads, each with its
// own ParsedColumns.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "tessera/data.h"
#include "tessera/delimited_text.h"

namespace tessera::internal {

// The values of one id-list feature as lines are parsed, in any order of examples.
struct ParsedList {
  Ids ids;
  std::vector<std::pair<int64_t, int64_t>> rows;  // example k's ids are ids[first, second)
};

// Where parsed values go: example `slot` of each column of a batch.
struct ParsedColumns {
  float* labels = nullptr;
  std::vector<int64_t*> ids;      // per id feature, in schema order
  std::vector<float*> dense;      // per dense feature, rows of its width
  std::vector<ParsedList> lists;  // per id-list feature, in schema order
  std::string unquoted;           // scratch: a quoted field's value
};

class TextLineParser {
 public:
  // Precondition: ValidateTextFormat(format) is OK.
  explicit TextLineParser(const TextFormat& format);

  // The features a line gives.
  const ExampleSchema& schema() const { return schema_; }
  // A hash of what decides which lines are good (delimiter, column kinds, separators, skipping),
  // not of the feature names: a sidecar index built under another hash is stale.
  uint64_t format_hash() const { return format_hash_; }

  // Makes `batch` a batch of `n` examples of the schema (labels, ids, dense features sized,
  // id lists to come from Finish) and returns where its values go.
  ParsedColumns Bind(Batch& batch, int64_t n) const;
  // Parses `line` (without its line end) into example `slot`: true, or false with `error`
  // saying what is wrong ("expected 40 fields, got 39", "field 3 (dense[1]): 'x' is not a
  // number").
  bool Parse(absl::string_view line, int64_t slot, ParsedColumns& out, std::string& error) const;
  // Moves the id lists gathered in `columns` into `batch` in example order.
  void Finish(ParsedColumns& columns, Batch& batch) const;

 private:
  struct Column {
    TextColumn::Kind kind;
    int32_t feature;  // index among the features of its kind
    int32_t offset;   // kDense: the column within its feature
    char separator;   // kCategoricalList
  };

  std::string Describe(size_t column) const;
  std::string FieldCountError(absl::string_view line) const;

  char delimiter_;
  char quote_;
  std::vector<Column> columns_;
  std::vector<TextColumn> source_columns_;
  std::vector<std::string> dense_names_;  // dense features by index
  std::vector<int64_t> dense_widths_;
  ExampleSchema schema_;
  uint64_t format_hash_;
};

}  // namespace tessera::internal
