// MakeOptimizer, and what every rule shares: hyperparameter resolution and the validating,
// deduplicating, step-counting base class (core/model/internal/optimizer_rules.h).
#include "tessera/optimizer.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/model/internal/optimizer_rules.h"
#include "core/variables/indexed_slices.h"
#include "tessera/status.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

namespace tessera {
namespace optimizer_internal {
namespace {

absl::string_view RangeText(ParamRange range) {
  switch (range) {
    case ParamRange::kNonNegative:
      return ">= 0";
    case ParamRange::kPositive:
      return "> 0";
    case ParamRange::kNonPositive:
      return "<= 0";
    case ParamRange::kFraction:
      return "in [0, 1)";
    case ParamRange::kFlag:
      return "0 or 1";
  }
  return "valid";
}

bool InRange(double value, ParamRange range) {
  if (!std::isfinite(value)) return false;
  switch (range) {
    case ParamRange::kNonNegative:
      return value >= 0;
    case ParamRange::kPositive:
      return value > 0;
    case ParamRange::kNonPositive:
      return value <= 0;
    case ParamRange::kFraction:
      return value >= 0 && value < 1;
    case ParamRange::kFlag:
      return value == 0 || value == 1;
  }
  return false;
}

// Note [Denormals are flushed]
// While a rule updates a block, the calling thread flushes denormal floats to zero (x86's FTZ
// and DAZ bits), as TensorFlow's executor does around every CPU op (ScopedFlushDenormal). A
// moment that decays under zero gradients (Adam's m, Momentum's accumulator for a dead ReLU unit)
// spends hundreds of steps in the denormal range, where each arithmetic operation costs ~100
// cycles: measured, this made a sparse Adam apply 1.5x slower. The previous mode is restored on
// exit, so the caller's own arithmetic is unaffected. A no-op without SSE.
class ScopedFlushDenormals {
 public:
#if defined(__SSE__)
  ScopedFlushDenormals() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFlushBits); }
  ~ScopedFlushDenormals() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned int kFlushBits = 0x8000 | 0x0040;  // FTZ | DAZ
  unsigned int saved_;
#else
  ScopedFlushDenormals() {}  // user-provided, so an unused guard draws no warning
#endif
};

// `status` prefixed with "<rule>: <op>" when it is an error. The prefix is built only then: an
// apply runs once per shard request, and formatting it eagerly was a heap allocation each time.
absl::Status InContext(const absl::Status& status, absl::string_view rule, absl::string_view op) {
  if (status.ok()) return status;
  return Annotate(status, absl::StrCat(rule, ": ", op));
}

}  // namespace

absl::StatusOr<OptimizerSpec> ResolveSpec(const OptimizerSpec& spec,
                                          absl::Span<const ParamDef> defs) {
  OptimizerSpec resolved{spec.name, {}};
  for (const auto& [name, value] : spec.params) {
    const ParamDef* def = nullptr;
    for (const ParamDef& d : defs) {
      if (d.name == name) def = &d;
    }
    if (def == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer '", spec.name, "': unknown hyperparameter '", name, "' (accepted: ",
          absl::StrJoin(defs, ", ",
                        [](std::string* out, const ParamDef& d) { absl::StrAppend(out, d.name); }),
          ")"));
    }
    if (!InRange(value, def->range)) {
      return absl::InvalidArgumentError(absl::StrCat("optimizer '", spec.name, "': ", name,
                                                     " must be ", RangeText(def->range),
                                                     " and finite, got ", value));
    }
  }
  for (const ParamDef& def : defs) {
    auto it = spec.params.find(std::string(def.name));
    resolved.params[std::string(def.name)] =
        it == spec.params.end() ? def.default_value : it->second;
  }
  return resolved;
}

ElementwiseOptimizer::ElementwiseOptimizer(OptimizerSpec spec, std::vector<std::string> slot_names,
                                           std::vector<float> slot_initial_values)
    : spec_(std::move(spec)),
      slot_names_(std::move(slot_names)),
      slot_initial_values_(std::move(slot_initial_values)) {}

double ElementwiseOptimizer::param(absl::string_view name) const {
  return spec_.params.at(std::string(name));
}

OptimizerSlots ElementwiseOptimizer::CreateSlots(const Shape& block_shape) const {
  OptimizerSlots slots;
  slots.tensors.reserve(slot_initial_values_.size());
  for (float initial : slot_initial_values_) slots.tensors.emplace_back(block_shape, initial);
  return slots;
}

absl::Status ElementwiseOptimizer::CheckSlots(const Shape& block_shape,
                                              const OptimizerSlots& slots) const {
  if (slots.tensors.size() != slot_names_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("slots: ", slots.tensors.size(),
                                                   " slot tensors, expected ", slot_names_.size(),
                                                   " (", absl::StrJoin(slot_names_, ", "), ")"));
  }
  for (size_t i = 0; i < slot_names_.size(); ++i) {
    if (slots.tensors[i].shape() != block_shape) {  // the message is only built on a mismatch
      return CheckSameShape(slots.tensors[i].shape(), block_shape,
                            absl::StrCat("slot '", slot_names_[i], "'"));
    }
  }
  if (slots.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("slots: step ", slots.step, " is negative"));
  }
  return absl::OkStatus();
}

absl::Status ElementwiseOptimizer::ApplyDense(TensorView value, OptimizerSlots& slots,
                                              ConstTensorView grad) const {
  constexpr absl::string_view kOp = "apply_dense";
  TESSERA_RETURN_IF_ERROR(
      InContext(CheckSameShape(grad.shape(), value.shape(), "gradient"), spec_.name, kOp));
  TESSERA_RETURN_IF_ERROR(InContext(CheckSlots(value.shape(), slots), spec_.name, kOp));
  const int64_t step = slots.step + 1;
  ScopedFlushDenormals flush_denormals;  // Note [Denormals are flushed]
  Update(step, value, absl::MakeSpan(slots.tensors), UpdatedRows{}, grad);
  slots.step = step;
  return absl::OkStatus();
}

absl::Status ElementwiseOptimizer::ApplySparse(TensorView value, OptimizerSlots& slots,
                                               absl::Span<const int64_t> rows,
                                               ConstTensorView grad_rows) const {
  constexpr absl::string_view kOp = "apply_sparse";
  if (value.shape().rank() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        spec_.name, ": ", kOp,
        ": the block is a scalar (shape []); a sparse gradient needs rank >= 1"));
  }
  TESSERA_RETURN_IF_ERROR(InContext(
      ValidateIndexedRows(rows, grad_rows, value.rows(), value.row_size()), spec_.name, kOp));
  // Same row width is not enough: [n, 6] rows do not fit a [rows, 2, 3] block.
  TESSERA_RETURN_IF_ERROR(InContext(
      CheckSameShape(grad_rows.shape(), value.shape().WithRows(rows.size()), "gradient rows"),
      spec_.name, kOp));
  TESSERA_RETURN_IF_ERROR(InContext(CheckSlots(value.shape(), slots), spec_.name, kOp));
  const int64_t step = slots.step + 1;
  ScopedFlushDenormals flush_denormals;  // Note [Denormals are flushed]
  // Sorted unique ids (what workers send) need no copy of the gradient.
  if (IsSortedUnique(rows)) {
    Update(step, value, absl::MakeSpan(slots.tensors), UpdatedRows{false, rows}, grad_rows);
  } else {
    const IndexedSlices summed = SumDuplicates(rows, grad_rows);
    Update(step, value, absl::MakeSpan(slots.tensors), UpdatedRows{false, summed.indices},
           summed.values);
  }
  slots.step = step;
  return absl::OkStatus();
}

}  // namespace optimizer_internal

absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerSpec& spec) {
  using Factory = absl::StatusOr<std::unique_ptr<Optimizer>> (*)(const OptimizerSpec&);
  static constexpr struct {
    absl::string_view name;
    Factory make;
  } kRules[] = {
      {"sgd", &optimizer_internal::MakeSgd},
      {"momentum", &optimizer_internal::MakeMomentum},
      {"adagrad", &optimizer_internal::MakeAdagrad},
      {"adam", &optimizer_internal::MakeAdam},
      {"ftrl", &optimizer_internal::MakeFtrl},
  };
  for (const auto& rule : kRules) {
    if (rule.name == spec.name) return rule.make(spec);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown optimizer '", spec.name, "' (expected sgd, momentum, adagrad, adam or ftrl)"));
}

}  // namespace tessera
