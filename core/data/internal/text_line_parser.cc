#include "core/data/internal/text_line_parser.h"

#include <charconv>
#include <cmath>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "core/base/hash.h"
#include "core/data/internal/text_index.h"
#include "tessera/tensor.h"

namespace tessera::internal {
namespace {

// The end of the field starting at `p`: the next `delimiter`, or `end`. A plain loop: most
// fields are a few bytes, shorter than a call to memchr costs.
inline const char* FieldEnd(const char* p, const char* end, char delimiter) {
  while (p != end && *p != delimiter) ++p;
  return p;
}

// A whole, non-empty field as a finite float; false when it is not one. Integers of up to 18
// digits (Criteo's counts) take a short path: exact in int64, then rounded once, as from_chars
// would round the same decimal.
inline bool ParseNumber(const char* begin, const char* end, float& out) {
  const char* p = begin;
  const bool negative = *p == '-';
  if (negative) ++p;
  if (p != end && end - p <= 18) {
    int64_t value = 0;
    const char* q = p;
    while (q != end && static_cast<unsigned>(*q - '0') < 10u) value = value * 10 + (*q++ - '0');
    if (q == end) {
      out = static_cast<float>(negative ? -value : value);
      return true;
    }
  }
  float value;
  const std::from_chars_result result = std::from_chars(begin, end, value);
  if (result.ec != std::errc() || result.ptr != end || !std::isfinite(value)) return false;
  out = value;
  return true;
}

// The quoted field whose opening quote is at `p`, as RFC 4180 has them: it ends at a quote
// followed by the delimiter or the line's end, and "" inside is one quote. Its value goes to
// `out` and `field_end` is set to the delimiter (or `end`) after it; false when no such quote
// closes it.
bool Unquote(const char* p, const char* end, char delimiter, char quote, std::string& out,
             const char*& field_end) {
  out.clear();
  for (const char* q = p + 1; q != end; ++q) {
    if (*q != quote) {
      out.push_back(*q);
    } else if (q + 1 != end && q[1] == quote) {
      out.push_back(quote);
      ++q;
    } else if (q + 1 == end || q[1] == delimiter) {
      field_end = q + 1;
      return true;
    } else {
      return false;  // a quote inside, not doubled
    }
  }
  return false;
}

// A field as an error message shows it: at most 40 bytes, escaped.
std::string Quoted(const char* begin, const char* end) {
  const size_t n = static_cast<size_t>(end - begin);
  std::string shown = absl::CHexEscape(absl::string_view(begin, std::min<size_t>(n, 40)));
  return absl::StrCat("'", shown, n > 40 ? "...'" : "'");
}

}  // namespace

TextLineParser::TextLineParser(const TextFormat& format)
    : delimiter_(format.delimiter), quote_(format.quote), source_columns_(format.columns) {
  std::string hashed = absl::StrCat("tessera text v1 ", kMaxLineBytes, " ",
                                    format.skip_bad_lines ? "skip" : "strict", " ",
                                    std::string(1, format.delimiter));
  // The quote and the header decide lines too: an index built without quoting is rebuilt.
  if (format.quote != '\0') absl::StrAppend(&hashed, " quote ", static_cast<int>(format.quote));
  if (format.header) hashed += " header";
  for (const TextColumn& c : format.columns) {
    Column column{c.kind, 0, 0, c.separator};
    switch (c.kind) {
      case TextColumn::Kind::kLabel:
        hashed += " label";
        break;
      case TextColumn::Kind::kDense: {
        hashed += " dense";
        size_t f = 0;
        while (f < dense_names_.size() && dense_names_[f] != c.feature) ++f;
        if (f == dense_names_.size()) {
          dense_names_.push_back(c.feature);
          dense_widths_.push_back(0);
        }
        column.feature = static_cast<int32_t>(f);
        column.offset = static_cast<int32_t>(dense_widths_[f]++);
        break;
      }
      case TextColumn::Kind::kCategorical:
        hashed += " cat";
        column.feature = static_cast<int32_t>(schema_.id_features.size());
        schema_.id_features.push_back(c.feature);
        schema_.text_features.insert(c.feature);
        break;
      case TextColumn::Kind::kCategoricalList:
        absl::StrAppend(&hashed, " list", std::string(1, c.separator));
        column.feature = static_cast<int32_t>(schema_.id_list_features.size());
        schema_.id_list_features.push_back(c.feature);
        schema_.text_features.insert(c.feature);
        break;
      case TextColumn::Kind::kSkip:
        hashed += " skip";
        break;
    }
    columns_.push_back(column);
  }
  for (size_t f = 0; f < dense_names_.size(); ++f) {
    schema_.dense_features.emplace(dense_names_[f], Shape{dense_widths_[f]});
  }
  format_hash_ = static_cast<uint64_t>(StringId(hashed));
}

ParsedColumns TextLineParser::Bind(Batch& batch, int64_t n) const {
  ParsedColumns out;
  batch.size = n;
  batch.labels = Tensor(Shape{n, 1});
  out.labels = batch.labels.data();
  for (const std::string& name : schema_.id_features) {
    Ids& ids = batch.ids[name];
    ids.resize(static_cast<size_t>(n));
    out.ids.push_back(ids.data());
  }
  for (size_t f = 0; f < dense_names_.size(); ++f) {
    Tensor& dense = batch.dense[dense_names_[f]];
    dense = Tensor(Shape{n, dense_widths_[f]});
    out.dense.push_back(dense.data());
  }
  out.lists.resize(schema_.id_list_features.size());
  for (ParsedList& list : out.lists) list.rows.assign(static_cast<size_t>(n), {0, 0});
  return out;
}

bool TextLineParser::Parse(absl::string_view line, int64_t slot, ParsedColumns& out,
                           std::string& error) const {
  const char* p = line.data();
  const char* const end = p + line.size();
  const size_t count = columns_.size();
  for (size_t c = 0; c < count; ++c) {
    const Column& column = columns_[c];
    const char* field_end;
    // The field's value: [value, value_end), the field itself unless it is quoted.
    const char* value = p;
    const char* value_end;
    uint64_t id = 0;
    if (quote_ != '\0' && p != end && *p == quote_) {
      if (!Unquote(p, end, delimiter_, quote_, out.unquoted, field_end)) {
        error = absl::StrCat(Describe(c), ": ", Quoted(p, end),
                             " opens a quote that no quote before a delimiter closes");
        return false;
      }
      value = out.unquoted.data();
      value_end = value + out.unquoted.size();
      if (column.kind == TextColumn::Kind::kCategorical) id = StringId(out.unquoted);
    } else if (column.kind == TextColumn::Kind::kCategorical) {
      // StringId (core/base/hash.h: FNV-1a 64) computed in the same pass that finds the field's
      // end: categorical values are most of a Criteo line. The tests check it equals StringId.
      id = 0xcbf29ce484222325ULL;
      for (field_end = p; field_end != end && *field_end != delimiter_; ++field_end) {
        id = (id ^ static_cast<uint8_t>(*field_end)) * 0x100000001b3ULL;
      }
      value_end = field_end;
    } else {
      field_end = FieldEnd(p, end, delimiter_);
      value_end = field_end;
    }
    // Every column but the last ends at a delimiter; the last ends the line.
    if ((field_end == end) != (c + 1 == count)) {
      error = FieldCountError(line);
      return false;
    }
    switch (column.kind) {
      case TextColumn::Kind::kLabel:
        if (value == value_end || !ParseNumber(value, value_end, out.labels[slot])) {
          error = absl::StrCat(Describe(c), ": ", Quoted(value, value_end), " is not a number");
          return false;
        }
        break;
      case TextColumn::Kind::kDense: {
        float& number =
            out.dense[column.feature][slot * dense_widths_[column.feature] + column.offset];
        if (value == value_end) {
          number = 0.0f;
        } else if (!ParseNumber(value, value_end, number)) {
          error = absl::StrCat(Describe(c), ": ", Quoted(value, value_end), " is not a number");
          return false;
        }
        break;
      }
      case TextColumn::Kind::kCategorical:
        out.ids[column.feature][slot] = static_cast<int64_t>(id);
        break;
      case TextColumn::Kind::kCategoricalList: {
        ParsedList& list = out.lists[column.feature];
        const int64_t first = static_cast<int64_t>(list.ids.size());
        for (const char* item = value; item < value_end;) {
          const char* item_end = FieldEnd(item, value_end, column.separator);
          if (item_end != item) {
            list.ids.push_back(StringId(absl::string_view(item, item_end - item)));
          }
          item = item_end + 1;
        }
        list.rows[slot] = {first, static_cast<int64_t>(list.ids.size())};
        break;
      }
      case TextColumn::Kind::kSkip:
        break;
    }
    p = field_end + 1;
  }
  return true;
}

void TextLineParser::Finish(ParsedColumns& columns, Batch& batch) const {
  for (size_t f = 0; f < columns.lists.size(); ++f) {
    ParsedList& parsed = columns.lists[f];
    IdList& list = batch.id_lists[schema_.id_list_features[f]];
    list.row_splits.assign(parsed.rows.size() + 1, 0);
    list.ids.clear();
    list.ids.reserve(parsed.ids.size());
    for (size_t k = 0; k < parsed.rows.size(); ++k) {
      list.ids.insert(list.ids.end(), parsed.ids.begin() + parsed.rows[k].first,
                      parsed.ids.begin() + parsed.rows[k].second);
      list.row_splits[k + 1] = static_cast<int64_t>(list.ids.size());
    }
  }
}

std::string TextLineParser::Describe(size_t column) const {
  const TextColumn& c = source_columns_[column];
  const Column& plan = columns_[column];
  std::string what;
  switch (c.kind) {
    case TextColumn::Kind::kLabel:
      what = "label";
      break;
    case TextColumn::Kind::kDense:
      what = dense_widths_[plan.feature] > 1 ? absl::StrCat(c.feature, "[", plan.offset, "]")
                                             : c.feature;
      break;
    default:
      what = c.feature;
  }
  return absl::StrCat("field ", column + 1, " (", what, ")");
}

std::string TextLineParser::FieldCountError(absl::string_view line) const {
  size_t fields = 1;
  for (const char c : line) fields += c == delimiter_ ? 1 : 0;
  return absl::StrCat("expected ", columns_.size(), " fields, got ", fields);
}

}  // namespace tessera::internal
