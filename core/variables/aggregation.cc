#include "core/variables/aggregation.h"

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {

absl::string_view SynchronizationName(VariableSynchronization sync) {
  switch (sync) {
    case VariableSynchronization::kAuto: return "auto";
    case VariableSynchronization::kOnWrite: return "on_write";
    case VariableSynchronization::kOnRead: return "on_read";
  }
  return "synchronization_<invalid>";
}

absl::string_view AggregationName(VariableAggregation aggregation) {
  switch (aggregation) {
    case VariableAggregation::kNone: return "none";
    case VariableAggregation::kSum: return "sum";
    case VariableAggregation::kMean: return "mean";
    case VariableAggregation::kOnlyFirstReplica: return "only_first_replica";
  }
  return "aggregation_<invalid>";
}

absl::Status ValidateAggregation(VariableSynchronization sync, VariableAggregation aggregation,
                                 DType dtype) {
  const int s = static_cast<int>(sync), a = static_cast<int>(aggregation);
  if (s < 0 || s > 2) return absl::InvalidArgumentError(absl::StrCat("unknown synchronization ", s));
  if (a < 0 || a > 3) return absl::InvalidArgumentError(absl::StrCat("unknown aggregation ", a));
  if (dtype != DType::kFloat32 && dtype != DType::kInt64 && dtype != DType::kString) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype ", static_cast<int>(dtype)));
  }
  if (aggregation == VariableAggregation::kMean && !IsFloating(dtype)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "aggregation MEAN needs a floating dtype, but the variable is ", DTypeName(dtype)));
  }
  if (sync == VariableSynchronization::kOnRead && aggregation == VariableAggregation::kNone) {
    return absl::InvalidArgumentError(
        "an ON_READ variable needs an aggregation (SUM, MEAN or ONLY_FIRST_REPLICA) to combine "
        "its per-worker copies; NONE is not allowed");
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> AggregateReplicaValues(VariableAggregation aggregation,
                                              absl::Span<const Tensor> values) {
  if (values.empty()) return absl::InvalidArgumentError("no replica values to aggregate");
  for (size_t r = 1; r < values.size(); ++r) {
    TESSERA_RETURN_IF_ERROR(CheckSameShape(values[r].shape(), values[0].shape(),
                                           absl::StrCat("replica ", r, "'s update")));
  }
  switch (aggregation) {
    case VariableAggregation::kNone:
      return absl::InvalidArgumentError(
          "an update from a replica context needs an aggregation: the variable's aggregation is "
          "NONE (use SUM, MEAN or ONLY_FIRST_REPLICA)");
    case VariableAggregation::kOnlyFirstReplica:
      return values[0];
    case VariableAggregation::kSum:
    case VariableAggregation::kMean: {
      Tensor out = values[0];
      for (size_t r = 1; r < values.size(); ++r) {
        out.matrix() += values[r].matrix();
      }
      if (aggregation == VariableAggregation::kMean) {
        out.matrix() /= static_cast<float>(values.size());
      }
      return out;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown aggregation ", static_cast<int>(aggregation)));
}

Tensor ReplicaShare(VariableAggregation aggregation, Tensor reduced, int64_t replicas) {
  if (aggregation == VariableAggregation::kSum && replicas > 1) {
    for (float& x : reduced.values()) x /= static_cast<float>(replicas);
  }
  return reduced;
}

}  // namespace tessera
