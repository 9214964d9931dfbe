#include "core/base/sorted_ids.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {

SortedIds SortedIds::Of(absl::Span<const int64_t> ids) {
  SortedIds out;
  out.ids_.assign(ids.begin(), ids.end());
  std::sort(out.ids_.begin(), out.ids_.end());
  out.ids_.erase(std::unique(out.ids_.begin(), out.ids_.end()), out.ids_.end());
  return out;
}

absl::StatusOr<SortedIds> SortedIds::Check(Ids ids) {
  for (size_t k = 1; k < ids.size(); ++k) {
    if (ids[k] <= ids[k - 1]) {
      return absl::InvalidArgumentError(absl::StrCat("ids are not strictly increasing: id ", ids[k],
                                                     " at position ", k, " follows ",
                                                     ids[k - 1]));
    }
  }
  SortedIds out;
  out.ids_ = std::move(ids);
  return out;
}

void UniqueIds(absl::Span<const int64_t> ids, SortedIds& unique, std::vector<int64_t>& slots) {
  // One sort of (id, position) pairs, then a linear walk: cheaper than sorting the ids and
  // binary-searching each one (whose branches mispredict about half the time).
  const size_t n = ids.size();
  std::vector<std::pair<int64_t, int64_t>> order(n);
  for (size_t b = 0; b < n; ++b) order[b] = {ids[b], static_cast<int64_t>(b)};
  std::sort(order.begin(), order.end());
  Ids& out = unique.ids_;
  out.clear();
  slots.resize(n);
  for (size_t k = 0; k < n; ++k) {
    if (k == 0 || order[k].first != order[k - 1].first) out.push_back(order[k].first);
    slots[order[k].second] = static_cast<int64_t>(out.size()) - 1;
  }
}

}  // namespace tessera
