#include "tessera/delimited_text.h"

#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "core/base/hash.h"
#include "core/base/mem_env.h"
#include "core/data/internal/text_index.h"
#include "core/data/internal/text_line_parser.h"
#include "tessera/data.h"
#include "tests/status_util.h"
#include "tests/temp_dir.h"

namespace tessera {
namespace {

using testing::TempDir;

using testing::ValueOrDie;

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  REQUIRE(out.good());
}

// `text` as one gzip member.
std::string Gzip(const std::string& text, int level = 6) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, text.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

// Line i of a Criteo-layout file whose every value can be told from i: label i % 2; I1 = i,
// I2 = -i (empty when i % 5 == 0), I3..I13 = k * i; C_k = 8 hex digits of i * k (empty when
// (i + k) % 7 == 0).
std::string CriteoLine(int64_t i) {
  std::string line = absl::StrCat(i % 2, "\t", i, "\t", i % 5 == 0 ? "" : absl::StrCat(-i));
  for (int k = 3; k <= 13; ++k) absl::StrAppend(&line, "\t", k * i);
  for (int k = 1; k <= 26; ++k) {
    absl::StrAppend(
        &line, "\t",
        (i + k) % 7 == 0 ? "" : absl::StrFormat("%08x", (i * k * 2654435761u) & 0xffffffffu));
  }
  return line;
}

std::string CriteoText(int64_t first, int64_t count) {
  std::string text;
  for (int64_t i = first; i < first + count; ++i) absl::StrAppend(&text, CriteoLine(i), "\n");
  return text;
}

// Checks that example k of `batch` is line `line` of CriteoLine.
void CheckCriteoRow(const Batch& batch, int64_t k, int64_t i) {
  CAPTURE(k);
  CAPTURE(i);
  CHECK(batch.labels.values()[k] == static_cast<float>(i % 2));
  const Tensor& dense = batch.dense.at("dense");
  REQUIRE(dense.shape() == (Shape{batch.size, 13}));
  CHECK(dense.row(k)[0] == static_cast<float>(i));
  CHECK(dense.row(k)[1] == (i % 5 == 0 ? 0.0f : static_cast<float>(-i)));
  CHECK(dense.row(k)[12] == static_cast<float>(13 * i));
  for (int c = 1; c <= 26; ++c) {
    const std::string value =
        (i + c) % 7 == 0 ? "" : absl::StrFormat("%08x", (i * c * 2654435761u) & 0xffffffffu);
    CHECK(batch.ids.at(absl::StrCat("C", c))[k] == StringId(value));
  }
}

std::vector<int64_t> Range(int64_t begin, int64_t end) {
  std::vector<int64_t> rows;
  for (int64_t r = begin; r < end; ++r) rows.push_back(r);
  return rows;
}

TEST_CASE("the Criteo preset reads labels, 13 dense values and 26 hashed categorical values") {
  TempDir dir;
  const std::string path = dir.Sub("day.tsv");
  WriteFile(path, CriteoText(0, 20));
  auto source = ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()));
  CHECK(source->size() == 20);
  CHECK(source->sequential());
  const ExampleSchema& schema = source->schema();
  REQUIRE(schema.id_features.size() == 26);
  CHECK(schema.id_features.front() == "C1");
  CHECK(schema.id_features.back() == "C26");
  CHECK(schema.dense_features.at("dense") == Shape{13});
  CHECK(schema.id_list_features.empty());
  const Batch batch = ValueOrDie(source->Read(std::vector<int64_t>{0, 7, 19, 5, 7}));
  REQUIRE(batch.size == 5);
  const std::vector<int64_t> lines = {0, 7, 19, 5, 7};
  for (int64_t k = 0; k < 5; ++k) CheckCriteoRow(batch, k, lines[k]);
  // A hand-written line, to pin the meaning of each field.
  WriteFile(path, "1\t5\t\t-3\t0\t0\t0\t0\t0\t0\t0\t0\t0\t2.5\t68fd1e64" + std::string(25, '\t') +
                      "\r\n");
  auto single = ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()));
  const Batch one = ValueOrDie(single->Read(std::vector<int64_t>{0}));
  CHECK(one.labels.values()[0] == 1.0f);
  CHECK(one.dense.at("dense").row(0)[0] == 5.0f);
  CHECK(one.dense.at("dense").row(0)[1] == 0.0f);  // empty: 0
  CHECK(one.dense.at("dense").row(0)[2] == -3.0f);
  CHECK(one.dense.at("dense").row(0)[12] == 2.5f);
  CHECK(one.ids.at("C1")[0] == StringId("68fd1e64"));
  CHECK(one.ids.at("C26")[0] == StringId(""));  // empty, before the "\r\n"
}

TEST_CASE("a column spec makes a format, and a bad one is refused saying why") {
  const TextFormat criteo = ValueOrDie(ParseTextFormat("label,dense:dense*13,cat:C*26"));
  const TextFormat preset = CriteoFormat();
  REQUIRE(criteo.columns.size() == preset.columns.size());
  for (size_t k = 0; k < preset.columns.size(); ++k) {
    CAPTURE(k);
    CHECK(criteo.columns[k].kind == preset.columns[k].kind);
    CHECK(criteo.columns[k].feature == preset.columns[k].feature);
  }
  const TextFormat format = ValueOrDie(
      ParseTextFormat(" label, dense:age ,cat:user,list:history:|,list:tags:;*2,skip*2", ','));
  CHECK(format.delimiter == ',');
  REQUIRE(format.columns.size() == 8);
  CHECK(format.columns[1].kind == TextColumn::Kind::kDense);
  CHECK(format.columns[1].feature == "age");
  CHECK(format.columns[3].kind == TextColumn::Kind::kCategoricalList);
  CHECK(format.columns[3].separator == '|');
  CHECK(format.columns[4].feature == "tags1");
  CHECK(format.columns[5].feature == "tags2");
  CHECK(format.columns[5].separator == ';');
  CHECK(format.columns[7].kind == TextColumn::Kind::kSkip);

  struct Case {
    const char* spec;
    const char* says;
  };
  const std::vector<Case> bad = {
      {"", "not label, dense"},
      {"label,label", "exactly one label"},
      {"dense:x", "exactly one label"},
      {"label,foo", "'foo' is not"},
      {"label,dense", "needs a feature name"},
      {"label,cat:", "name is empty"},
      {"label,list:h", "separator"},
      {"label,cat:a,cat:a", "named twice"},
      {"label,dense:x,cat:x", "named twice"},
      {"label,cat:x,dense:x", "already an id feature"},
      {"label*2", "one label"},
      {"label,cat:x*0", "repeat count"},
      {"label,cat:x y", "expected ','"},
      {"label,list:h:\t", "separator"},  // the delimiter
  };
  for (const Case& c : bad) {
    const std::string spec = c.spec;
    CAPTURE(spec);
    const absl::Status status = ParseTextFormat(c.spec).status();
    CHECK(absl::IsInvalidArgument(status));
    CHECK_MESSAGE(status.message().find(c.says) != absl::string_view::npos, status.message());
  }
}

TEST_CASE("categorical lists become id lists, an empty field an empty list") {
  TempDir dir;
  const std::string path = dir.Sub("lists.csv");
  WriteFile(path, "1,a|b|c,u1\n0,,u2\n1,x||y|,u3");  // no newline at the end
  const TextFormat format = ValueOrDie(ParseTextFormat("label,list:history:|,cat:user", ','));
  auto source = ValueOrDie(DelimitedTextSource::Open({path}, format));
  CHECK(source->schema().id_list_features == std::vector<std::string>{"history"});
  const Dataset data = ValueOrDie(Dataset::FromSource(source));
  CHECK(data.IdListFeatureNames() == std::vector<std::string>{"history"});
  const Batch batch = ValueOrDie(data.Gather(std::vector<int64_t>{2, 0, 1}));
  const IdList& history = batch.id_lists.at("history");
  CHECK(history.row_splits == std::vector<int64_t>{0, 2, 5, 5});
  CHECK(history.ids ==
        Ids{StringId("x"), StringId("y"), StringId("a"), StringId("b"), StringId("c")});
  CHECK(history.weights.empty());
  CHECK(batch.ids.at("user") == Ids{StringId("u3"), StringId("u1"), StringId("u2")});
}

TEST_CASE("gzip reads equal plain reads, across access points and gzip members") {
  TempDir dir;
  // About 6 MB of text: several access points (one per MiB).
  const int64_t n = 30000;
  const std::string first = CriteoText(0, n / 2), second = CriteoText(n / 2, n - n / 2);
  REQUIRE(first.size() + second.size() > (size_t{4} << 20));
  WriteFile(dir.Sub("plain.tsv"), first + second);
  WriteFile(dir.Sub("one.gz"), Gzip(first + second));
  WriteFile(dir.Sub("two.gz"), Gzip(first, 1) + Gzip(second, 9));  // two members
  auto plain = ValueOrDie(DelimitedTextSource::Open({dir.Sub("plain.tsv")}, CriteoFormat()));
  REQUIRE(plain->size() == n);
  for (const char* name : {"one.gz", "two.gz"}) {
    CAPTURE(name);
    auto gz = ValueOrDie(DelimitedTextSource::Open({dir.Sub(name)}, CriteoFormat()));
    REQUIRE(gz->size() == n);
    // Rows from all over the file in a scrambled order, then long contiguous runs.
    std::vector<int64_t> rows;
    for (int64_t k = 0; k < 300; ++k) rows.push_back((k * 7919) % n);
    rows.push_back(n - 1);
    rows.push_back(0);
    for (const std::vector<int64_t>& ask :
         {rows, Range(0, 9000), Range(n / 2 - 100, n / 2 + 4000), Range(n - 5000, n)}) {
      const Batch a = ValueOrDie(plain->Read(ask));
      const Batch b = ValueOrDie(gz->Read(ask));
      CHECK(a.labels.values() == b.labels.values());
      CHECK(a.dense.at("dense").values() == b.dense.at("dense").values());
      CHECK(a.ids == b.ids);
      CheckCriteoRow(b, 0, ask[0]);
      CheckCriteoRow(b, static_cast<int64_t>(ask.size()) - 1, ask.back());
    }
  }
  // The index really has several access points to start from.
  std::unique_ptr<RandomAccessFile> file =
      ValueOrDie(Env::Default()->NewRandomAccessFile(dir.Sub("two.gz")));
  const internal::LineIndex index = ValueOrDie(
      internal::BuildLineIndex(*file, dir.Sub("two.gz"), false, false,
                               [](absl::string_view, int64_t, std::string&) { return true; }));
  CHECK(index.gzip);
  CHECK(index.points.size() >= 4);
  CHECK(index.text_size == first.size() + second.size());
}

TEST_CASE("a bad line is an error naming file and line, or is skipped and counted") {
  TempDir dir;
  struct Case {
    std::string line;
    std::string says;
  };
  const std::string good = CriteoLine(3);
  const std::vector<Case> cases = {
      {good.substr(0, good.rfind('\t')), "expected 40 fields, got 39"},
      {good + "\textra", "expected 40 fields, got 41"},
      {"x1" + good.substr(1), "field 1 (label): 'x1' is not a number"},
      {"\t" + good.substr(1), "field 1 (label): '' is not a number"},
      {"1\t2\tx1" + good.substr(good.find('\t', good.find('\t', 2) + 1)),
       "field 3 (dense[1]): 'x1' is not a number"},
      {"1\t2\tnan" + good.substr(good.find('\t', good.find('\t', 2) + 1)), "'nan' is not"},
      {"1\t2\t1e99" + good.substr(good.find('\t', good.find('\t', 2) + 1)), "'1e99' is not"},
      {std::string("1\t\0\x01\xff", 5), "expected 40 fields"},
      {std::string(2 << 20, 'z'), "longer than 1048576 bytes"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.says);
    const std::string path = dir.Sub("bad.tsv");
    // The bad line is line 3, between good ones; a blank line does not count as an example.
    WriteFile(path, CriteoLine(0) + "\n\n" + c.line + "\n" + CriteoLine(1) + "\n");
    TextFormat format = CriteoFormat();
    const absl::Status status = DelimitedTextSource::Open({path}, format).status();
    CHECK(absl::IsInvalidArgument(status));
    CHECK_MESSAGE(status.message().find(absl::StrCat(path, ":3: ")) == 0, status.message());
    CHECK_MESSAGE(status.message().find(c.says) != absl::string_view::npos, status.message());
    format.skip_bad_lines = true;
    auto skipping = ValueOrDie(DelimitedTextSource::Open({path}, format));
    CHECK(skipping->skipped_lines() == 1);
    REQUIRE(skipping->size() == 2);
    const Batch batch = ValueOrDie(skipping->Read(std::vector<int64_t>{1, 0}));
    CheckCriteoRow(batch, 0, 1);
    CheckCriteoRow(batch, 1, 0);
  }
}

TEST_CASE("binary garbage, a truncated or corrupt gzip file are errors, never a crash") {
  TempDir dir;
  const std::string text = CriteoText(0, 3000);
  const std::string gz = Gzip(text);
  const std::string path = dir.Sub("data.gz");
  for (const size_t keep : {gz.size() - 1, gz.size() - 9, gz.size() / 2, size_t{12}}) {
    CAPTURE(keep);
    WriteFile(path, gz.substr(0, keep));
    const absl::Status status = DelimitedTextSource::Open({path}, CriteoFormat()).status();
    CHECK(absl::IsDataLoss(status));
    CHECK(status.message().find(path) != absl::string_view::npos);
  }
  WriteFile(path, gz.substr(0, gz.size() - 9));
  const absl::Status truncated = DelimitedTextSource::Open({path}, CriteoFormat()).status();
  CHECK_MESSAGE(truncated.message().find("truncated") != absl::string_view::npos,
                truncated.message());
  std::string flipped = gz;
  flipped[flipped.size() / 2] ^= 0x55;
  WriteFile(path, flipped);
  CHECK(absl::IsDataLoss(DelimitedTextSource::Open({path}, CriteoFormat()).status()));
  WriteFile(path, gz + "trailing garbage");
  CHECK(absl::IsDataLoss(DelimitedTextSource::Open({path}, CriteoFormat()).status()));

  std::string garbage;
  uint64_t x = 12345;
  for (int k = 0; k < 200000; ++k) garbage.push_back(static_cast<char>((x = Mix64(x)) >> 56));
  WriteFile(path, garbage);
  CHECK(absl::IsInvalidArgument(DelimitedTextSource::Open({path}, CriteoFormat()).status()));
  TextFormat skip = CriteoFormat();
  skip.skip_bad_lines = true;
  auto skipped = ValueOrDie(DelimitedTextSource::Open({path}, skip));
  CHECK(skipped->size() == 0);
  CHECK(skipped->skipped_lines() > 0);
}

TEST_CASE(
    "quoted fields read as in CSV: the delimiter inside, a doubled quote, a quoted u5 as u5") {
  TempDir dir;
  const std::string path = dir.Sub("quoted.csv");
  TextFormat format = ValueOrDie(ParseTextFormat("label,dense:x,cat:user,list:tags:|", ','));
  CHECK(format.quote == '"');
  WriteFile(path, "1,\"2.5\",\"u5\",\"a|b\"\n0,3,u5,\"c,d|e\"\"f\"\n\"1\",\"\",\"\",\"\"\n");
  auto source = ValueOrDie(DelimitedTextSource::Open({path}, format));
  REQUIRE(source->size() == 3);
  const Batch batch = ValueOrDie(source->Read(std::vector<int64_t>{0, 1, 2}));
  CHECK(batch.labels.values()[0] == 1.0f);
  CHECK(batch.labels.values()[2] == 1.0f);
  CHECK(batch.dense.at("x").values()[0] == 2.5f);
  CHECK(batch.dense.at("x").values()[2] == 0.0f);  // an empty quoted number is 0, as an empty one
  CHECK(batch.ids.at("user")[0] == StringId("u5"));
  CHECK(batch.ids.at("user")[1] == StringId("u5"));  // quoted or not: one value
  CHECK(batch.ids.at("user")[2] == StringId(""));
  const IdList& tags = batch.id_lists.at("tags");
  CHECK(tags.row_splits == std::vector<int64_t>{0, 2, 4, 4});
  CHECK(tags.ids == Ids{StringId("a"), StringId("b"), StringId("c,d"), StringId("e\"f")});

  // A quote that nothing closes, or a stray one inside, is a bad line naming the field.
  for (const char* bad : {"1,2,\"u5,x\n", "1,2,\"u\"5,x\n"}) {
    CAPTURE(bad);
    WriteFile(path, bad);
    const absl::Status status = DelimitedTextSource::Open({path}, format).status();
    CHECK(absl::IsInvalidArgument(status));
    CHECK_MESSAGE(absl::StrContains(status.message(), ":1: field 3 (user)"), status.message());
  }
  // Without quoting, the quotes are part of the value.
  format.quote = '\0';
  WriteFile(path, "1,2,\"u5\",a\n");
  const Batch raw = ValueOrDie(
      ValueOrDie(DelimitedTextSource::Open({path}, format))->Read(std::vector<int64_t>{0}));
  CHECK(raw.ids.at("user")[0] == StringId("\"u5\""));
  format.quote = ',';
  CHECK(absl::IsInvalidArgument(ValidateTextFormat(format)));
  format.quote = '|';  // the list's separator
  CHECK(absl::IsInvalidArgument(ValidateTextFormat(format)));
}

TEST_CASE("a source knows its labels' range, each end named by file and line, loaded or built") {
  TempDir dir;
  const TextFormat format = ValueOrDie(ParseTextFormat("label,cat:user", ','));
  WriteFile(dir.Sub("a.csv"), "1,u\n\n0,u\n1,u\n");  // a blank line 2: no example
  WriteFile(dir.Sub("b.csv"), "1,u\n2.5,u\n-1,u\n");
  for (const bool loaded : {false, true}) {
    CAPTURE(loaded);
    auto source =
        ValueOrDie(DelimitedTextSource::Open({dir.Sub("a.csv"), dir.Sub("b.csv")}, format));
    CHECK(source->index_loaded(1) == loaded);
    const std::optional<LabelRange> range = source->labels();
    REQUIRE(range.has_value());
    CHECK(range->min == -1);
    CHECK(range->min_at == dir.Sub("b.csv") + ":3");
    CHECK(range->max == 2.5);
    CHECK(range->max_at == dir.Sub("b.csv") + ":2");
    REQUIRE(range->fraction.has_value());
    CHECK(*range->fraction == 2.5);
    CHECK(range->fraction_at == dir.Sub("b.csv") + ":2");
  }
  WriteFile(dir.Sub("c.csv"), "0,u\n");
  const std::optional<LabelRange> whole =
      ValueOrDie(DelimitedTextSource::Open({dir.Sub("c.csv")}, format))->labels();
  REQUIRE(whole.has_value());
  CHECK_FALSE(whole->fraction.has_value());
  CHECK(whole->min_at == dir.Sub("c.csv") + ":1");
}

TEST_CASE("a header line starts every file and is no example") {
  TempDir dir;
  TextFormat format = ValueOrDie(ParseTextFormat("label,dense:x,cat:user", ','));
  format.header = true;
  WriteFile(dir.Sub("a.csv"), "label,x,user\n1,2,u1\n0,3,u2\n");
  WriteFile(dir.Sub("b.csv"), "label,x,user\n1,4,u3\n");
  auto source = ValueOrDie(DelimitedTextSource::Open({dir.Sub("a.csv"), dir.Sub("b.csv")}, format));
  CHECK(source->size() == 3);
  const Batch batch = ValueOrDie(source->Read(std::vector<int64_t>{0, 2}));
  CHECK(batch.ids.at("user")[0] == StringId("u1"));
  CHECK(batch.ids.at("user")[1] == StringId("u3"));
  // Loaded from its index: the same rows.
  CHECK(ValueOrDie(DelimitedTextSource::Open({dir.Sub("a.csv"), dir.Sub("b.csv")}, format))
            ->index_loaded(0));
  // Without the option the header is a bad line, named.
  format.header = false;
  const absl::Status status = DelimitedTextSource::Open({dir.Sub("a.csv")}, format).status();
  CHECK(absl::IsInvalidArgument(status));
  CHECK_MESSAGE(
      absl::StrContains(status.message(), "a.csv:1: field 1 (label): 'label' is not a number"),
      status.message());
}

TEST_CASE("skipped bad lines are named by file and line, the first five, from a loaded index too") {
  TempDir dir;
  TextFormat format = ValueOrDie(ParseTextFormat("label,dense:x,cat:user", ','));
  format.skip_bad_lines = true;
  const std::string path = dir.Sub("dirty.csv");
  std::string text = "1,2,u1\n1,2\n";             // line 2: a field short
  for (int k = 0; k < 6; ++k) text += "x,2,u\n";  // lines 3-8: no label
  text += "0,1,u9\n";
  WriteFile(path, text);
  for (const bool loaded : {false, true}) {
    CAPTURE(loaded);
    auto source = ValueOrDie(DelimitedTextSource::Open({path}, format));
    CHECK(source->index_loaded(0) == loaded);
    CHECK(source->size() == 2);
    CHECK(source->skipped_lines() == 7);
    const std::vector<std::string>& named = source->first_skipped();
    REQUIRE(named.size() == 5);
    CHECK(named[0] == path + ":2: expected 3 fields, got 2");
    CHECK(named[1] == path + ":3: field 1 (label): 'x' is not a number");
    CHECK(absl::StartsWith(named[4], path + ":6: "));
  }
}

TEST_CASE("a file's categorical columns are text features, and its other columns are not") {
  const TextFormat format =
      ValueOrDie(ParseTextFormat("label,dense:age,cat:user,list:history:|,skip", ','));
  TempDir dir;
  const std::string path = dir.Sub("rows.csv");
  WriteFile(path, "1,30,30440,a|b,x\n");
  auto source = ValueOrDie(DelimitedTextSource::Open({path}, format));
  CHECK(source->schema().text_features == std::set<std::string>{"history", "user"});
  const Dataset data = ValueOrDie(Dataset::FromSource(source));
  CHECK(data.TextFeatureNames() == std::vector<std::string>{"history", "user"});
  // The numeric-looking value is a text: its id is StringId("30440"), what serving takes 30440 as.
  CHECK(ValueOrDie(source->Read(std::vector<int64_t>{0})).ids.at("user")[0] == StringId("30440"));
  CHECK(CriteoFormat().columns.size() == 40);
}

TEST_CASE("the sidecar index is loaded when fresh, and rebuilt when stale, corrupt or forged") {
  TempDir dir;
  const std::string path = dir.Sub("data.tsv.gz");
  const std::string sidecar = path + ".tsidx";
  WriteFile(path, Gzip(CriteoText(0, 5000)));
  auto built = ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()));
  CHECK_FALSE(built->index_loaded(0));
  REQUIRE(Env::Default()->FileExists(sidecar));
  auto loaded = ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()));
  CHECK(loaded->index_loaded(0));
  CHECK(loaded->size() == 5000);
  const std::vector<int64_t> rows = {4999, 0, 2500, 2501, 17};
  const Batch expected = ValueOrDie(built->Read(rows));
  CHECK(ValueOrDie(loaded->Read(rows)).ids == expected.ids);

  // Another format's checks: the index does not apply.
  TextFormat skipping = CriteoFormat();
  skipping.skip_bad_lines = true;
  CHECK_FALSE(ValueOrDie(DelimitedTextSource::Open({path}, skipping))->index_loaded(0));

  // The data changed: stale, rebuilt with the new rows.
  WriteFile(path, Gzip(CriteoText(0, 5001)));
  auto grown = ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()));
  CHECK_FALSE(grown->index_loaded(0));
  CHECK(grown->size() == 5001);
  CHECK(ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()))->index_loaded(0));

  // Corrupt sidecars: a flipped byte, cut short, garbage, empty.
  const std::string good = testing::ReadFile(sidecar);
  std::string flipped = good;
  flipped[good.size() / 2] ^= 1;
  for (const std::string& forged :
       {flipped, good.substr(0, good.size() - 100), std::string(5000, 'x'), std::string()}) {
    WriteFile(sidecar, forged);
    auto rebuilt = ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()));
    CHECK_FALSE(rebuilt->index_loaded(0));
    CHECK(rebuilt->size() == 5001);
    CHECK(testing::ReadFile(sidecar) == good);  // rewritten
  }

  // Forged indexes with a valid checksum: offsets out of place are refused (and rebuilt);
  // offsets in place but wrong make reads fail with DataLoss, never crash.
  std::unique_ptr<RandomAccessFile> file = ValueOrDie(Env::Default()->NewRandomAccessFile(path));
  const internal::LineIndexKey key = ValueOrDie(
      internal::MakeLineIndexKey(*file, ValueOrDie(Env::Default()->ModifiedTime(path)),
                                 internal::TextLineParser(CriteoFormat()).format_hash()));
  const internal::LineIndex index =
      ValueOrDie(internal::LoadLineIndex(*Env::Default(), sidecar, key));
  REQUIRE(index.points.size() >= 2);
  // A stale index says what changed (logged at info, the index rebuilt).
  internal::LineIndexKey changed = key;
  changed.file_fingerprint ^= 1;
  absl::Status stale = internal::LoadLineIndex(*Env::Default(), sidecar, changed).status();
  CHECK(absl::IsFailedPrecondition(stale));
  CHECK_MESSAGE(absl::StrContains(stale.message(), "the file changed"), stale.message());
  changed = key;
  changed.format_hash ^= 1;
  stale = internal::LoadLineIndex(*Env::Default(), sidecar, changed).status();
  CHECK(absl::IsFailedPrecondition(stale));
  CHECK_MESSAGE(absl::StrContains(stale.message(), "another format"), stale.message());
  // An index of another build's layout version is stale too (rebuilt at info), not broken.
  std::string other_layout = testing::ReadFile(sidecar);
  other_layout[8] = 2;  // the version word, little-endian
  WriteFile(sidecar, other_layout);
  stale = internal::LoadLineIndex(*Env::Default(), sidecar, key).status();
  CHECK(absl::IsFailedPrecondition(stale));
  CHECK_MESSAGE(absl::StrContains(stale.message(), "another layout (version 2"), stale.message());
  CHECK_FALSE(ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()))->index_loaded(0));
  auto forge = [&](auto change) {
    internal::LineIndex forged = index;
    change(forged);
    REQUIRE(internal::SaveLineIndex(*Env::Default(), sidecar, key, forged).ok());
    return ValueOrDie(DelimitedTextSource::Open({path}, CriteoFormat()));
  };
  // The index's row starts, with start `f(row, start)` instead.
  auto remap = [](internal::LineIndex& i, auto f) {
    internal::RowStarts starts;
    for (size_t row = 0; row < i.row_starts.size(); ++row) {
      starts.push_back(f(row, i.row_starts[row]));
    }
    i.row_starts = std::move(starts);
  };
  auto swapped = forge([&](internal::LineIndex& i) {
    const uint64_t third = i.row_starts[3], fourth = i.row_starts[4];
    remap(i, [&](size_t row, uint64_t start) {
      return row == 3 ? fourth : row == 4 ? third : start;
    });
  });
  CHECK_FALSE(swapped->index_loaded(0));
  auto past_end = forge([&](internal::LineIndex& i) {
    const size_t last = i.row_starts.size() - 1;
    const uint64_t end = i.text_size;
    remap(i, [&](size_t row, uint64_t start) { return row == last ? end : start; });
  });
  CHECK_FALSE(past_end->index_loaded(0));
  auto bad_bits = forge([](internal::LineIndex& i) { i.points[1].bits = 8; });
  CHECK_FALSE(bad_bits->index_loaded(0));

  auto shifted = forge(
      [&](internal::LineIndex& i) { remap(i, [](size_t, uint64_t start) { return start + 1; }); });
  CHECK(shifted->index_loaded(0));
  CHECK(absl::IsDataLoss(shifted->Read(std::vector<int64_t>{0}).status()));
  auto moved_point = forge([](internal::LineIndex& i) { i.points[1].file_offset += 3; });
  CHECK(moved_point->index_loaded(0));
  CHECK_FALSE(moved_point->Read(Range(4900, 5001)).ok());
  auto longer = forge([](internal::LineIndex& i) { i.text_size = uint64_t{1} << 50; });
  CHECK(longer->index_loaded(0));
  CHECK(absl::IsDataLoss(longer->Read(std::vector<int64_t>{5000}).status()));
  CHECK(ValueOrDie(longer->Read(std::vector<int64_t>{10})).size == 1);
}

TEST_CASE("row starts keep any sequence in about four bytes a row") {
  // Near ones, one 4 GiB past its block's base, one before it (a forged index can say anything).
  std::vector<uint64_t> values;
  for (uint64_t k = 0; k < 200; ++k) values.push_back(k * 250);
  values[70] = values[64] + (uint64_t{1} << 32);
  values[71] = values[64] + (uint64_t{1} << 32) - 2;  // just fits
  values[130] = 3;                                    // before its base
  values.push_back(uint64_t{1} << 60);
  internal::RowStarts starts;
  for (const uint64_t v : values) starts.push_back(v);
  REQUIRE(starts.size() == values.size());
  for (size_t k = 0; k < values.size(); ++k) CHECK(starts[k] == values[k]);
  CHECK(starts.far().size() == 3);
  CHECK(starts.bases().size() == 4);
  internal::RowStarts copy;
  CHECK(copy.Assign(starts.bases(), starts.deltas(), starts.far()));
  for (size_t k = 0; k < values.size(); ++k) CHECK(copy[k] == values[k]);
  // Parts that do not fit together are refused.
  CHECK_FALSE(copy.Assign({}, starts.deltas(), starts.far()));
  CHECK_FALSE(copy.Assign(starts.bases(), starts.deltas(), {}));
  auto far = starts.far();
  far[0].first = 0;  // a row whose delta is not marked far
  CHECK_FALSE(copy.Assign(starts.bases(), starts.deltas(), far));
}

TEST_CASE("a randomly damaged file fails to open or reads every row it indexed, never crashes") {
  TempDir dir;
  const std::string text = CriteoText(0, 4000);
  const std::string gz = Gzip(text);
  const std::string path = dir.Sub("damaged");
  uint64_t x = 7;
  auto next = [&] { return x = Mix64(x); };
  int opened = 0;
  for (int round = 0; round < 80; ++round) {
    CAPTURE(round);
    std::string bytes = round % 2 == 0 ? gz : text;
    for (uint64_t flips = 1 + next() % 8; flips > 0; --flips) {
      bytes[next() % bytes.size()] = static_cast<char>(next() >> 56);
    }
    WriteFile(path, bytes);
    std::remove((path + ".tsidx").c_str());
    TextFormat format = CriteoFormat();
    format.skip_bad_lines = (round / 2) % 2 == 0;
    absl::StatusOr<std::shared_ptr<const DelimitedTextSource>> source =
        DelimitedTextSource::Open({path}, format);
    if (!source.ok()) {
      CHECK((absl::IsInvalidArgument(source.status()) || absl::IsDataLoss(source.status())));
      continue;
    }
    ++opened;
    // What the scan accepted, a read parses again: every row, in one batch.
    absl::StatusOr<Batch> all = (*source)->Read(Range(0, (*source)->size()));
    CHECK_MESSAGE(all.ok(), all.status().ToString());
  }
  CHECK(opened > 10);
}

TEST_CASE("rows of several files follow one another, plain and gzip alike") {
  TempDir dir;
  WriteFile(dir.Sub("a.tsv"), CriteoText(0, 100));
  WriteFile(dir.Sub("b.gz"), Gzip(CriteoText(100, 50)));
  WriteFile(dir.Sub("c.tsv"), CriteoText(150, 1));
  auto source = ValueOrDie(DelimitedTextSource::Open(
      {dir.Sub("a.tsv"), dir.Sub("b.gz"), dir.Sub("c.tsv")}, CriteoFormat()));
  REQUIRE(source->size() == 151);
  const std::vector<int64_t> rows = {150, 99, 100, 149, 0, 120, 98, 101};
  const Batch batch = ValueOrDie(source->Read(rows));
  for (size_t k = 0; k < rows.size(); ++k) CheckCriteoRow(batch, static_cast<int64_t>(k), rows[k]);
  const Batch all = ValueOrDie(source->Read(Range(0, 151)));
  for (int64_t k = 0; k < 151; ++k) CheckCriteoRow(all, k, k);
  CHECK(absl::IsInvalidArgument(DelimitedTextSource::Open({}, CriteoFormat()).status()));
  CHECK(absl::IsNotFound(
      DelimitedTextSource::Open({dir.Sub("a.tsv"), dir.Sub("missing")}, CriteoFormat()).status()));
}

TEST_CASE(
    "a shuffled batch stream over a text file reads contiguous batches equal to direct reads") {
  TempDir dir;
  WriteFile(dir.Sub("day.gz"), Gzip(CriteoText(0, 1000)));
  auto source = ValueOrDie(DelimitedTextSource::Open({dir.Sub("day.gz")}, CriteoFormat()));
  const Dataset data = ValueOrDie(Dataset::FromSource(source));
  BatchStream stream = ValueOrDie(BatchStream::Create(data, 64, /*shuffle=*/true, /*seed=*/4));
  CHECK(stream.shuffles_batches());
  REQUIRE(stream.batches_per_epoch() == 16);
  std::vector<int64_t> seen(1000, 0);
  for (int64_t i = 0; i < 16; ++i) {
    const Batch batch = ValueOrDie(stream.Get(i));
    // Which contiguous block: its first row's I1 value is its line number.
    const int64_t begin = static_cast<int64_t>(batch.dense.at("dense").row(0)[0]);
    CHECK(begin % 64 == 0);
    const Batch direct = ValueOrDie(data.Slice(begin, batch.size));
    CHECK(batch.ids == direct.ids);
    CHECK(batch.dense.at("dense").values() == direct.dense.at("dense").values());
    CHECK(batch.labels.values() == direct.labels.values());
    for (int64_t k = 0; k < batch.size; ++k) ++seen[begin + k];
  }
  for (int64_t count : seen) CHECK(count == 1);
  // A strided shard of the file falls back to shuffling rows, and still reads the right ones.
  BatchStream shard = ValueOrDie(BatchStream::Create(ValueOrDie(data.Shard(3, 1)), 10, true, 4));
  CHECK_FALSE(shard.shuffles_batches());
  const Batch batch = ValueOrDie(shard.Get(5));
  for (int64_t k = 0; k < batch.size; ++k) {
    const int64_t line = static_cast<int64_t>(batch.dense.at("dense").row(k)[0]);
    CHECK(line % 3 == 1);
    CheckCriteoRow(batch, k, line);
  }
}

TEST_CASE("concurrent reads of one gzip source each get their own rows") {
  TempDir dir;
  WriteFile(dir.Sub("day.gz"), Gzip(CriteoText(0, 20000)));
  auto source = ValueOrDie(DelimitedTextSource::Open({dir.Sub("day.gz")}, CriteoFormat()));
  // Four threads, each walking its own stretch of the file in batches, forwards and back, so
  // that the streams they leave behind are taken up by one another.
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int pass = 0; pass < 2; ++pass) {
        for (int64_t b = 0; b < 10; ++b) {
          const int64_t batch = pass == 0 ? b : 9 - b;
          const int64_t begin = (t * 10 + batch) * 500;
          absl::StatusOr<Batch> read = source->Read(Range(begin, begin + 500));
          if (!read.ok()) {
            ++wrong[t];
            continue;
          }
          for (int64_t k = 0; k < 500; ++k) {
            if (read->dense.at("dense").row(k)[0] != static_cast<float>(begin + k)) ++wrong[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(wrong == std::vector<int>(4, 0));
}

TEST_CASE("a file edited in place to the same size, between the sampled bytes, is indexed again") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/data").ok());
  const int64_t rows = 6000;
  std::vector<std::string> lines;
  std::vector<int64_t> starts;
  int64_t size = 0;
  for (int64_t i = 0; i < rows; ++i) {
    lines.push_back(CriteoLine(i) + "\n");
    starts.push_back(size);
    size += static_cast<int64_t>(lines.back().size());
  }
  // The bytes the key samples: the first and last 64 KiB, 4 KiB at 64 places between.
  const int64_t kb64 = 64 << 10;
  const int64_t middle = size - 2 * kb64;
  REQUIRE(middle >= 64 * 4096);
  auto sampled = [&](int64_t begin, int64_t end) {
    if (begin < kb64 || end > size - kb64) return true;
    for (int64_t k = 0; k < 64; ++k) {
      const int64_t at = kb64 + middle / 64 * k;
      if (begin < at + 4096 && at < end) return true;
    }
    return false;
  };
  // Two neighbouring lines of different lengths, both between samples: swapped, the file keeps
  // its size and every sampled byte, but the second line starts elsewhere.
  int64_t swap = -1;
  for (int64_t i = rows / 4; i + 1 < rows && swap < 0; ++i) {
    if (lines[i].size() != lines[i + 1].size() &&
        !sampled(starts[i],
                 starts[i] + static_cast<int64_t>(lines[i].size() + lines[i + 1].size()))) {
      swap = i;
    }
  }
  REQUIRE(swap >= 0);
  auto write = [&](const std::vector<std::string>& text) {
    std::unique_ptr<WritableFile> out = ValueOrDie(env->NewWritableFile("/data/day.tsv"));
    REQUIRE(out->WriteAt(0, absl::StrJoin(text, "")).ok());
    REQUIRE(out->Close().ok());
  };
  write(lines);
  REQUIRE_FALSE(ValueOrDie(DelimitedTextSource::Open({"/data/day.tsv"}, CriteoFormat(), env.get()))
                    ->index_loaded(0));
  REQUIRE(ValueOrDie(DelimitedTextSource::Open({"/data/day.tsv"}, CriteoFormat(), env.get()))
              ->index_loaded(0));
  std::swap(lines[swap], lines[swap + 1]);
  env->AdvanceClock(absl::Seconds(1));
  write(lines);
  auto edited = ValueOrDie(DelimitedTextSource::Open({"/data/day.tsv"}, CriteoFormat(), env.get()));
  CHECK_FALSE(edited->index_loaded(0));  // its time moved: rebuilt, not loaded stale
  const Batch batch = ValueOrDie(edited->Read(std::vector<int64_t>{swap, swap + 1, swap + 2}));
  CheckCriteoRow(batch, 0, swap + 1);
  CheckCriteoRow(batch, 1, swap);
  CheckCriteoRow(batch, 2, swap + 2);
}

TEST_CASE("an index that cannot be written stays in memory") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/data").ok());
  {
    std::unique_ptr<WritableFile> out = ValueOrDie(env->NewWritableFile("/data/day.tsv"));
    REQUIRE(out->WriteAt(0, CriteoText(0, 10)).ok());
    REQUIRE(out->Close().ok());
  }
  env->FailWritesUnder("/data", absl::PermissionDeniedError("read-only"));
  for (int k = 0; k < 2; ++k) {
    auto source =
        ValueOrDie(DelimitedTextSource::Open({"/data/day.tsv"}, CriteoFormat(), env.get()));
    CHECK(source->size() == 10);
    CHECK_FALSE(source->index_loaded(0));
    CheckCriteoRow(ValueOrDie(source->Read(std::vector<int64_t>{9})), 0, 9);
  }
  CHECK_FALSE(env->FileExists("/data/day.tsv.tsidx"));
}

}  // namespace
}  // namespace tessera
