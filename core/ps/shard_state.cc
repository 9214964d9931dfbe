#include "core/ps/shard_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/status.h"

namespace tessera {
namespace {

bool SameOptimizerSpec(const OptimizerSpec& a, const OptimizerSpec& b) {
  return a.name == b.name && a.params == b.params;
}

std::string SlotList(const std::vector<std::string>& names) {
  return absl::StrCat("[", absl::StrJoin(names, ", "), "]");
}

absl::Status CheckOptimizerDType(const ShardSpec& spec, absl::string_view optimizer) {
  if (IsFloating(spec.dtype)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "optimizer '", optimizer, "' needs a floating variable, dtype is ", DTypeName(spec.dtype)));
}

}  // namespace

std::string ShardName(absl::string_view variable, int32_t shard_index, int32_t num_shards) {
  if (num_shards == 1) return std::string(variable);
  return absl::StrCat(variable, "/part_", shard_index);
}

Shape ShardBlockShape(const ShardSpec& spec) {
  if (spec.full_shape.rank() == 0) return spec.full_shape;
  return spec.full_shape.WithRows(spec.rows);
}

absl::Status ValidateShardSpec(const ShardSpec& spec) {
  if (spec.variable.empty()) {
    return absl::InvalidArgumentError("shard spec: the variable name is empty");
  }
  const std::string name = ShardName(spec.variable, spec.shard_index, spec.num_shards);
  if (spec.num_shards < 1 || spec.shard_index < 0 || spec.shard_index >= spec.num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("shard spec ", name, ": shard index ",
                                                   spec.shard_index, " of ", spec.num_shards,
                                                   " shards is out of range"));
  }
  if (DTypeName(spec.dtype) == "invalid") {
    return absl::InvalidArgumentError(
        absl::StrCat("shard spec ", name, ": unknown dtype ", static_cast<int>(spec.dtype)));
  }
  auto full = Shape::Make(spec.full_shape.dims());
  if (!full.ok()) return Annotate(full.status(), absl::StrCat("shard spec ", name));
  int64_t elements = 1;
  for (int64_t d : spec.full_shape.dims()) {
    if (__builtin_mul_overflow(elements, d, &elements)) {
      return absl::InvalidArgumentError(absl::StrCat("shard spec ", name, ": shape ",
                                                     spec.full_shape.ToString(),
                                                     " has more elements than int64 can count"));
    }
  }
  if (spec.full_shape.rank() == 0) {
    if (spec.num_shards != 1 || spec.row_offset != 0 || spec.rows != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "shard spec ", name,
          ": a scalar variable is one unpartitioned shard with offset 0 and 1 "
          "row, got ",
          spec.num_shards, " shards, offset ", spec.row_offset, ", ", spec.rows, " rows"));
    }
  } else if (spec.row_offset < 0 || spec.rows < 0 ||
             spec.row_offset > spec.full_shape.dim(0) - spec.rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard spec ", name, ": rows [", spec.row_offset, ", ",
                     spec.row_offset + spec.rows, ") do not lie inside the variable's ",
                     spec.full_shape.dim(0), " rows (shape ", spec.full_shape.ToString(), ")"));
  }
  if (spec.optimizer.has_value()) {
    return Annotate(CheckOptimizerDType(spec, spec.optimizer->name),
                    absl::StrCat("shard spec ", name));
  }
  return absl::OkStatus();
}

absl::Status ShardState::Validate(const ShardSpec& spec) {
  TESSERA_RETURN_IF_ERROR(ValidateShardSpec(spec));
  const std::string name = ShardName(spec.variable, spec.shard_index, spec.num_shards);
  if (spec.optimizer.has_value()) {
    TESSERA_RETURN_IF_ERROR(Annotate(MakeOptimizer(*spec.optimizer).status(), name));
  }
  return Annotate(ValidateInitializer(spec.initializer), name);
}

absl::StatusOr<ShardState> ShardState::Create(const ShardSpec& spec) {
  TESSERA_RETURN_IF_ERROR(ValidateShardSpec(spec));
  ShardState shard;
  shard.spec_ = spec;
  shard.name_ = ShardName(spec.variable, spec.shard_index, spec.num_shards);
  if (spec.optimizer.has_value()) {
    auto optimizer = MakeOptimizer(*spec.optimizer);
    if (!optimizer.ok()) return Annotate(optimizer.status(), shard.name_);
    shard.optimizer_ = std::move(optimizer).value();
  }
  // Rows are initialized on first touch (Note [Rows initialized on first touch]); a scalar, or a
  // block of zeros, at once.
  const Shape block_shape = ShardBlockShape(spec);
  const bool zeros = spec.initializer.name == "zeros";
  const bool lazy = !zeros && spec.full_shape.rank() > 0 && block_shape.rows() > 0;
  auto value = MakeInitializedBlock(lazy ? InitializerSpec{"zeros", {}, 0} : spec.initializer,
                                    spec.full_shape, spec.row_offset, block_shape.rows());
  if (!value.ok()) return Annotate(value.status(), shard.name_);
  shard.value_ = *std::move(value);
  if (lazy) {
    TESSERA_RETURN_IF_ERROR(Annotate(ValidateInitializer(spec.initializer), shard.name_));
    shard.uninitialized_.assign(static_cast<size_t>(block_shape.rows()), 1);
    shard.num_uninitialized_ = block_shape.rows();
  }
  if (shard.optimizer_) shard.slots_ = shard.optimizer_->CreateSlots(shard.value_.shape());
  return shard;
}

int64_t ShardState::bytes() const {
  int64_t elements = value_.size();
  for (const Tensor& slot : slots_.tensors) elements += slot.size();
  return elements * static_cast<int64_t>(sizeof(float));
}

ShardInfo ShardState::Info(int32_t hottest_rows) const {
  ShardInfo info;
  info.name = name_;
  info.full_shape = spec_.full_shape;
  info.row_offset = spec_.row_offset;
  info.block_shape = value_.shape();
  info.dtype = spec_.dtype;
  info.optimizer = optimizer_ ? optimizer_->spec().name : "";
  info.version = version_;
  info.bytes = bytes();
  info.updates = updates_;
  info.rows_touched = rows_touched();
  info.hottest_rows = HottestRows(hottest_rows);
  info.step = slots_.step;
  info.duplicate_updates = duplicate_updates_;
  info.ledger_marks = applied_.Marks();
  return info;
}

bool ShardState::AlreadyApplied(const UpdateId& id) {
  if (!applied_.Applied(id)) return false;
  ++duplicate_updates_;
  return true;
}

void ShardState::CountRowUpdates(absl::Span<const int64_t> local_ids) {
  ++updates_;
  if (local_ids.empty()) return;
  if (row_updates_.empty()) row_updates_.assign(static_cast<size_t>(block_shape().rows()), 0);
  uint32_t* counts = row_updates_.data();
  for (const int64_t id : local_ids) {
    uint32_t& count = counts[id];
    count += count != UINT32_MAX;  // saturates
  }
}

void ShardState::CountDenseUpdate() {
  ++updates_;
  ++dense_updates_;
}

int64_t ShardState::RowUpdates(int64_t local_row) const {
  if (local_row < 0 || local_row >= block_shape().rows()) return 0;
  const int64_t sparse =
      row_updates_.empty() ? 0 : row_updates_[static_cast<size_t>(local_row)];
  return sparse + dense_updates_;
}

int64_t ShardState::rows_touched() const {
  if (dense_updates_ > 0) return block_shape().rows();
  // A pass over the counters (vectorized: ~0.1 ms for 600,000 rows), so the hot path keeps no
  // running total.
  return std::count_if(row_updates_.begin(), row_updates_.end(),
                       [](uint32_t count) { return count != 0; });
}

std::vector<HotRow> ShardState::HottestRows(int32_t k) const {
  k = std::clamp(k, 0, kMaxHottestRows);
  std::vector<HotRow> hottest;
  const int64_t rows = block_shape().rows();
  if (k == 0 || rows_touched() == 0) return hottest;
  if (row_updates_.empty()) {
    // Dense updates only: every row counts the same; the first k rows, as ties go.
    for (int64_t r = 0; r < std::min<int64_t>(k, rows); ++r) {
      hottest.push_back(HotRow{spec_.row_offset + r, dense_updates_});
    }
    return hottest;
  }
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
    hottest.push_back(HotRow{spec_.row_offset + e.row, static_cast<int64_t>(e.count) + dense_updates_});
  }
  return hottest;
}

void ShardState::InitializeRows(absl::Span<const int64_t> local_ids) const {
  if (num_uninitialized_ == 0) return;
  const auto rows = static_cast<int64_t>(uninitialized_.size());
  auto pending = [&](int64_t id) {
    return id >= 0 && id < rows && uninitialized_[static_cast<size_t>(id)] != 0;
  };
  if (CowSnapshot* snapshot = SnapshotBeingWritten()) {
    std::vector<int64_t> filling;
    for (const int64_t id : local_ids) {
      if (pending(id)) filling.push_back(id);
    }
    snapshot->BeforeFillRows(filling);
  }
  for (const int64_t id : local_ids) {
    if (!pending(id)) continue;
    // Cannot fail: Create validated the initializer, and the row is inside the block.
    InitializeBlock(spec_.initializer, spec_.full_shape, spec_.row_offset + id,
                    value_.view().RowBlock(id, 1))
        .IgnoreError();
    uninitialized_[static_cast<size_t>(id)] = 0;
    --num_uninitialized_;
  }
  if (num_uninitialized_ == 0) uninitialized_ = {};
}

void ShardState::InitializeAllRows() const {
  if (num_uninitialized_ == 0) return;
  const auto rows = static_cast<int64_t>(uninitialized_.size());
  // Runs of consecutive rows in one call each.
  for (int64_t begin = 0; begin < rows;) {
    if (uninitialized_[static_cast<size_t>(begin)] == 0) {
      ++begin;
      continue;
    }
    int64_t end = begin + 1;
    while (end < rows && uninitialized_[static_cast<size_t>(end)] != 0) ++end;
    if (CowSnapshot* snapshot = SnapshotBeingWritten()) snapshot->BeforeFillRange(begin, end);
    InitializeBlock(spec_.initializer, spec_.full_shape, spec_.row_offset + begin,
                    value_.view().RowBlock(begin, end - begin))
        .IgnoreError();
    begin = end;
  }
  uninitialized_ = {};
  num_uninitialized_ = 0;
}

void ShardState::ForgetUninitializedRows() {
  uninitialized_ = {};
  num_uninitialized_ = 0;
}

absl::StatusOr<Tensor> ShardState::Gather(absl::Span<const int64_t> local_ids) const {
  InitializeRows(local_ids);
  auto rows = GatherRows(value_, local_ids);
  if (!rows.ok()) return Annotate(rows.status(), name_);
  return rows;
}

absl::Status ShardState::Assign(AssignKind kind, ConstTensorView value) {
  InitializeAllRows();
  BeforeWriteAll();
  TESSERA_RETURN_IF_ERROR(Annotate(AssignBlock(kind, value_.view(), value), name_));
  CountDenseUpdate();
  ++version_;
  return absl::OkStatus();
}

absl::Status ShardState::Scatter(ScatterOp op, absl::Span<const int64_t> local_ids,
                                 ConstTensorView rows) {
  InitializeRows(local_ids);
  BeforeWriteRows(local_ids);
  TESSERA_RETURN_IF_ERROR(Annotate(ScatterRows(op, value_.view(), local_ids, rows), name_));
  CountRowUpdates(local_ids);
  ++version_;
  return absl::OkStatus();
}

absl::Status ShardState::RequireOptimizer(absl::string_view what) const {
  if (optimizer_) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(name_, ": ", what, ": the shard has no optimizer"));
}

absl::Status ShardState::ApplyDenseGradient(ConstTensorView grad) {
  TESSERA_RETURN_IF_ERROR(RequireOptimizer("apply_dense_gradient"));
  TESSERA_RETURN_IF_ERROR(
      Annotate(CheckSameShape(grad.shape(), value_.shape(), "apply_dense_gradient"), name_));
  InitializeAllRows();
  BeforeWriteAll();
  TESSERA_RETURN_IF_ERROR(Annotate(optimizer_->ApplyDense(value_.view(), slots_, grad), name_));
  CountDenseUpdate();
  ++version_;
  return absl::OkStatus();
}

absl::Status ShardState::ApplySparseGradient(absl::Span<const int64_t> local_ids,
                                             ConstTensorView rows) {
  TESSERA_RETURN_IF_ERROR(RequireOptimizer("apply_sparse_gradient"));
  // Checked here as well as by the rule, so the shard's guarantee and messages do not depend on
  // each rule's validation.
  TESSERA_RETURN_IF_ERROR(Annotate(
      CheckRowUpdate("apply_sparse_gradient", value_.shape(), local_ids, rows.shape()), name_));
  InitializeRows(local_ids);
  BeforeWriteRows(local_ids);
  TESSERA_RETURN_IF_ERROR(
      Annotate(optimizer_->ApplySparse(value_.view(), slots_, local_ids, rows), name_));
  CountRowUpdates(local_ids);
  ++version_;
  return absl::OkStatus();
}

absl::Status ShardState::SetOptimizer(const OptimizerSpec& spec) {
  TESSERA_RETURN_IF_ERROR(Annotate(CheckOptimizerDType(spec_, spec.name), name_));
  auto optimizer = MakeOptimizer(spec);
  if (!optimizer.ok()) return Annotate(optimizer.status(), name_);
  if (optimizer_ && SameOptimizerSpec(optimizer_->spec(), (*optimizer)->spec())) {
    return absl::OkStatus();
  }
  BeforeWriteAll();  // the old slots are freed
  optimizer_ = std::move(optimizer).value();
  slots_ = optimizer_->CreateSlots(value_.shape());
  spec_.optimizer = optimizer_->spec();
  ++version_;
  return absl::OkStatus();
}

TensorSlice ShardState::Snapshot() const {
  TensorSlice slice;
  slice.variable = spec_.variable;
  slice.full_shape = spec_.full_shape;
  slice.dtype = spec_.dtype;
  slice.row_offset = spec_.row_offset;
  slice.value = value();
  slice.slot_names = optimizer_ ? optimizer_->SlotNames() : std::vector<std::string>();
  slice.slots = slots_.tensors;
  slice.step = slots_.step;
  return slice;
}

ShardState::~ShardState() { snapshot_.Detach(); }

std::shared_ptr<CowSnapshot> ShardState::StartSnapshot() {
  snapshot_.Detach();
  std::vector<ConstTensorView> tensors{value_.view()};
  for (const Tensor& slot : slots_.tensors) tensors.push_back(slot.view());
  // The rows still without a value are the writer's to compute (Note [Copy-on-write snapshots]).
  UnfilledRows unfilled;
  if (num_uninitialized_ > 0) {
    unfilled.rows = uninitialized_;
    unfilled.fill = [initializer = spec_.initializer, full_shape = spec_.full_shape,
                     row_offset = spec_.row_offset](int64_t begin, TensorView out) {
      // Cannot fail: Create validated the initializer, and the rows are inside the block.
      InitializeBlock(initializer, full_shape, row_offset + begin, out).IgnoreError();
    };
  }
  snapshot_.snapshot = std::make_shared<CowSnapshot>(std::move(tensors), std::move(unfilled));
  return snapshot_.snapshot;
}

CowSnapshot* ShardState::SnapshotBeingWritten() const {
  if (snapshot_.snapshot != nullptr && snapshot_.snapshot->finished()) snapshot_.snapshot = nullptr;
  return snapshot_.snapshot.get();
}

void ShardState::BeforeWriteRows(absl::Span<const int64_t> local_ids) {
  if (CowSnapshot* snapshot = SnapshotBeingWritten()) snapshot->BeforeWriteRows(local_ids);
}

void ShardState::BeforeWriteRange(int64_t begin, int64_t end) {
  if (CowSnapshot* snapshot = SnapshotBeingWritten()) snapshot->BeforeWriteRange(begin, end);
}

void ShardState::BeforeWriteAll() { snapshot_.Detach(); }

TensorSlice ShardState::SnapshotRows(int64_t begin, int64_t count) const {
  TensorSlice slice;
  slice.variable = spec_.variable;
  slice.full_shape = spec_.full_shape;
  slice.dtype = spec_.dtype;
  slice.row_offset = spec_.row_offset + begin;
  slice.value = Tensor::Copy(value().RowBlock(begin, count));
  slice.slot_names = optimizer_ ? optimizer_->SlotNames() : std::vector<std::string>();
  for (const Tensor& slot : slots_.tensors)
    slice.slots.push_back(Tensor::Copy(slot.RowBlock(begin, count)));
  slice.step = slots_.step;
  return slice;
}

absl::Status ShardState::Restore(const TensorSlice& slice) {
  TESSERA_ASSIGN_OR_RETURN(const int64_t first, CheckRestorable(slice));
  if (slice.value.shape() != value_.shape()) {
    RestoreRows(first, slice);
    return absl::OkStatus();
  }
  BeforeWriteAll();
  value_ = slice.value;  // copies into the existing block: no new memory to fault in
  ForgetUninitializedRows();
  if (!slice.slot_names.empty()) {
    slots_.tensors = slice.slots;
  } else if (optimizer_) {
    slots_ = optimizer_->CreateSlots(value_.shape());
  }
  FinishRestore(slice.step);
  return absl::OkStatus();
}

absl::Status ShardState::Restore(TensorSlice&& slice) {
  TESSERA_ASSIGN_OR_RETURN(const int64_t first, CheckRestorable(slice));
  if (slice.value.shape() != value_.shape()) {
    RestoreRows(first, slice);
    return absl::OkStatus();
  }
  BeforeWriteAll();
  value_ = std::move(slice.value);
  ForgetUninitializedRows();
  if (!slice.slot_names.empty()) {
    slots_.tensors = std::move(slice.slots);
  } else if (optimizer_) {
    slots_ = optimizer_->CreateSlots(value_.shape());
  }
  FinishRestore(slice.step);
  return absl::OkStatus();
}

void ShardState::RestoreRows(int64_t first, const TensorSlice& slice) {
  const int64_t count = slice.value.rows();
  BeforeWriteRange(first, first + count);
  const auto copy_rows = [&](const Tensor& from, Tensor& to) {
    std::copy(from.values().begin(), from.values().end(), to.RowBlock(first, count).data());
  };
  copy_rows(slice.value, value_);
  for (size_t i = 0; i < slice.slots.size(); ++i) copy_rows(slice.slots[i], slots_.tensors[i]);
  if (num_uninitialized_ > 0) {  // the restored rows are not the initializer's to fill
    for (int64_t row = first; row < first + count; ++row) {
      uint8_t& pending = uninitialized_[static_cast<size_t>(row)];
      num_uninitialized_ -= pending;
      pending = 0;
    }
    if (num_uninitialized_ == 0) uninitialized_ = {};
  }
  FinishRestore(slice.step);
}

void ShardState::FinishRestore(int64_t step) {
  slots_.step = step;
  applied_.Clear();
  ++version_;
}

absl::StatusOr<int64_t> ShardState::CheckRestorable(const TensorSlice& slice) const {
  const std::string what = absl::StrCat(name_, ": restore");
  if (!slice.variable.empty() &&
      (slice.variable != spec_.variable || slice.full_shape != spec_.full_shape ||
       slice.dtype != spec_.dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the slice holds rows of ", slice.variable, " ", slice.full_shape.ToString(), " ",
        DTypeName(slice.dtype), ", the shard rows of ", spec_.variable, " ",
        spec_.full_shape.ToString(), " ", DTypeName(spec_.dtype)));
  }
  // A named slice may hold some of the shard's rows (SnapshotRows); an unnamed one is the block.
  const Shape& block = value_.shape();
  const bool partial = !slice.variable.empty() && block.rank() > 0 &&
                       slice.value.shape().rank() == block.rank() &&
                       slice.value.shape() == block.WithRows(slice.value.rows()) &&
                       slice.value.rows() < block.rows();
  const int64_t first = slice.variable.empty() ? 0 : slice.row_offset - spec_.row_offset;
  if (!partial && first != 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the slice holds rows from ",
                                                   slice.row_offset, " of ", slice.variable,
                                                   ", the shard rows from ", spec_.row_offset));
  }
  if (partial && (first < 0 || first > block.rows() - slice.value.rows())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the slice's rows ", slice.row_offset,
                                                   "..", slice.row_offset + slice.value.rows(),
                                                   " are not all the shard's (", spec_.row_offset,
                                                   "..", spec_.row_offset + block.rows(), ")"));
  }
  if (!partial) {
    TESSERA_RETURN_IF_ERROR(Annotate(CheckSameShape(slice.value.shape(), block, "value"), what));
  }
  const std::vector<std::string> want_names =
      optimizer_ ? optimizer_->SlotNames() : std::vector<std::string>{};
  const bool has_slots = !slice.slot_names.empty();
  if (has_slots && slice.slot_names != want_names) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the snapshot's slots ", SlotList(slice.slot_names),
                     " do not match the shard's ", SlotList(want_names),
                     optimizer_ ? "" : " (the shard has no optimizer)"));
  }
  if (partial && !has_slots && optimizer_) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": a slice of some of the shard's rows must carry their slots ",
                     SlotList(want_names)));
  }
  if (slice.slots.size() != slice.slot_names.size()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", slice.slot_names.size(),
                                                   " slot names but ", slice.slots.size(),
                                                   " slot tensors"));
  }
  for (size_t i = 0; i < slice.slots.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(
        Annotate(CheckSameShape(slice.slots[i].shape(), slice.value.shape(),
                                absl::StrCat("slot '", slice.slot_names[i], "'")),
                 what));
  }
  if (slice.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": negative step ", slice.step));
  }
  return first;
}

}  // namespace tessera
