#include "core/variables/shard_layout.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// |step| as an unsigned value: -INT64_MIN does not fit in an int64_t.
uint64_t AbsStep(int64_t step) {
  return step < 0 ? uint64_t{0} - static_cast<uint64_t>(step) : static_cast<uint64_t>(step);
}

// Clamps one slice bound the way CPython's PySlice_AdjustIndices does.
int64_t ClampSliceBound(int64_t value, int64_t rows, int64_t lower, int64_t upper) {
  if (value < 0) {
    value += rows;  // cannot overflow: value < 0 <= rows
    return value < lower ? lower : value;
  }
  return value > upper ? upper : value;
}

}  // namespace

absl::string_view ShardingStrategyName(ShardingStrategy strategy) {
  switch (strategy) {
    case ShardingStrategy::kDiv:
      return "div";
    case ShardingStrategy::kMod:
      return "mod";
  }
  return "invalid";
}

absl::StatusOr<ShardingStrategy> ParseShardingStrategy(absl::string_view name) {
  if (name == "div") return ShardingStrategy::kDiv;
  if (name == "mod") return ShardingStrategy::kMod;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown sharding strategy '", name, "' (expected div or mod)"));
}

std::string ShardName(absl::string_view variable, int64_t shard) {
  return absl::StrCat(variable, "/part_", shard);
}

Ids ShardSlice::LocalRows() const {
  Ids rows(count);
  for (int64_t j = 0; j < count; ++j) rows[j] = LocalRow(j);
  return rows;
}

ShardLayout::ShardLayout(int64_t rows, int64_t num_shards)
    : rows_(rows), num_shards_(num_shards), base_(rows / num_shards), extra_(rows % num_shards) {}

absl::StatusOr<ShardLayout> ShardLayout::Make(int64_t rows, int64_t num_shards) {
  if (rows < 0) {
    return absl::InvalidArgumentError(absl::StrCat("shard layout: rows must be >= 0, got ", rows));
  }
  if (num_shards < 1) {
    return absl::InvalidArgumentError(absl::StrCat("shard layout: num_shards must be >= 1, got ",
                                                   num_shards, " for ", rows, " rows"));
  }
  return ShardLayout(rows, num_shards);
}

std::vector<ShardExtent> ShardLayout::Extents() const {
  std::vector<ShardExtent> extents;
  extents.reserve(num_shards_);
  for (int64_t s = 0; s < num_shards_; ++s) extents.push_back(Extent(s));
  return extents;
}

int64_t ShardLayout::DivShard(int64_t id) const {
  // The first extra_ shards hold base_ + 1 rows each and end at row extra_ * (base_ + 1); the
  // rest hold base_ rows each. One division per id (this runs once per id of every gather and
  // scatter). When base_ == 0 the boundary is rows_, so no valid id divides by base_. Without
  // extra rows every shard holds base_, which may be INT64_MAX itself (base_ + 1 would overflow).
  if (extra_ == 0) return id / base_;
  const int64_t boundary = extra_ * (base_ + 1);
  if (id < boundary) return id / (base_ + 1);
  return extra_ + (id - boundary) / base_;
}

absl::Status ShardLayout::CheckWalkStep(int64_t row, int64_t shard, size_t visited) const {
  // DecomposeSlice and Overlaps visit each shard at most once and always make progress, but only
  // if DivShard and the row counting are right; this turns a bug there into an error instead of
  // an endless loop.
  if (shard >= 0 && shard < num_shards_ && row >= ShardOffset(shard) &&
      row < ShardOffset(shard + 1) && static_cast<int64_t>(visited) < num_shards_) {
    return absl::OkStatus();
  }
  return absl::InternalError(absl::StrCat("shard layout bug: row ", row, " mapped to shard ", shard,
                                          " after ", visited, " shards, for ", rows_, " rows / ",
                                          num_shards_, " shards"));
}

absl::StatusOr<RowLocation> ShardLayout::Locate(int64_t id, ShardingStrategy strategy) const {
  if (id < 0 || id >= rows_) {
    return absl::InvalidArgumentError(absl::StrCat("id ", id, " is out of range [0, ", rows_, ")"));
  }
  return LocateUnchecked(id, strategy);
}

RowLocation ShardLayout::LocateUnchecked(int64_t id, ShardingStrategy strategy) const {
  if (strategy == ShardingStrategy::kMod) return {id % num_shards_, id / num_shards_};
  const int64_t shard = DivShard(id);
  return {shard, id - ShardOffset(shard)};
}

int64_t ShardLayout::GlobalRow(RowLocation location, ShardingStrategy strategy) const {
  if (strategy == ShardingStrategy::kMod) {
    return location.local_row * num_shards_ + location.shard;
  }
  return ShardOffset(location.shard) + location.local_row;
}

absl::StatusOr<RowLocation> ShardLayout::LocateIndex(int64_t index) const {
  if (index < -rows_ || index >= rows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("index ", index, " is out of range for ", rows_, " rows"));
  }
  return Locate(index < 0 ? index + rows_ : index);
}

absl::StatusOr<IdGrouping> ShardLayout::GroupIds(const SortedIds& ids,
                                                 ShardingStrategy strategy) const {
  if (strategy != ShardingStrategy::kDiv || ids.empty() || ids.front() < 0 ||
      ids.back() >= rows_) {  // mod, or an id out of range (reported by the general path)
    return GroupIds(ids.ids(), strategy, DuplicateIds::kMerge);
  }
  IdGrouping g;
  g.num_ids = static_cast<int64_t>(ids.size());
  g.local_ids.resize(num_shards_);
  g.positions.resize(num_shards_);
  GroupSortedUniqueDivIds(ids, g);
  return g;
}

absl::StatusOr<IdGrouping> ShardLayout::GroupIds(absl::Span<const int64_t> ids,
                                                 ShardingStrategy strategy,
                                                 DuplicateIds duplicates) const {
  IdGrouping g;
  g.num_ids = static_cast<int64_t>(ids.size());
  g.local_ids.resize(num_shards_);
  g.positions.resize(num_shards_);
  if (strategy == ShardingStrategy::kDiv && !ids.empty() && ids.front() >= 0 &&
      ids.back() < rows_ && IsSortedUnique(ids)) {
    GroupSortedUniqueDivIds(ids, g);
    return g;
  }
  // Two passes: locate and count first, so each shard's vectors are allocated once at their
  // final size (growing them by push_back cost more than all the index math).
  std::vector<RowLocation> locations(ids.size());
  std::vector<int64_t> counts(num_shards_, 0);
  bool increasing = true;  // strictly: then no id repeats
  for (int64_t p = 0; p < g.num_ids; ++p) {
    const int64_t id = ids[p];
    if (id < 0 || id >= rows_) {
      return absl::InvalidArgumentError(
          absl::StrCat("id ", id, " at position ", p, " is out of range [0, ", rows_, ")"));
    }
    if (p > 0 && id <= ids[p - 1]) increasing = false;
    locations[p] = LocateUnchecked(id, strategy);
    ++counts[locations[p].shard];
  }
  for (int64_t s = 0; s < num_shards_; ++s) {
    g.local_ids[s].reserve(counts[s]);  // an upper bound under kMerge
    g.positions[s].reserve(counts[s]);
  }
  // Sorted unique ids (what a worker's train step sends) cannot repeat: skip the hash map.
  absl::flat_hash_map<int64_t, int64_t> first_position;
  const bool merge = duplicates == DuplicateIds::kMerge && !increasing;
  if (merge) first_position.reserve(ids.size());
  for (int64_t p = 0; p < g.num_ids; ++p) {
    if (merge) {
      const auto [it, inserted] = first_position.try_emplace(ids[p], p);
      if (!inserted) {
        g.duplicates.push_back({p, it->second});
        continue;
      }
    }
    const RowLocation& loc = locations[p];
    g.local_ids[loc.shard].push_back(loc.local_row);
    g.positions[loc.shard].push_back(p);
  }
  for (int64_t s = 0; s < num_shards_; ++s) {
    if (!g.local_ids[s].empty()) g.touched_shards.push_back(s);
  }
  return g;
}

void ShardLayout::GroupSortedUniqueDivIds(absl::Span<const int64_t> ids, IdGrouping& g) const {
  // Under div each shard holds one contiguous row range, so sorted ids fall into one run per
  // touched shard: find each run's end by the shard's last row, one division per touched shard
  // instead of one per id, and no repeats to look for.
  const size_t n = ids.size();
  size_t begin = 0;
  while (begin < n) {
    const int64_t shard = DivShard(ids[begin]);
    const int64_t offset = ShardOffset(shard);
    const int64_t end_row = ShardOffset(shard + 1);
    size_t end = begin + 1;
    while (end < n && ids[end] < end_row) ++end;
    Ids& local = g.local_ids[shard];
    std::vector<int64_t>& positions = g.positions[shard];
    local.resize(end - begin);
    positions.resize(end - begin);
    for (size_t k = begin; k < end; ++k) {
      local[k - begin] = ids[k] - offset;
      positions[k - begin] = static_cast<int64_t>(k);
    }
    g.touched_shards.push_back(shard);
    begin = end;
  }
  g.in_shard_order = true;
}

absl::StatusOr<SliceDecomposition> ShardLayout::DecomposeSlice(std::optional<int64_t> start,
                                                               std::optional<int64_t> stop,
                                                               int64_t step) const {
  if (step == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice step must not be zero (slicing ", rows_, " rows)"));
  }
  // Python's slice.indices(rows): bounds live in [0, rows] for a positive step and in
  // [-1, rows - 1] for a negative one, where -1 means "before the first row".
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? rows_ : rows_ - 1;
  SliceDecomposition d;
  d.step = step;
  d.start = start ? ClampSliceBound(*start, rows_, lower, upper) : (step > 0 ? lower : upper);
  d.stop = stop ? ClampSliceBound(*stop, rows_, lower, upper) : (step > 0 ? upper : lower);
  const uint64_t abs_step = AbsStep(step);
  if (step > 0 && d.start < d.stop) {
    d.length = static_cast<int64_t>(static_cast<uint64_t>(d.stop - d.start - 1) / abs_step) + 1;
  } else if (step < 0 && d.stop < d.start) {
    d.length = static_cast<int64_t>(static_cast<uint64_t>(d.start - d.stop - 1) / abs_step) + 1;
  }
  // Walk the touched shards only: each iteration takes every selected row of one shard, then
  // jumps to the shard of the next selected row. Rows start + j * step for j < length are all
  // inside [0, rows_), so no product below overflows.
  int64_t j = 0;
  while (j < d.length) {
    const int64_t row = d.start + j * step;
    const int64_t shard = DivShard(row);
    const int64_t offset = ShardOffset(shard);
    TESSERA_RETURN_IF_ERROR(CheckWalkStep(row, shard, d.pieces.size()));
    // Selected rows left in this shard, walking towards its end (step > 0) or start (step < 0).
    const uint64_t room = step > 0 ? static_cast<uint64_t>(offset + ShardRows(shard) - 1 - row)
                                   : static_cast<uint64_t>(row - offset);
    const int64_t in_shard = static_cast<int64_t>(
        std::min<uint64_t>(room / abs_step + 1, static_cast<uint64_t>(d.length - j)));
    d.pieces.push_back({shard, row - offset, step, in_shard, j});
    j += in_shard;
  }
  return d;
}

absl::StatusOr<std::vector<ShardOverlap>> ShardLayout::Overlaps(int64_t begin, int64_t rows) const {
  if (begin < 0 || rows < 0 || begin > rows_ || rows > rows_ - begin) {
    return absl::InvalidArgumentError(absl::StrCat("row range [", begin, ", ", begin, " + ", rows,
                                                   ") is not inside [0, ", rows_, ")"));
  }
  std::vector<ShardOverlap> overlaps;
  const int64_t end = begin + rows;
  int64_t row = begin;
  while (row < end) {
    const int64_t shard = DivShard(row);
    const int64_t offset = ShardOffset(shard);
    TESSERA_RETURN_IF_ERROR(CheckWalkStep(row, shard, overlaps.size()));
    const int64_t take = std::min(end, offset + ShardRows(shard)) - row;
    overlaps.push_back({shard, row, row - offset, take});
    row += take;
  }
  return overlaps;
}

absl::Status StitchGatheredRows(const IdGrouping& grouping,
                                absl::Span<const ConstTensorView> replies, TensorView out) {
  if (out.shape().rank() == 0 || out.rows() != grouping.num_ids) {
    return absl::InvalidArgumentError(absl::StrCat("stitching a gather of ", grouping.num_ids,
                                                   " ids into an output of shape ",
                                                   out.shape().ToString()));
  }
  if (replies.size() != grouping.local_ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stitching a gather over ",
                                                   grouping.local_ids.size(), " shards from ",
                                                   replies.size(), " replies"));
  }
  const int64_t width = out.row_size();
  for (int64_t s : grouping.touched_shards) {
    const ConstTensorView& reply = replies[s];
    const Shape want = out.shape().WithRows(static_cast<int64_t>(grouping.local_ids[s].size()));
    if (reply.shape() != want) {  // the message is only built on a mismatch
      return CheckSameShape(reply.shape(), want, absl::StrCat("gather reply from shard ", s));
    }
    const std::vector<int64_t>& positions = grouping.positions[s];
    for (size_t k = 0; k < positions.size(); ++k) {
      std::memcpy(out.data() + positions[k] * width, reply.data() + k * width,
                  sizeof(float) * width);
    }
  }
  for (const DuplicateId& d : grouping.duplicates) {
    std::memcpy(out.data() + d.position * width, out.data() + d.source_position * width,
                sizeof(float) * width);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<IndexedSlices>> SplitRowsByShard(const IdGrouping& grouping,
                                                            ConstTensorView values) {
  if (values.shape().rank() == 0 || values.rows() != grouping.num_ids) {
    return absl::InvalidArgumentError(absl::StrCat("splitting ", grouping.num_ids,
                                                   " ids' rows by shard: values have shape ",
                                                   values.shape().ToString()));
  }
  const int64_t width = values.row_size();
  // Under kMerge a repeated id's rows are summed into its first occurrence's row.
  Tensor merged;
  const float* source = values.data();
  if (!grouping.duplicates.empty()) {
    merged = Tensor::Copy(values);
    for (const DuplicateId& d : grouping.duplicates) {
      float* dst = merged.data() + d.source_position * width;
      const float* src = values.data() + d.position * width;
      for (int64_t e = 0; e < width; ++e) dst[e] += src[e];
    }
    source = merged.data();
  }
  std::vector<IndexedSlices> out(grouping.local_ids.size());
  for (size_t s = 0; s < out.size(); ++s) {
    const std::vector<int64_t>& positions = grouping.positions[s];
    out[s].indices = grouping.local_ids[s];
    // Appended row by row into reserved memory: no zero-fill of memory about to be overwritten.
    std::vector<float> rows;
    rows.reserve(positions.size() * static_cast<size_t>(width));
    for (int64_t position : positions) {
      const float* row = source + position * width;
      rows.insert(rows.end(), row, row + width);
    }
    TESSERA_ASSIGN_OR_RETURN(
        out[s].values,
        Tensor::FromVector(values.shape().WithRows(static_cast<int64_t>(positions.size())),
                           std::move(rows)));
  }
  return out;
}

}  // namespace tessera
