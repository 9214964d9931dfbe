#include "core/mirrored/mirrored_replica.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {

absl::StatusOr<const Tensor*> MirroredReplicaContext::Read(absl::string_view name) const {
  return replica_.Read(name);
}

absl::Status MirroredReplicaContext::Assign(absl::string_view name, Tensor value) {
  return Write(name, std::move(value), /*add=*/false);
}

absl::Status MirroredReplicaContext::AssignAdd(absl::string_view name, Tensor value) {
  return Write(name, std::move(value), /*add=*/true);
}

absl::Status MirroredReplicaContext::Write(absl::string_view name, Tensor value, bool add) {
  TESSERA_ASSIGN_OR_RETURN(const MirroredVariableSpec* spec, replica_.VariableSpec(name));
  if (spec->synchronization == VariableSynchronization::kOnRead) {
    // A sync-on-read copy is the replica's own: written at once, reduced when read.
    TESSERA_ASSIGN_OR_RETURN(Tensor * copy, replica_.MutableVariable(name));
    TESSERA_RETURN_IF_ERROR(
        CheckSameShape(value.shape(), copy->shape(), absl::StrCat("a write to '", name, "'")));
    float* to = copy->data();
    for (int64_t i = 0; i < copy->size(); ++i)
      to[i] = add ? to[i] + value.data()[i] : value.data()[i];
    return absl::OkStatus();
  }
  MirroredWrite write{std::string(name), add, std::move(value)};
  TESSERA_RETURN_IF_ERROR(replica_.CheckHeldWrite(write));
  held_.push_back(std::move(write));
  return absl::OkStatus();
}

absl::StatusOr<MirroredReplica> MirroredReplica::Create(ModelSpec model,
                                                        const OptimizerSpec& optimizer) {
  TESSERA_ASSIGN_OR_RETURN(LocalTrainer trainer, LocalTrainer::Create(std::move(model), optimizer));
  return MirroredReplica(std::move(trainer));
}

absl::Status MirroredReplica::CreateVariable(const MirroredVariableSpec& spec) {
  if (spec.name.empty()) return absl::InvalidArgumentError("a variable needs a name");
  if (variables_.count(spec.name) > 0 || trainer_.variable(spec.name).ok()) {
    return absl::AlreadyExistsError(absl::StrCat("a variable named '", spec.name, "' exists"));
  }
  TESSERA_RETURN_IF_ERROR(ValidateAggregation(spec.synchronization, spec.aggregation, spec.dtype));
  if (spec.dtype != DType::kFloat32) {
    return absl::InvalidArgumentError(
        absl::StrCat("variable '", spec.name, "': mirrored variables hold float32"));
  }
  TESSERA_ASSIGN_OR_RETURN(Shape shape, Shape::Make(spec.shape.dims()));
  absl::StatusOr<Tensor> value = MakeInitializedBlock(spec.initializer, shape, 0, shape.rows());
  if (!value.ok()) return Annotate(value.status(), absl::StrCat("initializing '", spec.name, "'"));
  variables_.emplace(spec.name, Variable{spec, *std::move(value)});
  return absl::OkStatus();
}

absl::StatusOr<const MirroredVariableSpec*> MirroredReplica::VariableSpec(
    absl::string_view name) const {
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("no variable '", name, "' created under the strategy"));
  }
  return &it->second.spec;
}

absl::StatusOr<const Tensor*> MirroredReplica::Read(absl::string_view name) const {
  if (auto it = variables_.find(name); it != variables_.end()) return &it->second.value;
  return trainer_.variable(name);
}

absl::StatusOr<Tensor*> MirroredReplica::MutableVariable(absl::string_view name) {
  auto it = variables_.find(name);
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("no variable '", name, "' created under the strategy"));
  }
  return &it->second.value;
}

absl::StatusOr<TensorSliceView> MirroredReplica::View(absl::string_view name) const {
  TensorSliceView slice;
  slice.variable = std::string(name);
  if (auto it = variables_.find(name); it != variables_.end()) {
    slice.full_shape = it->second.value.shape();
    slice.dtype = it->second.spec.dtype;
    slice.value = it->second.value.view();
    return slice;
  }
  TESSERA_ASSIGN_OR_RETURN(const Tensor* value, trainer_.variable(name));
  TESSERA_ASSIGN_OR_RETURN(const OptimizerSlots* slots, trainer_.slots(name));
  slice.full_shape = value->shape();
  slice.value = value->view();
  slice.slot_names = trainer_.optimizer().SlotNames();
  for (const Tensor& slot : slots->tensors) slice.slots.push_back(slot.view());
  slice.step = slots->step;
  return slice;
}

absl::StatusOr<TensorSlice> MirroredReplica::Slice(absl::string_view name) const {
  TESSERA_ASSIGN_OR_RETURN(const TensorSliceView view, View(name));
  return CopyOf(view);
}

absl::StatusOr<SavedSlice> MirroredReplica::Save(absl::string_view name, const SaveOp& op,
                                                 const SliceStore& store) const {
  TESSERA_ASSIGN_OR_RETURN(TensorSliceView slice, View(name));
  // A parameter's optimizer goes with it; a variable created under the strategy has none.
  std::optional<OptimizerSpec> optimizer;
  if (variables_.find(name) == variables_.end()) optimizer = trainer_.optimizer().spec();
  return WriteSlice(std::move(slice), std::move(optimizer), op, store, name);
}

absl::Status MirroredReplica::Load(const TensorSlice& slice) {
  TESSERA_ASSIGN_OR_RETURN(const Tensor* current, Read(slice.variable));
  if (slice.row_offset != 0 || slice.value.shape() != current->shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "restoring '", slice.variable, "': a slice of ", slice.value.shape().ToString(), " at row ",
        slice.row_offset, " is not the whole ", current->shape().ToString()));
  }
  if (auto it = variables_.find(slice.variable); it != variables_.end()) {
    it->second.value = Tensor::Copy(slice.value.view());
    return absl::OkStatus();
  }
  if (!slice.slots.empty()) {
    if (slice.slot_names != trainer_.optimizer().SlotNames()) {
      return absl::InvalidArgumentError(absl::StrCat("restoring '", slice.variable,
                                                     "': its slots are not this optimizer's (",
                                                     trainer_.optimizer().spec().name, ")"));
    }
    OptimizerSlots slots;
    for (const Tensor& slot : slice.slots) slots.tensors.push_back(Tensor::Copy(slot.view()));
    slots.step = slice.step;
    TESSERA_RETURN_IF_ERROR(trainer_.SetSlots(slice.variable, std::move(slots)));
  }
  return trainer_.SetVariable(slice.variable, slice.value);
}

absl::Status MirroredReplica::CheckHeldWrite(const MirroredWrite& write) const {
  TESSERA_ASSIGN_OR_RETURN(const MirroredVariableSpec* spec, VariableSpec(write.variable));
  auto it = variables_.find(write.variable);
  TESSERA_RETURN_IF_ERROR(CheckSameShape(write.value.shape(), it->second.value.shape(),
                                         absl::StrCat("a write to '", write.variable, "'")));
  if (spec->synchronization != VariableSynchronization::kOnRead &&
      spec->aggregation == VariableAggregation::kNone) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable '", write.variable,
        "' has aggregation NONE: an update from a replica context needs an aggregation (SUM, "
        "MEAN or ONLY_FIRST_REPLICA)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> MirroredReplica::PackWrites(
    const std::vector<MirroredWrite>& writes, int32_t rank, int32_t members) const {
  size_t total = 0;
  for (const MirroredWrite& write : writes) {
    TESSERA_RETURN_IF_ERROR(CheckHeldWrite(write));
    total += static_cast<size_t>(write.value.size());
  }
  std::vector<float> packed(total, 0.0f);
  float* at = packed.data();
  for (const MirroredWrite& write : writes) {
    const VariableAggregation aggregation =
        variables_.find(write.variable)->second.spec.aggregation;
    const float* from = write.value.data();
    const int64_t size = write.value.size();
    switch (aggregation) {
      case VariableAggregation::kSum:
        std::copy(from, from + size, at);
        break;
      case VariableAggregation::kMean: {
        const float scale = 1.0f / static_cast<float>(members);
        for (int64_t i = 0; i < size; ++i) at[i] = from[i] * scale;
        break;
      }
      case VariableAggregation::kOnlyFirstReplica:
        // The others add -0.0, which leaves every value as it is (x + -0.0 == x, and -0.0 stays
        // -0.0, which adding +0.0 would not).
        if (rank == 0) {
          std::copy(from, from + size, at);
        } else {
          std::fill(at, at + size, -0.0f);
        }
        break;
      case VariableAggregation::kNone:
        break;  // refused by CheckHeldWrite
    }
    at += size;
  }
  return packed;
}

absl::Status MirroredReplica::ApplyWrites(const std::vector<MirroredWrite>& writes,
                                          absl::Span<const float> reduced) {
  size_t total = 0;
  for (const MirroredWrite& write : writes) total += static_cast<size_t>(write.value.size());
  if (total != reduced.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduced writes of ", reduced.size(), " floats, not ", total));
  }
  const float* at = reduced.data();
  for (const MirroredWrite& write : writes) {
    TESSERA_ASSIGN_OR_RETURN(Tensor * copy, MutableVariable(write.variable));
    float* to = copy->data();
    for (int64_t i = 0; i < copy->size(); ++i) to[i] = write.add ? to[i] + at[i] : at[i];
    at += copy->size();
  }
  return absl::OkStatus();
}

}  // namespace tessera
