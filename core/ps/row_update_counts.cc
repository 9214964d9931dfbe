#include "core/ps/row_update_counts.h"

#include <algorithm>

namespace tessera {

void RowUpdateCounts::CountRowUpdates(absl::Span<const int64_t> local_ids) {
  ++updates_;
  if (local_ids.empty()) return;
  if (row_updates_.empty()) row_updates_.assign(static_cast<size_t>(rows_), 0);
  uint32_t* counts = row_updates_.data();
  for (const int64_t id : local_ids) {
    uint32_t& count = counts[id];
    count += count != UINT32_MAX;  // saturates
  }
}

void RowUpdateCounts::CountDenseUpdate() {
  ++updates_;
  ++dense_updates_;
}

int64_t RowUpdateCounts::RowUpdates(int64_t local_row) const {
  if (local_row < 0 || local_row >= rows_) return 0;
  const int64_t sparse =
      row_updates_.empty() ? 0 : row_updates_[static_cast<size_t>(local_row)];
  return sparse + dense_updates_;
}

int64_t RowUpdateCounts::rows_touched() const {
  if (dense_updates_ > 0) return rows_;
  // A pass over the counters (vectorized: ~0.1 ms for 600,000 rows), so the hot path keeps no
  // running total.
  return std::count_if(row_updates_.begin(), row_updates_.end(),
                       [](uint32_t count) { return count != 0; });
}

std::vector<HotRow> RowUpdateCounts::HottestRows(int32_t k) const {
  k = std::clamp(k, 0, kMaxHottestRows);
  std::vector<HotRow> hottest;
  const int64_t rows = rows_;
  if (k == 0 || rows_touched() == 0) return hottest;
  // Dense updates only (a dense parameter's): every row counts the same, so none is hot.
  if (row_updates_.empty()) return hottest;
  // A min-heap of the k hottest seen so far, by (count, then lower row first): its front is the
  // one to displace.
  struct Entry {
    uint32_t count;
    int64_t row;
  };
  const auto hotter = [](const Entry& a, const Entry& b) {
    return a.count != b.count ? a.count > b.count : a.row < b.row;
  };
  std::vector<Entry> heap;
  heap.reserve(static_cast<size_t>(k));
  const uint32_t* counts = row_updates_.data();
  const bool with_zeros = dense_updates_ > 0;  // then untouched rows have a count too
  for (int64_t r = 0; r < rows; ++r) {
    const uint32_t count = counts[r];
    if (count == 0 && !with_zeros) continue;
    if (heap.size() < static_cast<size_t>(k)) {
      heap.push_back(Entry{count, r});
      std::push_heap(heap.begin(), heap.end(), hotter);
    } else if (count > heap.front().count) {  // a later row wins only on a higher count
      std::pop_heap(heap.begin(), heap.end(), hotter);
      heap.back() = Entry{count, r};
      std::push_heap(heap.begin(), heap.end(), hotter);
    }
  }
  std::sort(heap.begin(), heap.end(), hotter);
  hottest.reserve(heap.size());
  for (const Entry& e : heap) {
    hottest.push_back(HotRow{row_offset_ + e.row, static_cast<int64_t>(e.count) + dense_updates_});
  }
  return hottest;
}

}  // namespace tessera
