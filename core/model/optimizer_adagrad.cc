// "adagrad": TF's ApplyAdagradV2 (Keras' Adagrad):
//   accum += grad^2
//   var   -= learning_rate * grad / (sqrt(accum) + epsilon)
// Slot "accumulator", created filled with initial_accumulator_value. Hyperparameters:
// learning_rate (0.001, >= 0), initial_accumulator_value (0.1, >= 0; TF's default — PyTorch
// starts at 0), epsilon (1e-7, >= 0; 0 with a positive initial accumulator is TF1's
// AdagradOptimizer). Both initial_accumulator_value and epsilon 0 is rejected: a coordinate whose
// gradient is still 0 would compute 0 / 0.
//
// A sparse apply updates only the given rows (TF's SparseApplyAdagrad). The update runs in
// core/model/internal/kernels.h's adagrad, compiled for the widest instruction set the CPU has.
#include <array>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/model/internal/kernels.h"
#include "core/model/internal/optimizer_rules.h"
#include "tessera/status.h"

namespace tessera {
namespace optimizer_internal {
namespace {

constexpr ParamDef kAdagradParams[] = {
    {"learning_rate", 0.001, ParamRange::kNonNegative},
    {"initial_accumulator_value", 0.1, ParamRange::kNonNegative},
    {"epsilon", 1e-7, ParamRange::kNonNegative},
};

class Adagrad final : public ElementwiseOptimizer {
 public:
  // `initial_accumulator` is the spec's initial_accumulator_value, passed apart because `spec`
  // is moved into the base.
  Adagrad(OptimizerSpec spec, float initial_accumulator)
      : ElementwiseOptimizer(std::move(spec), {"accumulator"}, {initial_accumulator}),
        learning_rate_(static_cast<float>(param("learning_rate"))),
        epsilon_(static_cast<float>(param("epsilon"))) {}

 private:
  void Update(int64_t step, TensorView value, absl::Span<Tensor> slots, const UpdatedRows& rows,
              ConstTensorView grad) const override {
    const float lr = learning_rate_;
    const float eps = epsilon_;
    const auto adagrad = kernels::ChosenKernels().adagrad;
    ForEachRawSpan<1>(value, slots, rows, grad,
                      [=](float* var, const float* g, const std::array<float*, 1>& accum,
                          int64_t n) { adagrad(var, accum[0], g, n, lr, eps); });
  }

  float learning_rate_;
  float epsilon_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdagrad(const OptimizerSpec& spec) {
  TESSERA_ASSIGN_OR_RETURN(OptimizerSpec resolved, ResolveSpec(spec, kAdagradParams));
  const double initial_accumulator = resolved.params.at("initial_accumulator_value");
  if (initial_accumulator == 0 && resolved.params.at("epsilon") == 0) {
    return absl::InvalidArgumentError(
        "optimizer 'adagrad': initial_accumulator_value and epsilon cannot both be 0 (an "
        "untouched coordinate would divide 0 by 0)");
  }
  return std::unique_ptr<Optimizer>(
      new Adagrad(std::move(resolved), static_cast<float>(initial_accumulator)));
}

}  // namespace optimizer_internal
}  // namespace tessera
