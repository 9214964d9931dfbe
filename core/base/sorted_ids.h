// SortedIds: ids in strictly increasing order (sorted, no repeats) — the rows one step of a model
// needs from one embedding table. They are made once (UniqueIds, while planning a step's lookups,
// or Check, for ids from elsewhere); everything downstream takes the type and relies on it rather
// than sorting or scanning again (the shard layout groups them by shard in one pass per shard, a
// gather's replies concatenate in order).
//
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

class SortedIds {
 public:
  SortedIds() = default;

  // `ids`, sorted, repeats dropped.
  static SortedIds Of(absl::Span<const int64_t> ids);
  // Takes `ids` as they are when they are strictly increasing; InvalidArgument naming the first
  // position that is not greater than the one before otherwise.
  static absl::StatusOr<SortedIds> Check(Ids ids);

  const Ids& ids() const { return ids_; }
  operator absl::Span<const int64_t>() const { return ids_; }  // NOLINT: a view of the ids
  size_t size() const { return ids_.size(); }
  bool empty() const { return ids_.empty(); }
  int64_t operator[](size_t k) const { return ids_[k]; }
  int64_t front() const { return ids_.front(); }
  int64_t back() const { return ids_.back(); }
  Ids::const_iterator begin() const { return ids_.begin(); }
  Ids::const_iterator end() const { return ids_.end(); }

  friend bool operator==(const SortedIds& a, const SortedIds& b) { return a.ids_ == b.ids_; }
  friend bool operator!=(const SortedIds& a, const SortedIds& b) { return !(a == b); }

 private:
  friend void UniqueIds(absl::Span<const int64_t> ids, SortedIds& unique,
                        std::vector<int64_t>& slots);
  Ids ids_;
};

// Deduplicates `ids`: `unique` receives the distinct ids and `slots` the position of each ids[b]
// within `unique` (so unique[slots[b]] == ids[b]). Reuses the vectors' capacity.
void UniqueIds(absl::Span<const int64_t> ids, SortedIds& unique, std::vector<int64_t>& slots);

}  // namespace tessera
