// The save path's two pieces (Note [One save path], core/checkpoint/save.h): WriteSlice and
// ManifestEntry. The holders that use them are tested with them: shard_op_test (a shard's SaveOp)
// and mirrored_replica_test (a replica's Save).
#include "core/checkpoint/save.h"

#include <doctest/doctest.h>

#include <vector>

#include "absl/strings/match.h"
#include "tests/core/checkpoint/kept_slices.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using ::tessera::testing::ValueOrDie;

TEST_CASE("WriteSlice writes the slice under the checkpoint's identity and says what it wrote") {
  const Tensor rows(Shape{3, 2}, 1.5f);
  const Tensor slot(Shape{3, 2}, 0.25f);
  TensorSliceView slice;
  slice.variable = "table";
  slice.full_shape = Shape{10, 2};
  slice.row_offset = 4;
  slice.value = rows.view();
  slice.slot_names = {"accumulator"};
  slice.slots = {slot.view()};
  slice.step = 9;
  const CheckpointId checkpoint{RunId::Random(), 30};
  const OptimizerSpec adagrad{"adagrad", {{"learning_rate", 0.1}}};
  testing::KeptSlices store;

  const SavedSlice saved = ValueOrDie(
      WriteSlice(slice, adagrad, SaveOp{"/c", "t.part-1.slice", checkpoint}, store, "table/1"));
  CHECK(saved.ref.file == "t.part-1.slice");
  CHECK(saved.ref.row_offset == 4);
  CHECK(saved.ref.rows == 3);
  CHECK(saved.slot_names == std::vector<std::string>{"accumulator"});
  CHECK(saved.step == 9);
  REQUIRE(saved.optimizer.has_value());
  CHECK(saved.optimizer->name == "adagrad");
  const TensorSlice& written = store.written.at("/c/t.part-1.slice");
  CHECK(written.checkpoint == checkpoint);
  CHECK(written.row_offset == 4);
  CHECK(written.value.values()[5] == 1.5f);
  CHECK(written.slots.at(0).values()[0] == 0.25f);

  store.fail = true;
  const absl::Status failed =
      WriteSlice(slice, adagrad, SaveOp{"/c", "u.slice", checkpoint}, store, "table/1").status();
  CHECK(failed.code() == absl::StatusCode::kResourceExhausted);
  CHECK(absl::StrContains(failed.message(), "saving table/1"));
}

TEST_CASE("ManifestEntry makes a variable's entry from its holders' slices, in row order") {
  const OptimizerSpec adam{"adam", {{"learning_rate", 0.01}}};
  SavedSlice first{SliceFileRef{"a", 0, 6}, {"m", "v"}, 4, adam};
  SavedSlice second{SliceFileRef{"b", 6, 4}, {"m", "v"}, 7, adam};
  const CheckpointVariable entry =
      ManifestEntry("table", Shape{10, 3}, DType::kFloat32, {first, second});
  CHECK(entry.name == "table");
  CHECK(entry.shape == Shape{10, 3});
  REQUIRE(entry.slices.size() == 2);
  CHECK(entry.slices[0].file == "a");
  CHECK(entry.slices[1].row_offset == 6);
  CHECK(entry.step == 7);  // the largest: a lagging shard's step is not the variable's
  CHECK(entry.slot_names == std::vector<std::string>{"m", "v"});
  REQUIRE(entry.optimizer.has_value());
  CHECK(entry.optimizer->name == "adam");

  // Without an optimizer (a variable no optimizer updates), the entry has none.
  const CheckpointVariable plain =
      ManifestEntry("count", Shape{}, DType::kInt64, {SavedSlice{SliceFileRef{"c", 0, 1}}});
  CHECK_FALSE(plain.optimizer.has_value());
  CHECK(plain.slot_names.empty());
  CHECK(plain.dtype == DType::kInt64);
}

}  // namespace
}  // namespace tessera
