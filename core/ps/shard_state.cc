#include "core/ps/shard_state.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tessera/status.h"

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
    shard.uninitialized_ = UninitializedRows(spec.initializer, spec.full_shape, spec.row_offset,
                                             block_shape.rows());
  }
  shard.row_updates_ = RowUpdateCounts(block_shape.rows(), spec.row_offset);
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
  info.updates = updates();
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

void ShardState::InitializeRows(absl::Span<const int64_t> local_ids) const {
  if (uninitialized_.empty()) return;
  uninitialized_.InitializeRows(local_ids, value_.view(), SnapshotBeingWritten());
}

void ShardState::InitializeAllRows() const {
  if (uninitialized_.empty()) return;
  uninitialized_.InitializeAllRows(value_.view(), SnapshotBeingWritten());
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
  row_updates_.CountDenseUpdate();
  ++version_;
  return absl::OkStatus();
}

absl::Status ShardState::Scatter(ScatterOp op, absl::Span<const int64_t> local_ids,
                                 ConstTensorView rows) {
  InitializeRows(local_ids);
  BeforeWriteRows(local_ids);
  TESSERA_RETURN_IF_ERROR(Annotate(ScatterRows(op, value_.view(), local_ids, rows), name_));
  row_updates_.CountRowUpdates(local_ids);
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
  row_updates_.CountDenseUpdate();
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
  row_updates_.CountRowUpdates(local_ids);
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
  snapshot_.snapshot =
      std::make_shared<CowSnapshot>(std::move(tensors), uninitialized_.Unfilled());
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
  uninitialized_.Forget();
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
  uninitialized_.Forget();
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
  // The restored rows are not the initializer's to fill.
  uninitialized_.ForgetRange(first, first + count);
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
