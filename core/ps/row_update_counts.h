// RowUpdateCounts: a shard's statistics of how often updates named each row of its block, for the
// cluster's status (how many rows were trained, which are hot). A ShardState keeps one and counts
// into it after each successful update; ShardInfo reports it.
//
// Note [Row update counts]
// For the cluster's status (which rows are hot, how many were trained), a shard counts, per row of
// its block, how often an update named that row: each id of a scatter or sparse gradient counts
// once, repeats within one update included (how often examples touched the row, which is what
// "hot" means); a dense update (assign, dense gradient) counts every row once, kept as one
// number added at read time rather than a pass over the counters. The counters are a uint32 per
// row (saturating), allocated at the first sparse update (a variable only ever updated densely,
// or never, has none); the hot path adds one increment per id to an update that already writes
// the id's row (~0.9 ns per id, against ~65 ns per id of a sparse Adagrad apply of 32-float
// rows), and keeps no running total: rows_touched counts the nonzero counters when asked. Gathers,
// reads, restores and optimizer changes count nothing. A block only densely updated has no hottest
// rows: rows mean something only where updates name them. Counts are this process's history: a
// checkpoint does not hold them (its format is unchanged), and a restore keeps them. HottestRows
// scans the counters once with a K-element heap (O(rows log K), no allocation beyond K): ~1 ms for
// 600,000 rows (bench/shard_stats).
//
// Thread-safety: none; owned by its ShardState (one actor or thread at a time).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace tessera {

// A row of a shard and how often updates named it (Note [Row update counts]).
struct HotRow {
  int64_t row = 0;      // the global row id: the shard's row_offset plus the block-local row
  int64_t updates = 0;  // updates that named the row (dense updates included)
};

// The most hot rows a stats request may ask for; more is clamped to this.
constexpr int32_t kMaxHottestRows = 100;

class RowUpdateCounts {
 public:
  RowUpdateCounts() = default;
  // The counts of a block of `rows` rows starting at global row `row_offset`, none counted yet.
  RowUpdateCounts(int64_t rows, int64_t row_offset) : rows_(rows), row_offset_(row_offset) {}

  // One more update of each of `local_ids` (block-local and valid: called after the update
  // succeeded), or of every row.
  void CountRowUpdates(absl::Span<const int64_t> local_ids);
  void CountDenseUpdate();

  // How often updates named block-local row `local_row` (0 for a row outside the block).
  int64_t RowUpdates(int64_t local_row) const;
  // Rows some update named (every row once a dense update happened).
  int64_t rows_touched() const;
  // Row-updating operations counted.
  int64_t updates() const { return updates_; }
  // The `k` rows most often updated (k clamped to [0, kMaxHottestRows]), as global ids, most
  // first (ties: lower row first); rows never updated are left out, and so is every row of a
  // block only ever updated densely (a dense parameter's: no row is hotter than another).
  std::vector<HotRow> HottestRows(int32_t k) const;

 private:
  int64_t rows_ = 0;
  int64_t row_offset_ = 0;
  std::vector<uint32_t> row_updates_;  // per block row; empty until the first sparse update
  int64_t dense_updates_ = 0;          // counted for every row
  int64_t updates_ = 0;
};

}  // namespace tessera
