#include "core/variables/shard_layout.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/numeric/int128.h"
#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

// The value of `v`; fails the test case (rather than aborting) when it is an error.
template <typename T>
T Must(absl::StatusOr<T> v) {
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *std::move(v);
}

ShardLayout MustLayout(int64_t rows, int64_t shards) {
  return Must(ShardLayout::Make(rows, shards));
}

bool Contains(const absl::Status& status, absl::string_view text) {
  return std::string(status.message()).find(std::string(text)) != std::string::npos;
}

// Brute force: the shard of every row, by walking the shards' sizes as stated in docs/design.md §3
// (the first rows % n shards get one extra row).
std::vector<RowLocation> ReferenceDivLocations(int64_t rows, int64_t shards) {
  std::vector<RowLocation> where;
  for (int64_t s = 0; s < shards; ++s) {
    const int64_t size = rows / shards + (s < rows % shards ? 1 : 0);
    for (int64_t k = 0; k < size; ++k) where.push_back({s, k});
  }
  return where;
}

// Brute force for mod: shard s holds the ids congruent to s, in increasing order.
std::vector<RowLocation> ReferenceModLocations(int64_t rows, int64_t shards) {
  std::vector<RowLocation> where(rows);
  std::vector<int64_t> next_local(shards, 0);
  for (int64_t id = 0; id < rows; ++id) where[id] = {id % shards, next_local[id % shards]++};
  return where;
}

// Python's slice.indices(rows), transcribed from CPython's PySlice_GetIndicesEx (the pre-3.6
// form, organised differently from the implementation under test), then the plain loop
// `range(start, stop, step)` in 128-bit arithmetic so huge steps cannot overflow.
std::vector<int64_t> ReferenceSlice(int64_t rows, std::optional<int64_t> start_arg,
                                    std::optional<int64_t> stop_arg, int64_t step) {
  absl::int128 start, stop;
  if (!start_arg) {
    start = step < 0 ? rows - 1 : 0;
  } else {
    start = *start_arg;
    if (start < 0) start += rows;
    if (start < 0) start = step < 0 ? -1 : 0;
    if (start >= rows) start = step < 0 ? rows - 1 : rows;
  }
  if (!stop_arg) {
    stop = step < 0 ? -1 : rows;
  } else {
    stop = *stop_arg;
    if (stop < 0) stop += rows;
    if (stop < 0) stop = step < 0 ? -1 : 0;
    if (stop >= rows) stop = step < 0 ? rows - 1 : rows;
  }
  std::vector<int64_t> out;
  for (absl::int128 i = start; step > 0 ? i < stop : i > stop; i += step) {
    out.push_back(static_cast<int64_t>(i));
  }
  return out;
}

std::string SliceText(std::optional<int64_t> start, std::optional<int64_t> stop, int64_t step) {
  const auto text = [](std::optional<int64_t> v) {
    return v ? absl::StrCat(*v) : std::string("None");
  };
  return absl::StrCat("[", text(start), ":", text(stop), ":", step, "]");
}

// Checks a decomposition against the reference and its own contract; returns the number of
// failed checks so the property test can stay quiet when everything passes.
int CheckDecomposition(const ShardLayout& layout, std::optional<int64_t> start,
                       std::optional<int64_t> stop, int64_t step) {
  const std::vector<int64_t> want = ReferenceSlice(layout.rows(), start, stop, step);
  absl::StatusOr<SliceDecomposition> got = layout.DecomposeSlice(start, stop, step);
  int failures = 0;
  const auto expect = [&](bool ok, const std::string& what) {
    if (!ok) {
      ++failures;
      FAIL_CHECK(absl::StrCat(layout.rows(), " rows / ", layout.num_shards(), " shards, slice ",
                              SliceText(start, stop, step), ": ", what));
    }
  };
  if (!got.ok()) {
    expect(false, got.status().ToString());
    return failures;
  }
  expect(got->length == static_cast<int64_t>(want.size()), "length");
  std::vector<int64_t> rows;
  int64_t previous_shard = -1;
  for (const ShardSlice& piece : got->pieces) {
    expect(piece.count >= 1, "a piece with no rows");
    expect(piece.step == step, "piece step");
    expect(piece.output_offset == static_cast<int64_t>(rows.size()), "pieces out of order");
    expect(piece.shard >= 0 && piece.shard < layout.num_shards(), "shard out of range");
    if (previous_shard >= 0) {
      expect(step > 0 ? piece.shard > previous_shard : piece.shard < previous_shard,
             "shards not visited once, in output order");
    }
    previous_shard = piece.shard;
    const ShardExtent extent = layout.Extent(piece.shard);
    for (int64_t j = 0; j < piece.count && failures == 0; ++j) {
      const int64_t local = piece.LocalRow(j);
      expect(local >= 0 && local < extent.rows, "local row outside its shard");
      rows.push_back(extent.offset + local);
    }
  }
  expect(rows == want, "rows differ from Python's");
  return failures;
}

TEST_CASE("the div layout gives the first rows % n shards one extra row") {
  struct Case {
    int64_t rows, shards;
    std::vector<int64_t> sizes, offsets;
  };
  const Case cases[] = {
      {13, 5, {3, 3, 3, 2, 2}, {0, 3, 6, 9, 11}},
      {10, 5, {2, 2, 2, 2, 2}, {0, 2, 4, 6, 8}},
      {6, 4, {2, 2, 1, 1}, {0, 2, 4, 5}},
      {4, 4, {1, 1, 1, 1}, {0, 1, 2, 3}},
      {7, 1, {7}, {0}},
      {0, 1, {0}, {0}},
      {3, 5, {1, 1, 1, 0, 0}, {0, 1, 2, 3, 3}},  // more shards than rows: trailing shards empty
  };
  for (const Case& c : cases) {
    CAPTURE(c.rows);
    CAPTURE(c.shards);
    const ShardLayout layout = MustLayout(c.rows, c.shards);
    CHECK(layout.rows() == c.rows);
    CHECK(layout.num_shards() == c.shards);
    const std::vector<ShardExtent> extents = layout.Extents();
    REQUIRE(extents.size() == c.sizes.size());
    for (int64_t s = 0; s < c.shards; ++s) {
      CHECK(extents[s].shard == s);
      CHECK(extents[s].rows == c.sizes[s]);
      CHECK(extents[s].offset == c.offsets[s]);
      CHECK(layout.ShardRows(s) == c.sizes[s]);
      CHECK(layout.ShardOffset(s) == c.offsets[s]);
    }
    CHECK(layout.ShardOffset(c.shards) == c.rows);
  }
  const ShardLayout empty;
  CHECK(empty.rows() == 0);
  CHECK(empty.num_shards() == 1);
  CHECK(empty == MustLayout(0, 1));
  CHECK(MustLayout(13, 5) != MustLayout(13, 4));
}

TEST_CASE("a layout with negative rows or fewer than one shard is InvalidArgument") {
  const absl::Status negative = ShardLayout::Make(-1, 2).status();
  CHECK(negative.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(negative, "rows must be >= 0, got -1"));
  const absl::Status no_shards = ShardLayout::Make(13, 0).status();
  CHECK(no_shards.code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(no_shards, "num_shards must be >= 1, got 0 for 13 rows"));
}

TEST_CASE("shards are named name/part_i and strategies parse by name") {
  CHECK(ShardName("emb", 0) == "emb/part_0");
  CHECK(ShardName("model/user_emb", 12) == "model/user_emb/part_12");
  CHECK(Must(ParseShardingStrategy("div")) == ShardingStrategy::kDiv);
  CHECK(Must(ParseShardingStrategy(ShardingStrategyName(ShardingStrategy::kMod))) ==
        ShardingStrategy::kMod);
  CHECK(ParseShardingStrategy("Div").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Locate maps every id like a walk over the shards, under div and mod") {
  for (int64_t rows = 0; rows <= 40; ++rows) {
    for (int64_t shards = 1; shards <= 12; ++shards) {
      const ShardLayout layout = MustLayout(rows, shards);
      const std::vector<RowLocation> div = ReferenceDivLocations(rows, shards);
      const std::vector<RowLocation> mod = ReferenceModLocations(rows, shards);
      REQUIRE(static_cast<int64_t>(div.size()) == rows);
      std::vector<int64_t> mod_sizes(shards, 0);
      for (int64_t id = 0; id < rows; ++id) {
        const absl::StatusOr<RowLocation> d = layout.Locate(id);
        const absl::StatusOr<RowLocation> m = layout.Locate(id, ShardingStrategy::kMod);
        REQUIRE((d.ok() && m.ok()));
        if (!(*d == div[id]) || !(*m == mod[id])) {
          FAIL_CHECK(absl::StrCat(rows, " rows / ", shards, " shards: id ", id, " at div (",
                                  d->shard, ", ", d->local_row, "), mod (", m->shard, ", ",
                                  m->local_row, ")"));
        }
        if (layout.GlobalRow(*d) != id || layout.GlobalRow(*m, ShardingStrategy::kMod) != id) {
          FAIL_CHECK(
              absl::StrCat(rows, " rows / ", shards, " shards: GlobalRow does not invert id ", id));
        }
        ++mod_sizes[m->shard];
      }
      // Mod shards hold exactly as many ids as div shards hold rows.
      for (int64_t s = 0; s < shards; ++s) {
        if (mod_sizes[s] != layout.ShardRows(s)) {
          FAIL_CHECK(absl::StrCat(rows, " rows / ", shards, " shards: mod shard ", s, " holds ",
                                  mod_sizes[s], " ids, div ", layout.ShardRows(s)));
        }
      }
    }
  }
}

TEST_CASE("Locate on huge layouts stays exact") {
  const int64_t rows = int64_t{1} << 62;
  const ShardLayout layout = MustLayout(rows + 3, 7);
  for (int64_t s = 0; s < 7; ++s) {
    const ShardExtent e = layout.Extent(s);
    for (int64_t id : {e.offset, e.offset + e.rows / 2, e.offset + e.rows - 1}) {
      const RowLocation loc = Must(layout.Locate(id));
      CHECK(loc.shard == s);
      CHECK(loc.local_row == id - e.offset);
    }
  }
}

// A layout as large as an int64 allows: locating a row computes nothing past INT64_MAX (this
// fails under the sanitizer build, TESSERA_ASAN, which stops at a signed overflow).
TEST_CASE("a layout of INT64_MAX rows locates its first and last rows in every shard count") {
  for (int64_t shards : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}}) {
    const ShardLayout layout = MustLayout(kMax, shards);
    for (int64_t id : {int64_t{0}, kMax / 2, kMax - 1}) {
      const RowLocation loc = Must(layout.Locate(id));
      const ShardExtent e = layout.Extent(loc.shard);
      CHECK(id >= e.offset);
      CHECK(id - e.offset < e.rows);
      CHECK(loc.local_row == id - e.offset);
      CHECK(layout.GlobalRow(loc) == id);
    }
    CHECK(Must(layout.Locate(kMax - 1)).shard == shards - 1);
  }
}

TEST_CASE("ids outside the rows are InvalidArgument naming the id and the range") {
  const ShardLayout layout = MustLayout(13, 5);
  for (int64_t id : {int64_t{-1}, int64_t{13}, kMin, kMax}) {
    for (ShardingStrategy strategy : {ShardingStrategy::kDiv, ShardingStrategy::kMod}) {
      const absl::Status st = layout.Locate(id, strategy).status();
      CHECK(st.code() == absl::StatusCode::kInvalidArgument);
      CHECK(st.message() == absl::StrCat("id ", id, " is out of range [0, 13)"));
    }
  }
  CHECK(MustLayout(0, 1).Locate(0).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("an integer index at every shard's first row finds that shard's row 0") {
  // TF returns the wrong row for sv[offset_of_shard_i]; numpy semantics are the contract here.
  for (const auto& [rows, shards] : std::vector<std::pair<int64_t, int64_t>>{
           {13, 5}, {10, 5}, {6, 4}, {7, 1}, {100, 7}, {3, 3}}) {
    const ShardLayout layout = MustLayout(rows, shards);
    for (int64_t s = 0; s < shards; ++s) {
      CAPTURE(rows);
      CAPTURE(s);
      const int64_t first = layout.ShardOffset(s);
      CHECK(Must(layout.LocateIndex(first)) == RowLocation{s, 0});
      CHECK(Must(layout.LocateIndex(first - rows)) == RowLocation{s, 0});  // the same row, negative
      const int64_t last = first + layout.ShardRows(s) - 1;
      CHECK(Must(layout.LocateIndex(last)) == RowLocation{s, layout.ShardRows(s) - 1});
    }
    CHECK(Must(layout.LocateIndex(-1)) ==
          RowLocation{shards - 1, layout.ShardRows(shards - 1) - 1});
  }
  const ShardLayout layout = MustLayout(13, 5);
  for (int64_t index : {int64_t{13}, int64_t{-14}, kMax, kMin}) {
    const absl::Status st = layout.LocateIndex(index).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st.message() == absl::StrCat("index ", index, " is out of range for 13 rows"));
  }
}

TEST_CASE("GroupIds lists each shard's local ids and where their rows go") {
  const ShardLayout layout = MustLayout(13, 5);  // offsets 0, 3, 6, 9, 11
  const Ids ids = {7, 2, 7, 7, 12};
  SUBCASE("keeping duplicates") {
    const IdGrouping g = Must(layout.GroupIds(ids));
    CHECK(g.num_ids == 5);
    CHECK(g.touched_shards == std::vector<int64_t>{0, 2, 4});
    CHECK(g.local_ids == std::vector<Ids>{{2}, {}, {1, 1, 1}, {}, {1}});
    CHECK(g.positions == std::vector<std::vector<int64_t>>{{1}, {}, {0, 2, 3}, {}, {4}});
    CHECK(g.duplicates.empty());
  }
  SUBCASE("merging duplicates") {
    const IdGrouping g = Must(layout.GroupIds(ids, ShardingStrategy::kDiv, DuplicateIds::kMerge));
    CHECK(g.touched_shards == std::vector<int64_t>{0, 2, 4});
    CHECK(g.local_ids == std::vector<Ids>{{2}, {}, {1}, {}, {1}});
    CHECK(g.positions == std::vector<std::vector<int64_t>>{{1}, {}, {0}, {}, {4}});
    REQUIRE(g.duplicates.size() == 2);
    CHECK(g.duplicates[0].position == 2);
    CHECK(g.duplicates[0].source_position == 0);
    CHECK(g.duplicates[1].position == 3);
    CHECK(g.duplicates[1].source_position == 0);
  }
  SUBCASE("under mod") {
    const IdGrouping g = Must(layout.GroupIds(ids, ShardingStrategy::kMod));
    CHECK(g.touched_shards == std::vector<int64_t>{2});
    CHECK(g.local_ids == std::vector<Ids>{{}, {}, {1, 0, 1, 1, 2}, {}, {}});
  }
  SUBCASE("an empty batch touches no shard") {
    const IdGrouping g = Must(layout.GroupIds(Ids{}));
    CHECK(g.num_ids == 0);
    CHECK(g.touched_shards.empty());
    CHECK(g.local_ids.size() == 5);
  }
  SUBCASE("an id out of range is named with its position") {
    const absl::Status st = layout.GroupIds(Ids{0, 5, 13, 2}).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st.message() == "id 13 at position 2 is out of range [0, 13)");
    CHECK(layout.GroupIds(Ids{-1}, ShardingStrategy::kMod, DuplicateIds::kMerge).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("sorted unique ids are grouped by runs exactly as id by id") {
  // The fast path of GroupIds (sorted unique ids under div, what a worker sends) against the
  // contract computed id by id with Locate, on layouts with uneven and empty shards.
  std::mt19937_64 rng(11);
  for (const auto& [rows, shards] : std::vector<std::pair<int64_t, int64_t>>{
           {13, 5}, {1, 1}, {50, 7}, {8, 8}, {100, 3}, {3, 5}, {100000, 4}}) {
    const ShardLayout layout = MustLayout(rows, shards);
    for (int trial = 0; trial < 20; ++trial) {
      std::set<int64_t> picked;
      const int64_t count = 1 + static_cast<int64_t>(rng() % std::min<int64_t>(rows, 600));
      while (static_cast<int64_t>(picked.size()) < count) {
        picked.insert(static_cast<int64_t>(rng() % rows));
      }
      const Ids ids(picked.begin(), picked.end());
      std::vector<Ids> want_local(shards);
      std::vector<std::vector<int64_t>> want_positions(shards);
      for (size_t p = 0; p < ids.size(); ++p) {
        const RowLocation loc = Must(layout.Locate(ids[p]));
        want_local[loc.shard].push_back(loc.local_row);
        want_positions[loc.shard].push_back(static_cast<int64_t>(p));
      }
      std::vector<int64_t> want_touched;
      for (int64_t s = 0; s < shards; ++s) {
        if (!want_local[s].empty()) want_touched.push_back(s);
      }
      for (DuplicateIds mode : {DuplicateIds::kKeep, DuplicateIds::kMerge}) {
        CAPTURE(rows);
        CAPTURE(shards);
        const IdGrouping g = Must(layout.GroupIds(ids, ShardingStrategy::kDiv, mode));
        CHECK(g.num_ids == static_cast<int64_t>(ids.size()));
        CHECK(g.local_ids == want_local);
        CHECK(g.positions == want_positions);
        CHECK(g.touched_shards == want_touched);
        CHECK(g.duplicates.empty());
      }
    }
  }
  SUBCASE("sorted ids with one out of range are still named with their position") {
    const ShardLayout layout = MustLayout(13, 5);
    const absl::Status st = layout.GroupIds(Ids{0, 5, 13}).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(st.message() == "id 13 at position 2 is out of range [0, 13)");
    CHECK(layout.GroupIds(Ids{-1, 4}).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

// A variable whose row r holds (r, -r), stored as the shards of `layout` under `strategy`.
std::vector<Tensor> MakeShards(const ShardLayout& layout, ShardingStrategy strategy) {
  std::vector<Tensor> shards;
  for (int64_t s = 0; s < layout.num_shards(); ++s) {
    Tensor t(Shape{layout.ShardRows(s), 2});
    for (int64_t k = 0; k < t.rows(); ++k) {
      const int64_t global = layout.GlobalRow({s, k}, strategy);
      t.row(k)[0] = static_cast<float>(global);
      t.row(k)[1] = -static_cast<float>(global);
    }
    shards.push_back(std::move(t));
  }
  return shards;
}

TEST_CASE("a grouped gather stitched from one reply per shard returns rows in caller order") {
  std::mt19937_64 rng(7);
  for (const auto& [rows, shards] :
       std::vector<std::pair<int64_t, int64_t>>{{13, 5}, {1, 1}, {50, 7}, {8, 8}, {100, 3}}) {
    const ShardLayout layout = MustLayout(rows, shards);
    for (ShardingStrategy strategy : {ShardingStrategy::kDiv, ShardingStrategy::kMod}) {
      const std::vector<Tensor> storage = MakeShards(layout, strategy);
      for (DuplicateIds dups : {DuplicateIds::kKeep, DuplicateIds::kMerge}) {
        CAPTURE(rows);
        CAPTURE(ShardingStrategyName(strategy));
        CAPTURE(static_cast<int>(dups));
        Ids ids(40);
        // Draw from a few hot ids so duplicates are common.
        std::uniform_int_distribution<int64_t> pick(0, std::min<int64_t>(rows, 9) - 1);
        for (int64_t& id : ids) id = pick(rng) * (rows / std::min<int64_t>(rows, 9));
        const IdGrouping g = Must(layout.GroupIds(ids, strategy, dups));
        // The shard side: one gather per touched shard.
        std::vector<Tensor> reply_tensors(shards);
        std::vector<ConstTensorView> replies(shards);
        int64_t requested = 0;
        for (int64_t s : g.touched_shards) {
          reply_tensors[s] = Tensor(Shape{static_cast<int64_t>(g.local_ids[s].size()), 2});
          for (size_t k = 0; k < g.local_ids[s].size(); ++k) {
            const int64_t local = g.local_ids[s][k];
            REQUIRE((local >= 0 && local < storage[s].rows()));
            reply_tensors[s].row(k)[0] = storage[s].row(local)[0];
            reply_tensors[s].row(k)[1] = storage[s].row(local)[1];
          }
          replies[s] = reply_tensors[s];
          requested += static_cast<int64_t>(g.local_ids[s].size());
        }
        Tensor out(Shape{40, 2}, 1e9f);
        REQUIRE(StitchGatheredRows(g, replies, out.view()).ok());
        for (size_t p = 0; p < ids.size(); ++p) {
          CHECK(out.row(p)[0] == static_cast<float>(ids[p]));
          CHECK(out.row(p)[1] == -static_cast<float>(ids[p]));
        }
        const std::set<int64_t> unique(ids.begin(), ids.end());
        CHECK(requested ==
              (dups == DuplicateIds::kMerge ? static_cast<int64_t>(unique.size()) : 40));
        CHECK(requested + static_cast<int64_t>(g.duplicates.size()) == 40);
      }
    }
  }
}

TEST_CASE("stitching rejects replies of the wrong shape and a wrong-sized output") {
  const ShardLayout layout = MustLayout(13, 5);
  const IdGrouping g = Must(layout.GroupIds(Ids{0, 12}));
  Tensor good0(Shape{1, 3}), good4(Shape{1, 3}), wide(Shape{1, 4}), tall(Shape{2, 3});
  std::vector<ConstTensorView> replies(5);
  replies[0] = good0;
  replies[4] = wide;
  Tensor out(Shape{2, 3});
  absl::Status st = StitchGatheredRows(g, replies, out.view());
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(st.message() == "gather reply from shard 4: shape [1, 4] does not match expected [1, 3]");
  replies[4] = tall;
  CHECK(Contains(StitchGatheredRows(g, replies, out.view()), "shape [2, 3]"));
  replies[4] = good4;
  CHECK(StitchGatheredRows(g, replies, out.view()).ok());
  Tensor short_out(Shape{1, 3});
  CHECK(Contains(StitchGatheredRows(g, replies, short_out.view()),
                 "a gather of 2 ids into an output of shape [1, 3]"));
  CHECK(Contains(StitchGatheredRows(g, absl::MakeSpan(replies).subspan(0, 4), out.view()),
                 "over 5 shards from 4 replies"));
}

TEST_CASE("SplitRowsByShard sends each shard its rows, summing repeated ids when merging") {
  const ShardLayout layout = MustLayout(13, 5);  // offsets 0, 3, 6, 9, 11
  const Ids ids = {7, 2, 7, 12, 7};
  const Tensor grads = Must(Tensor::FromVector(Shape{5, 2}, {1, 10, 2, 20, 3, 30, 4, 40, 5, 50}));
  SUBCASE("merged") {
    const IdGrouping g = Must(layout.GroupIds(ids, ShardingStrategy::kDiv, DuplicateIds::kMerge));
    const std::vector<IndexedSlices> parts = Must(SplitRowsByShard(g, grads));
    REQUIRE(parts.size() == 5);
    CHECK(parts[0].indices == Ids{2});
    CHECK(parts[0].values.shape() == Shape{1, 2});
    CHECK(parts[0].values.values()[0] == 2);
    CHECK(parts[2].indices == Ids{1});
    CHECK(parts[2].values.values()[0] == 1 + 3 + 5);
    CHECK(parts[2].values.values()[1] == 10 + 30 + 50);
    CHECK(parts[4].indices == Ids{1});
    CHECK(parts[4].values.values()[1] == 40);
    CHECK(parts[1].indices.empty());
    CHECK(parts[1].values.shape() == Shape{0, 2});
  }
  SUBCASE("kept") {
    const IdGrouping g = Must(layout.GroupIds(ids));
    const std::vector<IndexedSlices> parts = Must(SplitRowsByShard(g, grads));
    CHECK(parts[2].indices == Ids{1, 1, 1});
    CHECK(parts[2].values.values() ==
          absl::Span<const float>(std::vector<float>{1, 10, 3, 30, 5, 50}));
  }
  const IdGrouping g = Must(layout.GroupIds(ids));
  CHECK(SplitRowsByShard(g, Tensor(Shape{4, 2})).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("slices match numpy on a 13-row variable in 5 shards") {
  const ShardLayout layout = MustLayout(13, 5);
  const std::optional<int64_t> none;
  struct Case {
    std::optional<int64_t> start, stop;
    int64_t step;
    std::vector<int64_t> rows;  // printed by python3: list(range(13))[start:stop:step]
  };
  const Case cases[] = {
      {none, none, -1, {12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
      {2, 11, 3, {2, 5, 8}},
      {-3, none, 1, {10, 11, 12}},
      {100, -100, -1, {12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}},
      {5, 2, 1, {}},
      {none, none, -7, {12, 5}},
      {1, 12, 1, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
      {-100, 3, 1, {0, 1, 2}},
      {12, none, -5, {12, 7, 2}},
      {-1, -14, -4, {12, 8, 4, 0}},
      {3, 3, 1, {}},
      {11, 2, -3, {11, 8, 5}},
  };
  for (const Case& c : cases) {
    CAPTURE(SliceText(c.start, c.stop, c.step));
    const SliceDecomposition d = Must(layout.DecomposeSlice(c.start, c.stop, c.step));
    std::vector<int64_t> rows;
    for (const ShardSlice& piece : d.pieces) {
      for (int64_t local : piece.LocalRows())
        rows.push_back(layout.ShardOffset(piece.shard) + local);
    }
    CHECK(rows == c.rows);
    CHECK(d.length == static_cast<int64_t>(c.rows.size()));
  }
  // The pieces of [1:12]: one strided read per shard, tiling the output.
  const SliceDecomposition d = Must(layout.DecomposeSlice(1, 12));
  CHECK(d.start == 1);
  CHECK(d.stop == 12);
  REQUIRE(d.pieces.size() == 5);
  const int64_t want[5][4] = {
      {0, 1, 2, 0}, {1, 0, 3, 2}, {2, 0, 3, 5}, {3, 0, 2, 8}, {4, 0, 1, 10}};
  for (int s = 0; s < 5; ++s) {
    CAPTURE(s);
    CHECK(d.pieces[s].shard == want[s][0]);
    CHECK(d.pieces[s].local_start == want[s][1]);
    CHECK(d.pieces[s].count == want[s][2]);
    CHECK(d.pieces[s].output_offset == want[s][3]);
  }
  // Only touched shards appear: [4:5] lives in shard 1 alone.
  const SliceDecomposition one = Must(layout.DecomposeSlice(4, 5));
  REQUIRE(one.pieces.size() == 1);
  CHECK(one.pieces[0].shard == 1);
  CHECK(one.pieces[0].local_start == 1);
}

TEST_CASE("a zero slice step is InvalidArgument") {
  const absl::Status st = MustLayout(13, 5).DecomposeSlice(0, 5, 0).status();
  CHECK(st.code() == absl::StatusCode::kInvalidArgument);
  CHECK(st.message() == "slice step must not be zero (slicing 13 rows)");
}

TEST_CASE("slice decomposition agrees with Python's slice semantics everywhere") {
  int64_t checked = 0;
  int failures = 0;
  for (int64_t rows : {0, 1, 2, 3, 5, 8, 13, 17, 31}) {
    for (int64_t shards = 1; shards <= 7; ++shards) {
      const ShardLayout layout = MustLayout(rows, shards);
      std::vector<std::optional<int64_t>> bounds = {std::nullopt};
      for (int64_t v :
           {kMin, -rows - 5, -rows - 1, -rows, -rows + 1, int64_t{-3}, int64_t{-1}, int64_t{0},
            int64_t{1}, int64_t{2}, rows / 2, rows - 1, rows, rows + 1, rows + 7, kMax}) {
        bounds.push_back(v);
      }
      for (const std::optional<int64_t>& start : bounds) {
        for (const std::optional<int64_t>& stop : bounds) {
          for (int64_t step = -7; step <= 7; ++step) {
            if (step == 0) continue;
            failures += CheckDecomposition(layout, start, stop, step);
            ++checked;
            if (failures > 20) return;
          }
        }
      }
    }
  }
  CHECK(checked > 100000);
  CHECK(failures == 0);
}

TEST_CASE("slices of huge variables and huge steps cost only the touched shards") {
  const int64_t rows = int64_t{1} << 50;
  const ShardLayout layout = MustLayout(rows + 5, 9);
  int failures = 0;
  for (int64_t step : {rows / 3, -(rows / 3), rows, -rows, kMax, kMin, int64_t{1} << 49,
                       -(int64_t{1} << 49) + 7}) {
    for (const std::optional<int64_t>& start :
         {std::optional<int64_t>(), std::optional<int64_t>(0), std::optional<int64_t>(-1),
          std::optional<int64_t>(rows / 2), std::optional<int64_t>(kMax)}) {
      for (const std::optional<int64_t>& stop :
           {std::optional<int64_t>(), std::optional<int64_t>(kMin),
            std::optional<int64_t>(rows - 2)}) {
        failures += CheckDecomposition(layout, start, stop, step);
      }
    }
  }
  CHECK(failures == 0);
  // A contiguous slice over a trillion rows is still one piece per shard.
  const SliceDecomposition all = Must(layout.DecomposeSlice(std::nullopt, std::nullopt));
  CHECK(all.length == rows + 5);
  CHECK(all.pieces.size() == 9);
}

TEST_CASE("Overlaps splits a checkpoint slice over the shards it touches") {
  const ShardLayout layout = MustLayout(13, 5);                     // offsets 0, 3, 6, 9, 11
  const std::vector<ShardOverlap> o = Must(layout.Overlaps(2, 8));  // rows [2, 10)
  REQUIRE(o.size() == 4);
  const int64_t want[4][4] = {{0, 2, 2, 1}, {1, 3, 0, 3}, {2, 6, 0, 3}, {3, 9, 0, 1}};
  for (int i = 0; i < 4; ++i) {
    CAPTURE(i);
    CHECK(o[i].shard == want[i][0]);
    CHECK(o[i].global_begin == want[i][1]);
    CHECK(o[i].local_begin == want[i][2]);
    CHECK(o[i].rows == want[i][3]);
  }
  CHECK(Must(layout.Overlaps(4, 0)).empty());
  CHECK(Must(layout.Overlaps(0, 13)).size() == 5);
  // Restoring 4 saved shards of 13 rows into this layout covers every row exactly once.
  const ShardLayout saved = MustLayout(13, 4);
  std::vector<int> covered(13, 0);
  for (const ShardExtent& e : saved.Extents()) {
    const std::vector<ShardOverlap> pieces = Must(layout.Overlaps(e.offset, e.rows));
    for (const ShardOverlap& piece : pieces) {
      for (int64_t r = 0; r < piece.rows; ++r) {
        CHECK(layout.GlobalRow({piece.shard, piece.local_begin + r}) == piece.global_begin + r);
        ++covered[piece.global_begin + r];
      }
    }
  }
  CHECK(covered == std::vector<int>(13, 1));
  for (const auto& [begin, count] : std::vector<std::pair<int64_t, int64_t>>{
           {-1, 2}, {0, 14}, {12, 2}, {14, 0}, {3, -1}, {kMax, kMax}}) {
    CAPTURE(begin);
    CAPTURE(count);
    const absl::Status st = layout.Overlaps(begin, count).status();
    CHECK(st.code() == absl::StatusCode::kInvalidArgument);
    CHECK(Contains(st, "is not inside [0, 13)"));
  }
}

}  // namespace
}  // namespace tessera
