// ShardLayout: how the rows of a sharded variable are spread over its shards, and the index math
// that turns an operation on global rows into one request per touched shard.
//
// Storage is always the "div" layout (docs/design.md §3): shard i holds the contiguous row block
// [offset(i), offset(i) + rows(i)), and the first `rows % n` shards hold one extra row
// (13 rows / 5 shards -> 3, 3, 3, 2, 2 at offsets 0, 3, 6, 9, 11). Shard i is named
// "name/part_i".
//
// Ids can also be mapped under the "mod" strategy (id -> shard id % n, local row id / n), an
// explicit option for embedding lookups as in TF's `partition_strategy="mod"`. Under mod shard i
// holds the ids i, i + n, i + 2n, ..., which is rows / n + (i < rows % n ? 1 : 0) ids: exactly
// the div shard sizes, so a div-stored variable serves mod lookups without resizing. Slices,
// integer indexing and checkpoint overlaps are always div (they address storage).
//
// Errors: InvalidArgument for bad input as each function states. DecomposeSlice and Overlaps
// also check their own shard walk and return Internal if it ever goes wrong (a bug here, never
// the caller's input) rather than loop.
//
// Every operation costs O(touched shards + output size) (plus O(num_shards) for a per-shard
// result vector), never O(rows).
//
// Example (a gather fanned out to the shards, one request each):
//   TESSERA_ASSIGN_OR_RETURN(IdGrouping g, layout.GroupIds(ids, ShardingStrategy::kDiv,
//                                                  DuplicateIds::kMerge));
//   for (int64_t s : g.touched_shards) SendGather(s, g.local_ids[s]);
//   ... when every reply has arrived:
//   TESSERA_RETURN_IF_ERROR(StitchGatheredRows(g, replies, output.view()));
//
// Thread-safety: ShardLayout is an immutable value; the result structs are plain values. All
// functions are pure.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/base/sorted_ids.h"
#include "core/variables/indexed_slices.h"
#include "tessera/tensor.h"
#include "tessera/variables.h"

namespace tessera {

// "emb/part_3": the name of shard `shard` of variable `variable`.
std::string ShardName(absl::string_view variable, int64_t shard);

// Where one global row lives.
struct RowLocation {
  int64_t shard = 0;
  int64_t local_row = 0;
  friend bool operator==(const RowLocation& a, const RowLocation& b) {
    return a.shard == b.shard && a.local_row == b.local_row;
  }
};

// A shard's row block under div: global rows [offset, offset + rows).
struct ShardExtent {
  int64_t shard = 0;
  int64_t offset = 0;
  int64_t rows = 0;
};

// The part of a global row range [begin, begin + rows) that one shard holds: global rows
// [global_begin, global_begin + rows) = the shard's local rows [local_begin, local_begin + rows).
struct ShardOverlap {
  int64_t shard = 0;
  int64_t global_begin = 0;
  int64_t local_begin = 0;
  int64_t rows = 0;
};

// Whether GroupIds sends a repeated id once (kMerge, what a worker does with a batch's embedding
// ids) or once per occurrence (kKeep, e.g. for scatter_update, whose last write must win).
enum class DuplicateIds : int { kKeep = 0, kMerge = 1 };

// A caller position whose id repeated the id at an earlier position (kMerge only).
struct DuplicateId {
  int64_t position = 0;
  int64_t source_position = 0;  // the first position holding the same id
};

// A batch of global ids grouped by shard; see ShardLayout::GroupIds. Contract:
//   for each s in touched_shards: send one request for rows local_ids[s] to shard s;
//   row k of shard s's reply goes to output position positions[s][k];
//   then, for each d in duplicates: output row d.position = output row d.source_position.
// Every position in [0, num_ids) is filled exactly once by these two steps.
struct IdGrouping {
  int64_t num_ids = 0;
  // Indexed by shard (num_shards entries); empty for a shard the batch does not touch. Ids keep
  // the caller's order of first occurrence.
  std::vector<Ids> local_ids;
  // positions[s].size() == local_ids[s].size().
  std::vector<std::vector<int64_t>> positions;
  // Empty under DuplicateIds::kKeep. In ascending order of position.
  std::vector<DuplicateId> duplicates;
  // The shards with at least one id, ascending: exactly the requests to send.
  std::vector<int64_t> touched_shards;
  // True when the touched shards' positions, concatenated in touched_shards order, are exactly
  // 0, 1, ..., num_ids - 1 (sorted unique ids under div, what a worker's step sends): the
  // replies appended in that order are then the output, with no stitching.
  bool in_shard_order = false;
};

// One shard's part of a slice: its local rows local_start + j * step for j in [0, count), which
// are output rows [output_offset, output_offset + count) in that order. count >= 1.
struct ShardSlice {
  int64_t shard = 0;
  int64_t local_start = 0;
  int64_t step = 1;
  int64_t count = 0;
  int64_t output_offset = 0;

  int64_t LocalRow(int64_t j) const { return local_start + j * step; }
  Ids LocalRows() const;
};

// A numpy slice of a sharded variable, decomposed; see ShardLayout::DecomposeSlice.
struct SliceDecomposition {
  // The slice normalized as Python's slice.indices(rows) does.
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  // Rows in the result: len(range(start, stop, step)).
  int64_t length = 0;
  // One entry per touched shard, in output order (shard order for step > 0, reversed for
  // step < 0); their output ranges tile [0, length).
  std::vector<ShardSlice> pieces;
};

class ShardLayout {
 public:
  // An empty, unsharded variable: 0 rows in 1 shard.
  ShardLayout() = default;

  // The div layout of `rows` rows over `num_shards` shards. num_shards may exceed rows (the last
  // shards are then empty); partitioners never produce that except for rows == 0.
  // InvalidArgument when rows < 0 or num_shards < 1.
  static absl::StatusOr<ShardLayout> Make(int64_t rows, int64_t num_shards);

  int64_t rows() const { return rows_; }
  int64_t num_shards() const { return num_shards_; }

  // Rows held by `shard`, under div and mod alike. Precondition: 0 <= shard < num_shards().
  int64_t ShardRows(int64_t shard) const { return base_ + (shard < extra_ ? 1 : 0); }
  // First global row of `shard` (div). Precondition: 0 <= shard <= num_shards() (num_shards()
  // gives rows()).
  int64_t ShardOffset(int64_t shard) const { return shard * base_ + std::min(shard, extra_); }
  // {shard, offset, rows}. Precondition: 0 <= shard < num_shards().
  ShardExtent Extent(int64_t shard) const { return {shard, ShardOffset(shard), ShardRows(shard)}; }
  // Every shard's extent, in shard order: what a checkpoint writes and a restore overlaps.
  std::vector<ShardExtent> Extents() const;

  // The shard and local row of global row `id` under `strategy`.
  // InvalidArgument "id 13 is out of range [0, 13)" unless 0 <= id < rows().
  absl::StatusOr<RowLocation> Locate(int64_t id,
                                     ShardingStrategy strategy = ShardingStrategy::kDiv) const;
  // The inverse of Locate. Precondition: `location` is valid for this layout.
  int64_t GlobalRow(RowLocation location, ShardingStrategy strategy = ShardingStrategy::kDiv) const;

  // numpy integer indexing, v[index]: a negative index counts from the end (-1 is the last row).
  // InvalidArgument "index -14 is out of range for 13 rows" unless -rows() <= index < rows().
  absl::StatusOr<RowLocation> LocateIndex(int64_t index) const;

  // Groups a batch of global ids by shard (see IdGrouping for the contract). With kMerge a
  // repeated id is requested once and its later positions are listed in `duplicates`.
  // InvalidArgument naming the first id outside [0, rows()) and its position. Ids of unknown
  // order that turn out sorted and unique (a sparse gradient's, which come from a step's
  // SortedIds but travel as plain IndexedSlices) take the SortedIds path after one scan.
  absl::StatusOr<IdGrouping> GroupIds(absl::Span<const int64_t> ids,
                                      ShardingStrategy strategy = ShardingStrategy::kDiv,
                                      DuplicateIds duplicates = DuplicateIds::kKeep) const;

  // The same for ids already sorted and unique (a step's lookups, core/base/sorted_ids.h): under
  // div each touched shard's run is found with one division, and the grouping is `in_shard_order`.
  absl::StatusOr<IdGrouping> GroupIds(const SortedIds& ids,
                                      ShardingStrategy strategy = ShardingStrategy::kDiv) const;

  // Decomposes numpy's v[start:stop:step] into per-shard strided reads: concatenating each
  // piece's rows in `pieces` order gives exactly numpy's result. A missing start/stop means
  // numpy's default for the step's sign; negative values count from the end; out-of-range values
  // are clamped (an empty result is not an error). InvalidArgument when step == 0.
  absl::StatusOr<SliceDecomposition> DecomposeSlice(std::optional<int64_t> start,
                                                    std::optional<int64_t> stop,
                                                    int64_t step = 1) const;

  // The shards overlapping global rows [begin, begin + rows), in shard order, e.g. to restore a
  // checkpoint slice saved at (begin, rows) into this layout. Shards with nothing in the range
  // are omitted. InvalidArgument unless 0 <= begin, 0 <= rows and begin + rows <= rows().
  absl::StatusOr<std::vector<ShardOverlap>> Overlaps(int64_t begin, int64_t rows) const;

  friend bool operator==(const ShardLayout& a, const ShardLayout& b) {
    return a.rows_ == b.rows_ && a.num_shards_ == b.num_shards_;
  }
  friend bool operator!=(const ShardLayout& a, const ShardLayout& b) { return !(a == b); }

 private:
  ShardLayout(int64_t rows, int64_t num_shards);

  // The shard of `id` under div, and Locate without the range check; precondition
  // 0 <= id < rows_.
  int64_t DivShard(int64_t id) const;
  // GroupIds for ids that are sorted, unique and inside [0, rows_), under div; `g` has its
  // num_ids and per-shard vectors sized (and empty).
  void GroupSortedUniqueDivIds(absl::Span<const int64_t> ids, IdGrouping& g) const;
  RowLocation LocateUnchecked(int64_t id, ShardingStrategy strategy) const;
  // Internal unless `row` is in `shard` and fewer than num_shards_ shards were `visited`: a
  // consistency check of the shard walks, never a report on the caller's input.
  absl::Status CheckWalkStep(int64_t row, int64_t shard, size_t visited) const;

  int64_t rows_ = 0;
  int64_t num_shards_ = 1;
  int64_t base_ = 0;   // rows_ / num_shards_
  int64_t extra_ = 0;  // rows_ % num_shards_: shards [0, extra_) hold base_ + 1 rows
};

// Stitches the replies of a grouped gather into `out` (one row per id, in the caller's order).
// `replies` is indexed by shard (grouping.local_ids.size() entries); a touched shard's reply
// must have one row per requested id and `out`'s row width; untouched shards' entries are
// ignored. InvalidArgument naming the shard and both shapes on a mismatch, or when out.rows()
// != grouping.num_ids; `out` may be partly written then.
absl::Status StitchGatheredRows(const IdGrouping& grouping,
                                absl::Span<const ConstTensorView> replies, TensorView out);

// The reverse of a gather, for sparse gradients and scatter ops: splits `values` (one row per
// id of the grouped batch) into one IndexedSlices of shard-local ids per shard (empty for an
// untouched shard). Under kMerge the rows of a repeated id are summed, so each shard gets each
// id once. InvalidArgument when values.rows() != grouping.num_ids.
absl::StatusOr<std::vector<IndexedSlices>> SplitRowsByShard(const IdGrouping& grouping,
                                                            ConstTensorView values);

}  // namespace tessera
