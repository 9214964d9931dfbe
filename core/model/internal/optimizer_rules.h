// What the optimizer rules (core/optimizer_*.cc) share behind tessera/optimizer.h:
// hyperparameter tables with their defaults and ranges, the validating base class every rule
// derives from, and one factory function per rule for MakeOptimizer.
//
// A rule is an elementwise update: each element of the block and of its slots is updated from those
// same elements and the gradient's alone (plus per-apply scalars such as Adam's bias-corrected
// learning rate). So one kernel, a generic lambda over Eigen array maps, serves both the dense
// apply (one span: the whole block) and the sparse apply (one span per given row). Adagrad and Adam
// call a kernel of core/model/internal/kernels.h on each span instead, compiled per instruction set
// (Note [Kernels per instruction set, Eigen] in core/model/internal/kernels.cc).
//
// Thread-safety: as tessera/optimizer.h — rules are immutable; slots belong to their caller.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"

namespace tessera {
namespace optimizer_internal {

// The values a hyperparameter may take. Every value must also be finite.
enum class ParamRange {
  kNonNegative,  // [0, inf)
  kPositive,     // (0, inf)
  kNonPositive,  // (-inf, 0]
  kFraction,     // [0, 1): momentum, beta_1, beta_2
  kFlag,         // exactly 0 or 1: nesterov
};

// One hyperparameter a rule accepts.
struct ParamDef {
  absl::string_view name;
  double default_value;
  ParamRange range;
};

// The spec with every hyperparameter of `defs` present (defaults filled in). InvalidArgument
// naming the rule and the parameter for a parameter `defs` does not list (the message lists the
// accepted ones) or a value outside its range.
absl::StatusOr<OptimizerSpec> ResolveSpec(const OptimizerSpec& spec,
                                          absl::Span<const ParamDef> defs);

// The rows one apply updates: the whole block (a dense apply), or the listed rows (a sparse
// apply; validated, unique, and gradient row k belongs to block row ids[k]).
struct UpdatedRows {
  bool all = true;
  absl::Span<const int64_t> ids;
};

// Calls kernel(var, grad, slot_0, ..., slot_{kSlots-1}) on every element of the updated rows
// exactly once. The arguments are Eigen array maps of one length over corresponding elements of
// `value`, `grad` and each slot tensor. Spans are cut into fixed-size blocks of 32, then 8, 4
// and 1 elements, so that a kernel's several statements run on registers instead of re-reading
// memory, and a short row (an embedding row of 8 or 13 floats) costs neither a dynamic-size
// loop's alignment peeling nor its scalar tail (measured: 3-5x faster sparse applies on rows of
// 8 to 16 floats than one dynamic-size map per row). The kernel must be elementwise: it may not
// depend on the span length. kSlots is the rule's slot count; `slot_tensors` has been validated
// to match.
template <typename Map, size_t... kI, typename Kernel>
void CallKernel(Kernel& kernel, float* var, const float* grad,
                const std::array<float*, sizeof...(kI)>& slots, int64_t offset, int64_t n,
                std::index_sequence<kI...>) {
  using ConstMap = Eigen::Map<const typename Map::PlainObject>;
  kernel(Map(var + offset, n), ConstMap(grad + offset, n), Map(slots[kI] + offset, n)...);
}

// Runs the kernel on blocks of kBlock elements from `done` while a whole block fits; returns the
// new `done`.
template <int kBlock, size_t kSlots, typename Kernel>
int64_t RunBlocks(Kernel& kernel, float* var, const float* grad,
                  const std::array<float*, kSlots>& slots, int64_t done, int64_t n) {
  using BlockMap = Eigen::Map<Eigen::Array<float, kBlock, 1>>;
  for (; done + kBlock <= n; done += kBlock) {
    CallKernel<BlockMap>(kernel, var, grad, slots, done, kBlock,
                         std::make_index_sequence<kSlots>());
  }
  return done;
}

template <size_t kSlots, typename Kernel>
void RunKernel(Kernel& kernel, float* var, const float* grad,
               const std::array<float*, kSlots>& slots, int64_t n) {
  int64_t done = RunBlocks<32>(kernel, var, grad, slots, 0, n);
  done = RunBlocks<8>(kernel, var, grad, slots, done, n);
  done = RunBlocks<4>(kernel, var, grad, slots, done, n);
  RunBlocks<1>(kernel, var, grad, slots, done, n);
}

// Note [First touch by a write]
// Slots, and zero-initialized values, come from calloc (Note [Tensor storage]): a page nobody has
// touched is not backed yet. The kernel reads an element before it writes it, so the first touch
// of such a page maps the shared zero page, and the write that follows copies it: a second fault,
// which also flushes the TLB of every core running the process (perf at the RFC's scale put
// ~21% of a training step in ptep_clear_flush). An atomic add of 0 to the first word of each
// page a row spans is a write: one fault backs the page. On a page already backed it is one
// locked add, next to the row's thousand-odd floats of work; it changes no value.
inline void TouchRowForWrite(float* row, int64_t n) {
  constexpr uintptr_t kPage = 4096;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(row);
  const uintptr_t end = begin + static_cast<uintptr_t>(n) * sizeof(float);
  for (uintptr_t word = begin; word < end; word = (word | (kPage - 1)) + 1) {
    __atomic_fetch_add(reinterpret_cast<uint32_t*>(word), 0u, __ATOMIC_RELAXED);
  }
}

// Calls span(var, grad, slots, n) on each contiguous run of updated elements — the whole block,
// or each given row — with raw pointers to its n elements in `value`, `grad` and each slot: for
// a rule whose math is one of core/model/internal/kernels.h's.
template <size_t kSlots, typename Span>
void ForEachRawSpan(TensorView value, absl::Span<Tensor> slot_tensors, const UpdatedRows& rows,
                    ConstTensorView grad, Span&& span) {
  std::array<float*, kSlots> slots{};
  if (rows.all) {
    for (size_t i = 0; i < kSlots; ++i) slots[i] = slot_tensors[i].data();
    span(value.data(), grad.data(), slots, value.size());
    return;
  }
  const int64_t width = value.row_size();
  for (size_t k = 0; k < rows.ids.size(); ++k) {
    const int64_t offset = rows.ids[k] * width;
    for (size_t i = 0; i < kSlots; ++i) {
      slots[i] = slot_tensors[i].data() + offset;
      TouchRowForWrite(slots[i], width);
    }
    TouchRowForWrite(value.data() + offset, width);
    span(value.data() + offset, grad.data() + static_cast<int64_t>(k) * width, slots, width);
  }
}

template <size_t kSlots, typename Kernel>
void ForEachSpan(TensorView value, absl::Span<Tensor> slot_tensors, const UpdatedRows& rows,
                 ConstTensorView grad, Kernel&& kernel) {
  ForEachRawSpan<kSlots>(value, slot_tensors, rows, grad,
                         [&kernel](float* var, const float* g,
                                   const std::array<float*, kSlots>& slots, int64_t n) {
                           RunKernel(kernel, var, g, slots, n);
                         });
}

// The base of every rule: owns the resolved spec and the slot layout, validates every apply
// completely before calling Update, sums duplicate sparse ids, and counts steps.
class ElementwiseOptimizer : public Optimizer {
 public:
  // `slot_names[i]` is created filled with `slot_initial_values[i]`.
  ElementwiseOptimizer(OptimizerSpec spec, std::vector<std::string> slot_names,
                       std::vector<float> slot_initial_values);

  const OptimizerSpec& spec() const final { return spec_; }
  std::vector<std::string> SlotNames() const final { return slot_names_; }
  OptimizerSlots CreateSlots(const Shape& block_shape) const final;
  absl::Status ApplyDense(TensorView value, OptimizerSlots& slots,
                          ConstTensorView grad) const final;
  absl::Status ApplySparse(TensorView value, OptimizerSlots& slots, absl::Span<const int64_t> rows,
                           ConstTensorView grad_rows) const final;

 protected:
  // A hyperparameter of the resolved spec (present by construction).
  double param(absl::string_view name) const;

  // Applies one update to `rows` of `value` and the same elements of `slots` (one tensor per slot
  // name, each of value's shape). `step` is this update's 1-based number (Adam's t). All input
  // is valid: Update cannot fail.
  virtual void Update(int64_t step, TensorView value, absl::Span<Tensor> slots,
                      const UpdatedRows& rows, ConstTensorView grad) const = 0;

 private:
  // InvalidArgument unless `slots` holds one tensor of `block_shape` per slot name and a
  // non-negative step.
  absl::Status CheckSlots(const Shape& block_shape, const OptimizerSlots& slots) const;

  OptimizerSpec spec_;
  std::vector<std::string> slot_names_;
  std::vector<float> slot_initial_values_;
};

// One factory per rule (core/optimizer_<name>.cc). Each takes a spec already known to carry the
// rule's name and validates its hyperparameters.
absl::StatusOr<std::unique_ptr<Optimizer>> MakeSgd(const OptimizerSpec& spec);
absl::StatusOr<std::unique_ptr<Optimizer>> MakeMomentum(const OptimizerSpec& spec);
absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdagrad(const OptimizerSpec& spec);
absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdam(const OptimizerSpec& spec);
absl::StatusOr<std::unique_ptr<Optimizer>> MakeFtrl(const OptimizerSpec& spec);

}  // namespace optimizer_internal
}  // namespace tessera
