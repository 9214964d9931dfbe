#include "core/base/sorted_ids.h"

#include <doctest/doctest.h>

#include <vector>

#include "core/variables/shard_layout.h"

namespace tessera {
namespace {

TEST_CASE("sorted ids are made sorted and unique once, or checked once") {
  CHECK(SortedIds::Of(Ids{7, 2, 7, 0, 2}).ids() == Ids{0, 2, 7});
  CHECK(SortedIds::Of(Ids{}).empty());

  const absl::StatusOr<SortedIds> ok = SortedIds::Check(Ids{1, 4, 9});
  REQUIRE(ok.ok());
  CHECK(ok->ids() == Ids{1, 4, 9});
  CHECK(SortedIds::Check(Ids{1, 4, 4}).status() ==
        absl::InvalidArgumentError(
            "ids are not strictly increasing: id 4 at position 2 follows 4"));
  CHECK(SortedIds::Check(Ids{5, 3}).status().code() == absl::StatusCode::kInvalidArgument);

  SortedIds unique;
  std::vector<int64_t> slots;
  UniqueIds(Ids{9, 3, 9, 5}, unique, slots);
  CHECK(unique.ids() == Ids{3, 5, 9});
  CHECK(slots == std::vector<int64_t>{2, 0, 2, 1});
}

TEST_CASE("grouping sorted ids by shard agrees with grouping the same ids of unknown order") {
  const ShardLayout layout = *ShardLayout::Make(13, 5);  // rows 3,3,3,2,2
  for (const Ids& ids : {Ids{0, 1, 5, 6, 12}, Ids{3}, Ids{}, Ids{9, 10, 11}}) {
    CAPTURE(ids.size());
    const SortedIds sorted = *SortedIds::Check(ids);
    const IdGrouping typed = *layout.GroupIds(sorted);
    const IdGrouping plain = *layout.GroupIds(ids, ShardingStrategy::kDiv, DuplicateIds::kMerge);
    CHECK(typed.local_ids == plain.local_ids);
    CHECK(typed.positions == plain.positions);
    CHECK(typed.touched_shards == plain.touched_shards);
    CHECK(typed.in_shard_order == !ids.empty());  // an empty batch has nothing to order
  }
  // Out of range: the same error as the general path.
  const SortedIds outside = *SortedIds::Check(Ids{2, 13});
  CHECK(layout.GroupIds(outside).status() ==
        layout.GroupIds(outside.ids(), ShardingStrategy::kDiv, DuplicateIds::kMerge).status());
  CHECK(!layout.GroupIds(outside).ok());
  // Under mod the grouping is the general one.
  const IdGrouping mod = *layout.GroupIds(*SortedIds::Check(Ids{0, 5, 6}), ShardingStrategy::kMod);
  CHECK(mod.local_ids[0] == Ids{0, 1});
}

}  // namespace
}  // namespace tessera
