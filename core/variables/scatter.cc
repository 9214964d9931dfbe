#include "core/variables/scatter.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {
namespace {

constexpr ScatterOp kAllScatterOps[] = {ScatterOp::kAdd,   ScatterOp::kSub, ScatterOp::kMul,
                                        ScatterOp::kDiv,   ScatterOp::kMin, ScatterOp::kMax,
                                        ScatterOp::kUpdate};

bool IsValid(ScatterOp op) {
  return static_cast<int32_t>(op) >= 0 &&
         static_cast<int32_t>(op) <= static_cast<int32_t>(ScatterOp::kUpdate);
}

bool IsValid(AssignKind kind) {
  return static_cast<int32_t>(kind) >= 0 &&
         static_cast<int32_t>(kind) <= static_cast<int32_t>(AssignKind::kSub);
}

absl::Status CheckRowBlock(const Shape& block_shape, absl::string_view what) {
  if (block_shape.rank() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the block is a scalar (shape []); row ops need rank >= 1"));
  }
  return absl::OkStatus();
}

absl::Status CheckIds(absl::Span<const int64_t> ids, int64_t row_limit, absl::string_view what) {
  for (size_t k = 0; k < ids.size(); ++k) {
    if (ids[k] < 0 || ids[k] >= row_limit) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": id ", ids[k], " at position ", k,
                                                     " is out of range [0, ", row_limit, ")"));
    }
  }
  return absl::OkStatus();
}

// NaN-propagating min / max (see the file comment of scatter.h).
float NanMin(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return b < a ? b : a;
}
float NanMax(float a, float b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<float>::quiet_NaN();
  return b > a ? b : a;
}

// Applies `combine(dst[j], src[j])` row by row, in the order of `ids`.
template <typename Combine>
void ApplyRows(TensorView block, absl::Span<const int64_t> ids, ConstTensorView rows,
               Combine combine) {
  const int64_t width = block.row_size();
  for (size_t k = 0; k < ids.size(); ++k) {
    float* dst = block.data() + ids[k] * width;
    const float* src = rows.data() + static_cast<int64_t>(k) * width;
    for (int64_t j = 0; j < width; ++j) dst[j] = combine(dst[j], src[j]);
  }
}

}  // namespace

absl::Status CheckRowUpdate(absl::string_view what, const Shape& block_shape,
                            absl::Span<const int64_t> ids, const Shape& rows_shape) {
  TESSERA_RETURN_IF_ERROR(CheckRowBlock(block_shape, what));
  const int64_t n = static_cast<int64_t>(ids.size());
  if (rows_shape.rank() == 0 || rows_shape.rows() != n) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expected one row per id (", n,
                                                   " ids), got rows of shape ",
                                                   rows_shape.ToString()));
  }
  const Shape want = block_shape.WithRows(n);
  if (rows_shape != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": rows of shape ", rows_shape.ToString(), " do not match the block's rows ",
        want.ToString(), " (block shape ", block_shape.ToString(), ")"));
  }
  return CheckIds(ids, block_shape.rows(), what);
}

absl::string_view ScatterOpName(ScatterOp op) {
  switch (op) {
    case ScatterOp::kAdd:
      return "scatter_add";
    case ScatterOp::kSub:
      return "scatter_sub";
    case ScatterOp::kMul:
      return "scatter_mul";
    case ScatterOp::kDiv:
      return "scatter_div";
    case ScatterOp::kMin:
      return "scatter_min";
    case ScatterOp::kMax:
      return "scatter_max";
    case ScatterOp::kUpdate:
      return "scatter_update";
  }
  return "scatter_<invalid>";
}

absl::StatusOr<ScatterOp> ParseScatterOp(absl::string_view name) {
  for (ScatterOp op : kAllScatterOps) {
    if (ScatterOpName(op) == name) return op;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown scatter op '", name,
      "' (expected scatter_add, scatter_sub, scatter_mul, scatter_div, scatter_min, scatter_max "
      "or scatter_update)"));
}

absl::Status ScatterRows(ScatterOp op, TensorView block, absl::Span<const int64_t> ids,
                         ConstTensorView rows) {
  if (!IsValid(op)) {
    return absl::InvalidArgumentError(
        absl::StrCat("scatter: unknown op ", static_cast<int32_t>(op), " (expected 0..6)"));
  }
  TESSERA_RETURN_IF_ERROR(CheckRowUpdate(ScatterOpName(op), block.shape(), ids, rows.shape()));

  switch (op) {
    case ScatterOp::kAdd:
      ApplyRows(block, ids, rows, [](float a, float b) { return a + b; });
      break;
    case ScatterOp::kSub:
      ApplyRows(block, ids, rows, [](float a, float b) { return a - b; });
      break;
    case ScatterOp::kMul:
      ApplyRows(block, ids, rows, [](float a, float b) { return a * b; });
      break;
    case ScatterOp::kDiv:
      ApplyRows(block, ids, rows, [](float a, float b) { return a / b; });
      break;
    case ScatterOp::kMin:
      ApplyRows(block, ids, rows, NanMin);
      break;
    case ScatterOp::kMax:
      ApplyRows(block, ids, rows, NanMax);
      break;
    case ScatterOp::kUpdate:
      ApplyRows(block, ids, rows, [](float, float b) { return b; });
      break;
  }
  return absl::OkStatus();
}

absl::string_view AssignKindName(AssignKind kind) {
  switch (kind) {
    case AssignKind::kAssign:
      return "assign";
    case AssignKind::kAdd:
      return "assign_add";
    case AssignKind::kSub:
      return "assign_sub";
  }
  return "assign_<invalid>";
}

absl::Status AssignBlock(AssignKind kind, TensorView block, ConstTensorView value) {
  if (!IsValid(kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("assign: unknown kind ", static_cast<int32_t>(kind), " (expected 0..2)"));
  }
  TESSERA_RETURN_IF_ERROR(CheckSameShape(value.shape(), block.shape(), AssignKindName(kind)));
  float* dst = block.data();
  const float* src = value.data();
  const int64_t n = block.size();
  switch (kind) {
    case AssignKind::kAssign:
      for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
      break;
    case AssignKind::kAdd:
      for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
      break;
    case AssignKind::kSub:
      for (int64_t i = 0; i < n; ++i) dst[i] -= src[i];
      break;
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> GatherRows(ConstTensorView block, absl::Span<const int64_t> ids) {
  TESSERA_RETURN_IF_ERROR(CheckRowBlock(block.shape(), "gather"));
  TESSERA_RETURN_IF_ERROR(CheckIds(ids, block.rows(), "gather"));
  const int64_t width = block.row_size();
  // Appended row by row into reserved memory: no zero-fill of memory about to be overwritten.
  std::vector<float> values;
  values.reserve(ids.size() * static_cast<size_t>(width));
  for (int64_t id : ids) {
    const float* src = block.data() + id * width;
    values.insert(values.end(), src, src + width);
  }
  return Tensor::FromVector(block.shape().WithRows(static_cast<int64_t>(ids.size())),
                            std::move(values));
}

}  // namespace tessera
