#include "core/checkpoint/checkpoint.h"

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/variables/shard_layout.h"

namespace tessera {
namespace {

template <typename T>
T Must(absl::StatusOr<T> v) {
  REQUIRE_MESSAGE(v.ok(), v.status().ToString());
  return *std::move(v);
}

bool Contains(const absl::Status& status, absl::string_view text) {
  return std::string(status.message()).find(std::string(text)) != std::string::npos;
}

// The manifest entry of a variable of `shape` saved by `saved_shards` shards in the div layout.
CheckpointVariable SavedVariable(const std::string& name, const Shape& shape, int64_t saved_shards,
                                 std::vector<std::string> slot_names = {}) {
  CheckpointVariable v;
  v.name = name;
  v.shape = shape;
  v.slot_names = std::move(slot_names);
  const ShardLayout layout = Must(ShardLayout::Make(shape.rows(), saved_shards));
  for (const ShardExtent& e : layout.Extents()) {
    v.slices.push_back({absl::StrCat(name, "-", e.shard, ".slice"), e.offset, e.rows});
  }
  return v;
}

// Brute force: applies `reads` row by row and checks that target row t of [offset, offset + rows)
// comes from the one non-empty slice holding global row offset + t, at the right local row.
void CheckPlan(const CheckpointVariable& v, int64_t offset, int64_t rows,
               const std::vector<SliceRead>& reads) {
  std::vector<int> filled(rows, 0);
  int64_t previous_end = 0;
  for (const SliceRead& read : reads) {
    REQUIRE(read.slice < v.slices.size());
    CHECK(read.rows > 0);                    // only slices the block overlaps
    CHECK(read.target_row == previous_end);  // in row order, contiguous
    previous_end = read.target_row + read.rows;
    const SliceFileRef& ref = v.slices[read.slice];
    for (int64_t k = 0; k < read.rows; ++k) {
      const int64_t t = read.target_row + k;
      REQUIRE(t >= 0);
      REQUIRE(t < rows);
      ++filled[t];
      const int64_t global = offset + t;
      // The slice that really holds `global`.
      size_t holder = v.slices.size();
      for (size_t s = 0; s < v.slices.size(); ++s) {
        if (v.slices[s].row_offset <= global &&
            global < v.slices[s].row_offset + v.slices[s].rows) {
          holder = s;
        }
      }
      CHECK(read.slice == holder);
      CHECK(read.source_row + k == global - ref.row_offset);
    }
  }
  for (int64_t t = 0; t < rows; ++t) CHECK_MESSAGE(filled[t] == 1, "target row " << t);
}

TEST_CASE("PlanSliceReads restores every N-shard save into every M-shard layout") {
  for (int64_t total : {0, 1, 2, 5, 13}) {
    for (int64_t saved = 1; saved <= 5; ++saved) {
      const CheckpointVariable v = SavedVariable("emb", Shape{total, 3}, saved);
      REQUIRE(ValidateManifest(CheckpointManifest{0, {v}, {}, {}}).ok());
      for (int64_t target = 1; target <= 5; ++target) {
        CAPTURE(total);
        CAPTURE(saved);
        CAPTURE(target);
        const ShardLayout layout = Must(ShardLayout::Make(total, target));
        for (const ShardExtent& e : layout.Extents()) {
          CheckPlan(v, e.offset, e.rows, Must(PlanSliceReads(v, e.offset, e.rows)));
        }
      }
    }
  }
}

TEST_CASE("PlanSliceReads covers every row range of a 13-row variable") {
  for (int64_t saved = 1; saved <= 5; ++saved) {
    const CheckpointVariable v = SavedVariable("w", Shape{13}, saved);
    for (int64_t offset = 0; offset <= 13; ++offset) {
      for (int64_t rows = 0; offset + rows <= 13; ++rows) {
        CAPTURE(saved);
        CAPTURE(offset);
        CAPTURE(rows);
        CheckPlan(v, offset, rows, Must(PlanSliceReads(v, offset, rows)));
      }
    }
  }
}

TEST_CASE("PlanSliceReads reads a scalar from its one slice") {
  CheckpointVariable v;
  v.name = "global_step";
  v.slices = {{"step.slice", 0, 1}};
  REQUIRE(ValidateManifest(CheckpointManifest{0, {v}, {}, {}}).ok());
  const std::vector<SliceRead> reads = Must(PlanSliceReads(v, 0, 1));
  REQUIRE(reads.size() == 1);
  CHECK(reads[0].slice == 0);
  CHECK(reads[0].source_row == 0);
  CHECK(reads[0].target_row == 0);
  CHECK(reads[0].rows == 1);
}

TEST_CASE("PlanSliceReads rejects ranges outside the variable and slices that do not tile") {
  const CheckpointVariable v = SavedVariable("emb", Shape{13, 2}, 3);
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  struct Case {
    int64_t offset, rows;
  };
  for (const Case& c :
       std::vector<Case>{{-1, 2}, {0, 14}, {13, 1}, {14, 0}, {2, -1}, {kMax, 1}, {1, kMax}}) {
    CAPTURE(c.offset);
    CAPTURE(c.rows);
    const absl::Status status = PlanSliceReads(v, c.offset, c.rows).status();
    CHECK(absl::IsInvalidArgument(status));
    CHECK(Contains(status, "not inside [0, 13)"));
  }
  CheckpointVariable gap = v;
  gap.slices[1].row_offset += 1;  // rows 5.. of slice 1 moved: row 5 is held by no slice
  const absl::Status status = PlanSliceReads(gap, 0, 13).status();
  CHECK(absl::IsInvalidArgument(status));
  CHECK(Contains(status, "no slice holds row 5"));
  CheckpointVariable garbage = v;
  garbage.slices[0].rows = -kMax;
  CHECK(absl::IsInvalidArgument(PlanSliceReads(garbage, 0, 13).status()));
  CheckpointVariable none = v;
  none.slices.clear();
  CHECK(absl::IsInvalidArgument(PlanSliceReads(none, 0, 1).status()));
}

// Saves `full` (and two slots derived from it) as `saved` div shards.
std::vector<TensorSlice> SaveSlices(const std::string& name, const Tensor& full, int64_t saved,
                                    bool with_slots) {
  std::vector<TensorSlice> slices;
  const ShardLayout layout = Must(ShardLayout::Make(full.rows(), saved));
  for (const ShardExtent& e : layout.Extents()) {
    TensorSlice s;
    s.variable = name;
    s.full_shape = full.shape();
    s.row_offset = e.offset;
    s.value = full.shape().rank() == 0 ? full : Tensor::Copy(full.RowBlock(e.offset, e.rows));
    if (with_slots) {
      s.slot_names = {"m", "v"};
      Tensor m = s.value, sq = s.value;
      for (float& x : m.values()) x *= 10;
      for (float& x : sq.values()) x = -x;
      s.slots = {std::move(m), std::move(sq)};
    }
    s.step = 100 + e.shard;
    REQUIRE(ValidateTensorSlice(s).ok());
    slices.push_back(std::move(s));
  }
  return slices;
}

Tensor Iota(Shape shape) {
  Tensor t(std::move(shape));
  for (int64_t i = 0; i < t.size(); ++i) t.values()[i] = static_cast<float>(i) + 0.5f;
  return t;
}

std::vector<float> Values(ConstTensorView view) {
  return std::vector<float>(view.data(), view.data() + view.size());
}

TEST_CASE("AssembleSlice round trips every N -> M resharding, slots included") {
  for (bool with_slots : {false, true}) {
    for (int64_t saved = 1; saved <= 5; ++saved) {
      for (int64_t target = 1; target <= 5; ++target) {
        CAPTURE(with_slots);
        CAPTURE(saved);
        CAPTURE(target);
        const Tensor full = Iota(Shape{13, 3});
        const std::vector<TensorSlice> files = SaveSlices("emb", full, saved, with_slots);
        CheckpointVariable v = SavedVariable(
            "emb", full.shape(), saved,
            with_slots ? std::vector<std::string>{"m", "v"} : std::vector<std::string>{});
        v.step = 100 + saved - 1;
        const ShardLayout layout = Must(ShardLayout::Make(13, target));
        for (const ShardExtent& e : layout.Extents()) {
          const std::vector<SliceRead> reads = Must(PlanSliceReads(v, e.offset, e.rows));
          std::vector<const TensorSlice*> read_slices;
          int64_t max_step = 0;
          for (const SliceRead& r : reads) {
            read_slices.push_back(&files[r.slice]);
            max_step = std::max(max_step, files[r.slice].step);
          }
          const TensorSlice block = Must(AssembleSlice(v, e.offset, e.rows, reads, read_slices));
          CHECK(ValidateTensorSlice(block).ok());
          CHECK(block.variable == "emb");
          CHECK(block.full_shape == full.shape());
          CHECK(block.row_offset == e.offset);
          CHECK(block.step == max_step);
          REQUIRE(block.value.shape() == Shape({e.rows, 3}));
          CHECK(Values(block.value) == Values(full.RowBlock(e.offset, e.rows)));
          REQUIRE(block.slot_names == v.slot_names);
          REQUIRE(block.slots.size() == v.slot_names.size());
          for (size_t k = 0; k < block.slots.size(); ++k) {
            std::vector<float> want = Values(full.RowBlock(e.offset, e.rows));
            for (float& x : want) x = k == 0 ? x * 10 : -x;
            CHECK(Values(block.slots[k]) == want);
          }
        }
      }
    }
  }
}

TEST_CASE("AssembleSlice restores a scalar and an empty block") {
  const Tensor scalar = Must(Tensor::FromVector(Shape(), {42.0f}));
  const std::vector<TensorSlice> files = SaveSlices("lr", scalar, 1, true);
  CheckpointVariable v = SavedVariable("lr", Shape(), 1, {"m", "v"});
  v.optimizer = OptimizerSpec{"adam", {}};  // whose slots these are
  REQUIRE(ValidateManifest(CheckpointManifest{0, {v}, {}, {}}).ok());
  const std::vector<SliceRead> reads = Must(PlanSliceReads(v, 0, 1));
  const TensorSlice block = Must(AssembleSlice(v, 0, 1, reads, {&files[0]}));
  CHECK(block.value.shape() == Shape());
  CHECK(Values(block.value) == std::vector<float>{42.0f});
  REQUIRE(block.slots.size() == 2);
  CHECK(Values(block.slots[0]) == std::vector<float>{420.0f});
  CHECK(block.step == 100);

  // An empty target shard (more shards than rows) reads nothing and gets the variable's step.
  CheckpointVariable emb = SavedVariable("emb", Shape{2, 3}, 2, {"m", "v"});
  emb.step = 7;
  const std::vector<SliceRead> none = Must(PlanSliceReads(emb, 2, 0));
  CHECK(none.empty());
  const TensorSlice empty = Must(AssembleSlice(emb, 2, 0, none, {}));
  CHECK(empty.value.shape() == Shape({0, 3}));
  CHECK(empty.slots.size() == 2);
  CHECK(empty.step == 7);
  CHECK(ValidateTensorSlice(empty).ok());

  // Rows of no elements still restore into any layout.
  const Tensor hollow(Shape{13, 0});
  const std::vector<TensorSlice> hollow_files = SaveSlices("hollow", hollow, 3, true);
  const CheckpointVariable hollow_var = SavedVariable("hollow", hollow.shape(), 3, {"m", "v"});
  const std::vector<SliceRead> hollow_reads = Must(PlanSliceReads(hollow_var, 2, 9));
  std::vector<const TensorSlice*> hollow_slices;
  for (const SliceRead& r : hollow_reads) hollow_slices.push_back(&hollow_files[r.slice]);
  const TensorSlice block9 = Must(AssembleSlice(hollow_var, 2, 9, hollow_reads, hollow_slices));
  CHECK(block9.value.shape() == Shape({9, 0}));
  CHECK(block9.slots[1].shape() == Shape({9, 0}));
}

TEST_CASE("AssembleSlice rejects slices that do not match the manifest") {
  const Tensor full = Iota(Shape{13, 3});
  const std::vector<TensorSlice> files = SaveSlices("emb", full, 2, true);
  const CheckpointVariable v = SavedVariable("emb", full.shape(), 2, {"m", "v"});
  const std::vector<SliceRead> reads = Must(PlanSliceReads(v, 0, 13));
  REQUIRE(reads.size() == 2);
  REQUIRE(AssembleSlice(v, 0, 13, reads, {&files[0], &files[1]}).ok());

  struct Case {
    std::string name;
    std::function<void(std::vector<SliceRead>&, TensorSlice&, CheckpointVariable&)> corrupt;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"another variable", [](auto&, TensorSlice& s, auto&) { s.variable = "other"; },
       "holds variable 'other'"},
      {"another full shape",
       [](auto&, TensorSlice& s, auto&) {
         s.full_shape = Shape{14, 3};
       },
       "the manifest says float32 [13, 3]"},
      {"another dtype", [](auto&, TensorSlice& s, auto&) { s.dtype = DType::kInt64; },
       "holds a variable of int64 [13, 3]"},
      {"other slot names",
       [](auto&, TensorSlice& s, auto&) {
         s.slot_names = {"m", "w"};
       },
       "has slots [m, w], the manifest says [m, v]"},
      {"a slot of the wrong shape",
       [](auto&, TensorSlice& s, auto&) {
         s.slots[1] = Tensor(Shape{5, 3});
       },
       "slot 'v'"},
      {"rows the manifest does not name", [](auto&, TensorSlice& s, auto&) { s.row_offset = 6; },
       "the manifest says [7, +6)"},
      {"a read past the slice",
       [](std::vector<SliceRead>& r, auto&, auto&) { r[1].source_row = 1; }, "not inside"},
      {"reads that leave a gap", [](std::vector<SliceRead>& r, auto&, auto&) { r[1].rows = 5; },
       "cover 12 of 13 rows"},
      {"reads that overlap", [](std::vector<SliceRead>& r, auto&, auto&) { r[1].target_row = 6; },
       "reads do not tile"},
      {"a slice index out of range",
       [](std::vector<SliceRead>& r, auto&, auto&) { r[1].slice = 9; }, "slice index 9"},
      {"a negative step", [](auto&, TensorSlice& s, auto&) { s.step = -1; }, "negative step"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    std::vector<SliceRead> r = reads;
    TensorSlice second = files[1];
    CheckpointVariable var = v;
    c.corrupt(r, second, var);
    const absl::Status status = AssembleSlice(var, 0, 13, r, {&files[0], &second}).status();
    CHECK(absl::IsInvalidArgument(status));
    CHECK_MESSAGE(Contains(status, c.message), status.ToString());
  }
  CHECK(absl::IsInvalidArgument(AssembleSlice(v, 0, 13, reads, {&files[0]}).status()));
  CHECK(absl::IsInvalidArgument(AssembleSlice(v, 0, 13, reads, {&files[0], nullptr}).status()));
  CHECK(absl::IsInvalidArgument(AssembleSlice(v, 0, 14, reads, {&files[0], &files[1]}).status()));
}

TEST_CASE(
    "a slice of another checkpoint is DataLoss naming its file (Note [Checkpoint identity])") {
  const Tensor full = Iota(Shape{13, 3});
  std::vector<TensorSlice> files = SaveSlices("emb", full, 2, true);
  CheckpointVariable v = SavedVariable("emb", full.shape(), 2, {"m", "v"});
  const RunId run{0x1111, 0x2222};
  const RunId other_run{0x3333, 0x4444};
  v.checkpoint = {run, 400};
  for (TensorSlice& file : files) file.checkpoint = {run, 400};
  const std::vector<SliceRead> reads = Must(PlanSliceReads(v, 0, 13));
  REQUIRE(AssembleSlice(v, 0, 13, reads, {&files[0], &files[1]}).ok());

  struct Case {
    std::string name;
    CheckpointId manifest;  // the entry's
    CheckpointId file;      // the second file's
    std::string message;    // empty: accepted
  };
  const std::vector<Case> cases = {
      {"the same variable's file of another step",
       {run, 400},
       {run, 200},
       "file emb-1.slice belongs to another checkpoint (run 00000000000011110000000000002222 "
       "step 200; its manifest: run 00000000000011110000000000002222 step 400)"},
      {"a file of another run",
       {run, 400},
       {other_run, 400},
       "(run 00000000000033330000000000004444 step 400; its manifest"},
      {"a file without a run id under a manifest with one",
       {run, 400},
       {RunId{}, 0},
       "(no run id; its manifest: run"},
      {"a file with a run id under a manifest without one",
       {RunId{}, 400},
       {run, 400},
       "its manifest: no run id)"},
      {"an older checkpoint: neither has a run id", {RunId{}, 400}, {RunId{}, 0}, ""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CheckpointVariable entry = v;
    entry.checkpoint = c.manifest;
    TensorSlice first = files[0];
    first.checkpoint = c.manifest.run.empty() ? CheckpointId{} : c.manifest;
    TensorSlice second = files[1];
    second.checkpoint = c.file;
    const absl::Status status = AssembleSlice(entry, 0, 13, reads, {&first, &second}).status();
    if (c.message.empty()) {
      CHECK_MESSAGE(status.ok(), status.ToString());
    } else {
      CHECK(absl::IsDataLoss(status));
      CHECK_MESSAGE(Contains(status, c.message), status.ToString());
    }
  }
}

TEST_CASE("run ids are random, never empty, and print as 32 hex digits") {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const RunId id = RunId::Random();
    CHECK_FALSE(id.empty());
    const std::string text = id.ToString();
    CHECK(text.size() == 32);
    CHECK(text.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(text);
  }
  CHECK(seen.size() == 1000);
  CHECK(RunId{}.empty());
  CHECK(RunId{}.ToString() == "none");
  CHECK(RunId{0, 255}.ToString() == "000000000000000000000000000000ff");
  CHECK(CheckpointId{RunId{1, 2}, 30}.ToString() == "run 00000000000000010000000000000002 step 30");
  CHECK(CheckpointId{RunId{}, 30}.ToString() == "no run id");
  CHECK(CheckpointId{RunId{1, 2}, 30} != CheckpointId{RunId{1, 2}, 31});
  CHECK(CheckpointId{RunId{1, 2}, 30} != CheckpointId{RunId{1, 3}, 30});
}

TEST_CASE("ValidateTensorSlice accepts consistent slices and names what is wrong otherwise") {
  TensorSlice good;
  good.variable = "emb";
  good.full_shape = Shape{13, 3};
  good.row_offset = 10;
  good.value = Tensor(Shape{3, 3});
  good.slot_names = {"accumulator"};
  good.slots = {Tensor(Shape{3, 3})};
  good.step = 5;
  REQUIRE(ValidateTensorSlice(good).ok());

  struct Case {
    std::string name;
    std::function<void(TensorSlice&)> corrupt;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no name", [](TensorSlice& s) { s.variable.clear(); }, "empty variable name"},
      {"rows past the end", [](TensorSlice& s) { s.row_offset = 11; }, "not inside [0, 13)"},
      {"negative offset", [](TensorSlice& s) { s.row_offset = -1; }, "not inside"},
      {"other row width",
       [](TensorSlice& s) {
         s.full_shape = Shape{13, 4};
       },
       "no row block"},
      {"other rank", [](TensorSlice& s) { s.full_shape = Shape{13}; }, "no row block"},
      {"negative dim",
       [](TensorSlice& s) {
         s.full_shape = Shape{-13, 3};
       },
       "negative dimension"},
      {"overflowing shape",
       [](TensorSlice& s) {
         s.full_shape = Shape{int64_t{1} << 40, 3, int64_t{1} << 40};
       },
       "too many elements"},
      {"bad dtype", [](TensorSlice& s) { s.dtype = static_cast<DType>(9); }, "invalid dtype 9"},
      {"slot count", [](TensorSlice& s) { s.slots.clear(); }, "0 slot tensors"},
      {"slot shape",
       [](TensorSlice& s) {
         s.slots[0] = Tensor(Shape{2, 3});
       },
       "accumulator"},
      {"empty slot name", [](TensorSlice& s) { s.slot_names[0].clear(); }, "empty slot name"},
      {"duplicate slot",
       [](TensorSlice& s) {
         s.slot_names = {"a", "a"};
         s.slots.push_back(s.slots[0]);
       },
       "duplicate slot name 'a'"},
      {"negative step", [](TensorSlice& s) { s.step = -3; }, "negative step -3"},
      {"negative checkpoint step", [](TensorSlice& s) { s.checkpoint.global_step = -3; },
       "negative checkpoint step -3"},
      {"scalar with rows",
       [](TensorSlice& s) {
         s.full_shape = Shape();
         s.row_offset = 0;
       },
       "scalar"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    TensorSlice s = good;
    c.corrupt(s);
    const absl::Status status = ValidateTensorSlice(s);
    CHECK(absl::IsInvalidArgument(status));
    CHECK_MESSAGE(Contains(status, c.message), status.ToString());
  }
}

TEST_CASE("ValidateManifest checks names, files, tiling and steps") {
  CheckpointManifest good;
  good.global_step = 12;
  good.variables = {SavedVariable("emb", Shape{13, 3}, 5, {"accumulator"}),
                    SavedVariable("bias", Shape{4}, 1)};
  good.variables[0].optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}};
  CheckpointVariable scalar;
  scalar.name = "scale";
  scalar.slices = {{"scale.slice", 0, 1}};
  good.variables.push_back(scalar);
  good.variables.push_back(SavedVariable("empty", Shape{0, 3}, 1));
  REQUIRE(ValidateManifest(good).ok());

  struct Case {
    std::string name;
    std::function<void(CheckpointManifest&)> corrupt;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"negative global step", [](CheckpointManifest& m) { m.global_step = -1; },
       "negative global step"},
      {"empty name", [](CheckpointManifest& m) { m.variables[1].name.clear(); }, "empty name"},
      {"duplicate name", [](CheckpointManifest& m) { m.variables[1].name = "emb"; },
       "duplicate variable 'emb'"},
      {"file in a directory", [](CheckpointManifest& m) { m.variables[0].slices[2].file = "a/b"; },
       "'a/b', not a plain file name"},
      {"parent directory", [](CheckpointManifest& m) { m.variables[0].slices[0].file = ".."; },
       "not a plain file name"},
      {"empty file", [](CheckpointManifest& m) { m.variables[0].slices[0].file.clear(); },
       "not a plain file name"},
      {"gap", [](CheckpointManifest& m) { m.variables[0].slices[1].row_offset = 4; },
       "slice 1 starts at row 4, expected 3"},
      {"overlap", [](CheckpointManifest& m) { m.variables[0].slices[1].row_offset = 2; },
       "expected 3"},
      {"short", [](CheckpointManifest& m) { m.variables[0].slices.pop_back(); },
       "slices cover rows [0, 11) of 13"},
      {"past the end", [](CheckpointManifest& m) { m.variables[0].slices[4].rows = 3; },
       "not inside [0, 13)"},
      {"negative rows", [](CheckpointManifest& m) { m.variables[0].slices[4].rows = -2; },
       "not inside"},
      {"scalar in two slices",
       [](CheckpointManifest& m) {
         m.variables[2].slices.push_back({"x", 1, 0});
       },
       "scalar"},
      {"negative step", [](CheckpointManifest& m) { m.variables[0].step = -1; }, "negative step"},
      {"negative dim", [](CheckpointManifest& m) { m.variables[1].shape = Shape{-4}; },
       "negative dimension"},
      {"duplicate slots",
       [](CheckpointManifest& m) {
         m.variables[0].slot_names = {"a", "a"};
       },
       "duplicate slot"},
      {"unnamed optimizer", [](CheckpointManifest& m) { m.variables[0].optimizer->name.clear(); },
       "unknown optimizer ''"},
      {"an unknown optimizer",
       [](CheckpointManifest& m) { m.variables[0].optimizer->name = "adagrd"; },
       "checkpoint variable emb: unknown optimizer 'adagrd'"},
      {"a NaN learning rate",
       [](CheckpointManifest& m) {
         m.variables[0].optimizer->params["learning_rate"] = std::nan("");
       },
       "learning_rate must be >= 0 and finite, got nan"},
      {"an infinite hyperparameter",
       [](CheckpointManifest& m) {
         m.variables[0].optimizer->params["initial_accumulator_value"] =
             std::numeric_limits<double>::infinity();
       },
       "initial_accumulator_value must be"},
      {"an unknown hyperparameter",
       [](CheckpointManifest& m) { m.variables[0].optimizer->params["beta_9"] = 0.5; },
       "unknown hyperparameter 'beta_9'"},
      {"another rule's slots",
       [](CheckpointManifest& m) {
         m.variables[0].slot_names = {"m", "v"};
       },
       "slots [m, v], but optimizer 'adagrad' has [accumulator]"},
      {"slots without an optimizer",
       [](CheckpointManifest& m) { m.variables[1].slot_names = {"accumulator"}; },
       "checkpoint variable bias: slots [accumulator] without an optimizer"},
      {"one file named twice",
       [](CheckpointManifest& m) { m.variables[1].slices[0].file = m.variables[0].slices[3].file; },
       "names 'emb-3.slice', which another slice names too"},
      {"bad dtype", [](CheckpointManifest& m) { m.variables[0].dtype = static_cast<DType>(0); },
       "invalid dtype 0"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    CheckpointManifest m = good;
    c.corrupt(m);
    const absl::Status status = ValidateManifest(m);
    CHECK(absl::IsInvalidArgument(status));
    CHECK_MESSAGE(Contains(status, c.message), status.ToString());
  }
}

TEST_CASE("FindVariable finds by name and lists the names it has otherwise") {
  CheckpointManifest m;
  m.variables = {SavedVariable("a", Shape{2}, 1), SavedVariable("b", Shape{2}, 1)};
  CHECK(Must(FindVariable(m, "b"))->name == "b");
  const absl::Status status = FindVariable(m, "c").status();
  CHECK(absl::IsNotFound(status));
  CHECK(Contains(status, "no variable 'c'; it has [a, b]"));
}

}  // namespace
}  // namespace tessera
