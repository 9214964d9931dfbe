#include "core/checkpoint/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "core/base/random.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// Every check here runs on decoded, untrusted data (schema/ calls these after parsing a file), so
// none of them may overflow: row arithmetic compares against differences instead of adding, and
// element counts are multiplied with an explicit bound.

bool IsValidDType(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kInt64 || dtype == DType::kString;
}

// InvalidArgument unless every dim is >= 0 and the element count fits in an int64.
absl::Status CheckShape(const Shape& shape, absl::string_view what) {
  int64_t elements = 1;
  for (int64_t d : shape.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", shape.ToString(), " has a negative dimension"));
    }
    if (d != 0 && elements > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", shape.ToString(), " has too many elements"));
    }
    elements *= d;
  }
  return absl::OkStatus();
}

// InvalidArgument unless `names` are non-empty and distinct.
absl::Status CheckSlotNames(const std::vector<std::string>& names, absl::string_view what) {
  std::set<absl::string_view> seen;
  for (const std::string& name : names) {
    if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty slot name"));
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": duplicate slot name '", name, "'"));
    }
  }
  return absl::OkStatus();
}

// A plain file name: no directory part, so a manifest cannot point outside its checkpoint.
bool IsPlainFileName(absl::string_view file) {
  return !file.empty() && file != "." && file != ".." &&
         file.find_first_of(absl::string_view("/\\\0", 3)) == absl::string_view::npos;
}

// InvalidArgument unless [offset, offset + rows) lies inside [0, total).
absl::Status CheckRowRange(int64_t offset, int64_t rows, int64_t total, absl::string_view what) {
  if (offset < 0 || rows < 0 || offset > total || rows > total - offset) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": rows [", offset, ", ", offset, " + ",
                                                   rows, ") are not inside [0, ", total, ")"));
  }
  return absl::OkStatus();
}

std::string JoinNames(const std::vector<std::string>& names) {
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
}

// InvalidArgument unless the variable's optimizer is one MakeOptimizer builds (a known rule, its
// hyperparameters known, finite and in range) and its slot names are that rule's; a variable
// saved without an optimizer has no slots.
absl::Status CheckOptimizer(const CheckpointVariable& v, absl::string_view what) {
  if (!v.optimizer.has_value()) {
    if (v.slot_names.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": slots ", JoinNames(v.slot_names), " without an optimizer"));
  }
  absl::StatusOr<std::unique_ptr<Optimizer>> rule = MakeOptimizer(*v.optimizer);
  if (!rule.ok()) return Annotate(rule.status(), what);
  const std::vector<std::string> slots = (*rule)->SlotNames();
  if (v.slot_names != slots) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": slots ", JoinNames(v.slot_names),
                                                   ", but optimizer '", v.optimizer->name, "' has ",
                                                   JoinNames(slots)));
  }
  return absl::OkStatus();
}

// 64 random bits from the operating system, or, where it has no entropy source (std::random_device
// throws), Philox over the time, the process id and a counter: distinct per call and per process.
uint64_t RandomBits() {
  try {
    std::random_device device;
    return uint64_t{device()} << 32 | device();
  } catch (const std::exception&) {
    static std::atomic<uint64_t> calls{0};
    const PhiloxCounter bits = CounterRandom(static_cast<uint64_t>(absl::GetCurrentTimeNanos()),
                                             static_cast<uint64_t>(::getpid()))
                                   .Bits(calls++);
    return uint64_t{bits[0]} << 32 | bits[1];
  }
}

}  // namespace

RunId RunId::Random() {
  RunId id;
  while (id.empty()) id = RunId{RandomBits(), RandomBits()};
  return id;
}

std::string RunId::ToString() const {
  if (empty()) return "none";
  return absl::StrFormat("%016x%016x", high, low);
}

std::string CheckpointId::ToString() const {
  if (run.empty()) return "no run id";
  return absl::StrCat("run ", run.ToString(), " step ", global_step);
}

TensorSliceView ViewOf(const TensorSlice& slice) {
  TensorSliceView view;
  view.variable = slice.variable;
  view.full_shape = slice.full_shape;
  view.dtype = slice.dtype;
  view.row_offset = slice.row_offset;
  view.value = slice.value.view();
  view.slot_names = slice.slot_names;
  for (const Tensor& slot : slice.slots) view.slots.push_back(slot.view());
  view.step = slice.step;
  view.checkpoint = slice.checkpoint;
  return view;
}

TensorSlice CopyOf(const TensorSliceView& view) {
  TensorSlice slice;
  slice.variable = view.variable;
  slice.full_shape = view.full_shape;
  slice.dtype = view.dtype;
  slice.row_offset = view.row_offset;
  slice.value = Tensor::Copy(view.value);
  slice.slot_names = view.slot_names;
  for (const ConstTensorView& slot : view.slots) slice.slots.push_back(Tensor::Copy(slot));
  slice.step = view.step;
  slice.checkpoint = view.checkpoint;
  return slice;
}

absl::Status ValidateTensorSlice(const TensorSlice& slice) {
  return ValidateTensorSlice(ViewOf(slice));
}

absl::Status ValidateTensorSlice(const TensorSliceView& slice) {
  if (slice.variable.empty()) {
    return absl::InvalidArgumentError("tensor slice: empty variable name");
  }
  const std::string what = absl::StrCat("tensor slice of ", slice.variable);
  if (!IsValidDType(slice.dtype)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": invalid dtype ", static_cast<int>(slice.dtype)));
  }
  TESSERA_RETURN_IF_ERROR(CheckShape(slice.full_shape, what));
  const Shape& shape = slice.value.shape();
  if (slice.full_shape.rank() == 0) {
    if (shape.rank() != 0 || slice.row_offset != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a scalar's slice must have shape [] at offset 0, got shape ",
                       shape.ToString(), " at offset ", slice.row_offset));
    }
  } else {
    if (shape.rank() != slice.full_shape.rank() ||
        !std::equal(shape.dims().begin() + 1, shape.dims().end(),
                    slice.full_shape.dims().begin() + 1)) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": value shape ", shape.ToString(),
                                                     " is no row block of full shape ",
                                                     slice.full_shape.ToString()));
    }
    TESSERA_RETURN_IF_ERROR(
        CheckRowRange(slice.row_offset, shape.rows(), slice.full_shape.rows(), what));
  }
  if (slice.slots.size() != slice.slot_names.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", slice.slots.size(),
                                                   " slot tensors for slot names ",
                                                   JoinNames(slice.slot_names)));
  }
  TESSERA_RETURN_IF_ERROR(CheckSlotNames(slice.slot_names, what));
  for (size_t i = 0; i < slice.slots.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(CheckSameShape(
        slice.slots[i].shape(), shape, absl::StrCat(what, ": slot '", slice.slot_names[i], "'")));
  }
  if (slice.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": negative step ", slice.step));
  }
  if (slice.checkpoint.global_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": negative checkpoint step ", slice.checkpoint.global_step));
  }
  return absl::OkStatus();
}

absl::Status ValidateManifest(const CheckpointManifest& manifest) {
  if (manifest.global_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint manifest: negative global step ", manifest.global_step));
  }
  std::set<absl::string_view> names;
  std::set<absl::string_view> files;  // of every variable: a file holds one slice of one variable
  for (const CheckpointVariable& v : manifest.variables) {
    if (v.name.empty()) {
      return absl::InvalidArgumentError("checkpoint manifest: a variable has an empty name");
    }
    if (!names.insert(v.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint manifest: duplicate variable '", v.name, "'"));
    }
    const std::string what = absl::StrCat("checkpoint variable ", v.name);
    if (!IsValidDType(v.dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": invalid dtype ", static_cast<int>(v.dtype)));
    }
    TESSERA_RETURN_IF_ERROR(CheckShape(v.shape, what));
    TESSERA_RETURN_IF_ERROR(CheckSlotNames(v.slot_names, what));
    TESSERA_RETURN_IF_ERROR(CheckOptimizer(v, what));
    if (v.step < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": negative step ", v.step));
    }
    if (v.shape.rank() == 0 &&
        (v.slices.size() != 1 || v.slices[0].row_offset != 0 || v.slices[0].rows != 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": a scalar must be saved as one slice of 1 row at offset 0"));
    }
    // The slices tile [0, rows) in order: each starts where the previous one ended.
    const int64_t total = v.shape.rows();
    int64_t next = 0;
    for (size_t i = 0; i < v.slices.size(); ++i) {
      const SliceFileRef& ref = v.slices[i];
      if (!IsPlainFileName(ref.file)) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": slice ", i, " names '", ref.file, "', not a plain file name"));
      }
      if (!files.insert(ref.file).second) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": slice ", i, " names '", ref.file,
                                                       "', which another slice names too"));
      }
      if (ref.row_offset != next) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": slice ", i, " starts at row ",
                                                       ref.row_offset, ", expected ", next));
      }
      TESSERA_RETURN_IF_ERROR(CheckRowRange(
          ref.row_offset, ref.rows, total, absl::StrCat(what, ": slice ", i, " (", ref.file, ")")));
      next = ref.row_offset + ref.rows;
    }
    if (next != total) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": slices cover rows [0, ", next, ") of ", total));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<const CheckpointVariable*> FindVariable(const CheckpointManifest& manifest,
                                                       const std::string& name) {
  for (const CheckpointVariable& v : manifest.variables) {
    if (v.name == name) return &v;
  }
  std::vector<std::string> names;
  for (const CheckpointVariable& v : manifest.variables) names.push_back(v.name);
  return absl::NotFoundError(
      absl::StrCat("the checkpoint has no variable '", name, "'; it has ", JoinNames(names)));
}

absl::StatusOr<std::vector<SliceRead>> PlanSliceReads(const CheckpointVariable& variable,
                                                      int64_t offset, int64_t rows) {
  const std::string what = absl::StrCat("restoring ", variable.name);
  TESSERA_RETURN_IF_ERROR(CheckRowRange(offset, rows, variable.shape.rows(), what));
  const std::vector<SliceFileRef>& slices = variable.slices;
  // Slices are in row order (ValidateManifest), so the first one ending after `offset` is found
  // by bisection; the walk then checks contiguity itself, so an unvalidated variable gives an
  // error rather than a wrong plan.
  const auto first =
      std::partition_point(slices.begin(), slices.end(), [offset](const SliceFileRef& s) {
        return s.rows >= 0 && s.row_offset <= offset - s.rows;  // ends at or before offset
      });
  std::vector<SliceRead> reads;
  const int64_t end = offset + rows;
  int64_t row = offset;
  for (auto it = first; row < end && it != slices.end(); ++it) {
    if (it->rows == 0) continue;  // an empty shard's slice holds nothing to read
    // The slice must hold `row`; otherwise there is a gap (or garbage), reported below.
    if (it->row_offset < 0 || it->row_offset > row || row - it->row_offset >= it->rows) break;
    const int64_t skip = row - it->row_offset;
    const int64_t take = std::min(end - row, it->rows - skip);
    reads.push_back({static_cast<size_t>(it - slices.begin()), skip, row - offset, take});
    row += take;
  }
  if (row != end) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": no slice holds row ", row, " (the slices do not tile the variable)"));
  }
  return reads;
}

absl::StatusOr<int64_t> CheckSliceReads(const CheckpointVariable& variable, int64_t offset,
                                        int64_t rows, const std::vector<SliceRead>& reads,
                                        const std::vector<const TensorSliceView*>& slices) {
  const std::string what = absl::StrCat("restoring ", variable.name);
  TESSERA_RETURN_IF_ERROR(CheckShape(variable.shape, what));
  TESSERA_RETURN_IF_ERROR(CheckRowRange(offset, rows, variable.shape.rows(), what));
  if (reads.size() != slices.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", reads.size(), " reads but ", slices.size(), " slices"));
  }
  // Check every read before allocating: they must tile the block in order, each from a slice
  // that is the one the manifest names and holds the rows read.
  int64_t covered = 0;
  int64_t step = reads.empty() ? variable.step : 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    const SliceRead& read = reads[i];
    const TensorSliceView* slice = slices[i];
    const std::string read_what = absl::StrCat(what, ": read ", i);
    if (slice == nullptr) return absl::InvalidArgumentError(absl::StrCat(read_what, ": no slice"));
    if (read.slice >= variable.slices.size()) {
      return absl::InvalidArgumentError(absl::StrCat(read_what, ": slice index ", read.slice,
                                                     " out of range for ", variable.slices.size(),
                                                     " slices"));
    }
    const SliceFileRef& ref = variable.slices[read.slice];
    TESSERA_RETURN_IF_ERROR(Annotate(ValidateTensorSlice(*slice), read_what));
    if (slice->variable != variable.name) {
      return absl::InvalidArgumentError(
          absl::StrCat(read_what, ": file ", ref.file, " holds variable '", slice->variable, "'"));
    }
    // Note [Checkpoint identity]: without a run id (an older checkpoint) only the run is
    // compared, since such files carry no step either.
    const CheckpointId& want = variable.checkpoint;
    if (want.run.empty() ? !slice->checkpoint.run.empty() : slice->checkpoint != want) {
      return absl::DataLossError(
          absl::StrCat(read_what, ": file ", ref.file, " belongs to another checkpoint (",
                       slice->checkpoint.ToString(), "; its manifest: ", want.ToString(), ")"));
    }
    if (slice->full_shape != variable.shape || slice->dtype != variable.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          read_what, ": file ", ref.file, " holds a variable of ", DTypeName(slice->dtype), " ",
          slice->full_shape.ToString(), ", the manifest says ", DTypeName(variable.dtype), " ",
          variable.shape.ToString()));
    }
    if (slice->row_offset != ref.row_offset || slice->value.rows() != ref.rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          read_what, ": file ", ref.file, " holds rows [", slice->row_offset, ", +",
          slice->value.rows(), "), the manifest says [", ref.row_offset, ", +", ref.rows, ")"));
    }
    if (slice->slot_names != variable.slot_names) {
      return absl::InvalidArgumentError(
          absl::StrCat(read_what, ": file ", ref.file, " has slots ", JoinNames(slice->slot_names),
                       ", the manifest says ", JoinNames(variable.slot_names)));
    }
    if (read.target_row != covered || read.rows <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(read_what, ": reads do not tile the block (target rows [", read.target_row,
                       ", +", read.rows, "), expected to start at ", covered, ")"));
    }
    TESSERA_RETURN_IF_ERROR(CheckRowRange(read.target_row, read.rows, rows, read_what));
    TESSERA_RETURN_IF_ERROR(
        CheckRowRange(read.source_row, read.rows, slice->value.rows(), read_what));
    covered += read.rows;
    step = std::max(step, slice->step);
  }
  if (covered != rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the reads cover ", covered, " of ", rows, " rows"));
  }
  return step;
}

TensorSlice EmptyBlock(const CheckpointVariable& variable, int64_t offset, int64_t rows,
                       int64_t step) {
  const Shape block_shape = variable.shape.rank() == 0 ? Shape() : variable.shape.WithRows(rows);
  TensorSlice block;
  block.variable = variable.name;
  block.full_shape = variable.shape;
  block.dtype = variable.dtype;
  block.row_offset = offset;
  block.value = Tensor(block_shape);
  block.slot_names = variable.slot_names;
  for (size_t k = 0; k < block.slot_names.size(); ++k) block.slots.emplace_back(block_shape);
  block.step = step;
  return block;
}

absl::StatusOr<TensorSlice> AssembleSlice(const CheckpointVariable& variable, int64_t offset,
                                          int64_t rows, const std::vector<SliceRead>& reads,
                                          const std::vector<const TensorSlice*>& slices) {
  std::vector<TensorSliceView> views;
  views.reserve(slices.size());
  std::vector<const TensorSliceView*> pointers;
  for (const TensorSlice* slice : slices) {
    if (slice == nullptr) {
      pointers.push_back(nullptr);
      continue;
    }
    views.push_back(ViewOf(*slice));
    pointers.push_back(&views.back());
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t step,
                           CheckSliceReads(variable, offset, rows, reads, pointers));
  TensorSlice block = EmptyBlock(variable, offset, rows, step);
  const int64_t row_size = block.value.shape().row_size();
  auto copy_rows = [row_size](const Tensor& from, const SliceRead& read, Tensor& to) {
    if (row_size == 0) return;  // rows of no elements: nothing to copy (and null data pointers)
    std::memcpy(to.data() + read.target_row * row_size, from.data() + read.source_row * row_size,
                static_cast<size_t>(read.rows * row_size) * sizeof(float));
  };
  for (size_t i = 0; i < reads.size(); ++i) {
    copy_rows(slices[i]->value, reads[i], block.value);
    for (size_t k = 0; k < block.slots.size(); ++k) {
      copy_rows(slices[i]->slots[k], reads[i], block.slots[k]);
    }
  }
  return block;
}

}  // namespace tessera
