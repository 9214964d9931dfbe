// "adam": TF's ApplyAdam (Keras' Adam without amsgrad), with t = this update's step number
// (OptimizerSlots::step + 1):
//   lr_t = learning_rate * sqrt(1 - beta_2^t) / (1 - beta_1^t)
//   m    = beta_1 * m + (1 - beta_1) * grad
//   v    = beta_2 * v + (1 - beta_2) * grad^2
//   var -= lr_t * m / (sqrt(v) + epsilon)
// Slots "m" and "v" (zeros). Hyperparameters: learning_rate (0.001, >= 0), beta_1 (0.9) and
// beta_2 (0.999), both in [0, 1), epsilon (1e-7, > 0).
//
// Note [Lazy sparse Adam]
// A sparse apply updates m, v and var of the given rows only; every other row, and its moments,
// stay exactly as they were. This is the "lazy" Adam of tfa.optimizers.LazyAdam and of most
// parameter-server embedding training, not tf.keras' dense-equivalent sparse Adam, which decays
// every row's m and v and moves every row on each step. The lazy variant is what ApplySparse
// promises (touch only the given rows), costs O(rows given) instead of O(rows in the shard), and
// keeps cold embedding rows from drifting on momentum they earned long ago. The step count (and
// so the bias correction) is per block and advances once per apply, dense or sparse, so a shard
// that receives an update every step matches a dense apply of the same gradients, and a sparse
// gradient covering every row equals the dense apply.
//
// The update runs in core/model/internal/kernels.h's adam, compiled for the widest instruction set
// the CPU has.
#include <array>
#include <cmath>
#include <memory>
#include <utility>

#include "core/model/internal/kernels.h"
#include "core/model/internal/optimizer_rules.h"
#include "tessera/status.h"

namespace tessera {
namespace optimizer_internal {
namespace {

constexpr ParamDef kAdamParams[] = {
    {"learning_rate", 0.001, ParamRange::kNonNegative},
    {"beta_1", 0.9, ParamRange::kFraction},
    {"beta_2", 0.999, ParamRange::kFraction},
    {"epsilon", 1e-7, ParamRange::kPositive},
};

class Adam final : public ElementwiseOptimizer {
 public:
  explicit Adam(OptimizerSpec spec)
      : ElementwiseOptimizer(std::move(spec), {"m", "v"}, {0.0f, 0.0f}),
        learning_rate_(param("learning_rate")),
        beta_1_(param("beta_1")),
        beta_2_(param("beta_2")),
        epsilon_(static_cast<float>(param("epsilon"))) {}

 private:
  void Update(int64_t step, TensorView value, absl::Span<Tensor> slots, const UpdatedRows& rows,
              ConstTensorView grad) const override {
    // The bias correction in double: beta^t for large t underflows gracefully to 0.
    const double t = static_cast<double>(step);
    const float alpha = static_cast<float>(learning_rate_ * std::sqrt(1 - std::pow(beta_2_, t)) /
                                           (1 - std::pow(beta_1_, t)));
    const float one_minus_beta_1 = static_cast<float>(1 - beta_1_);
    const float one_minus_beta_2 = static_cast<float>(1 - beta_2_);
    const float eps = epsilon_;
    const auto adam = kernels::ChosenKernels().adam;
    ForEachRawSpan<2>(value, slots, rows, grad,
                      [=](float* var, const float* g, const std::array<float*, 2>& mv, int64_t n) {
                        adam(var, mv[0], mv[1], g, n, alpha, one_minus_beta_1, one_minus_beta_2,
                             eps);
                      });
  }

  double learning_rate_;
  double beta_1_;
  double beta_2_;
  float epsilon_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> MakeAdam(const OptimizerSpec& spec) {
  TESSERA_ASSIGN_OR_RETURN(OptimizerSpec resolved, ResolveSpec(spec, kAdamParams));
  return std::unique_ptr<Optimizer>(new Adam(std::move(resolved)));
}

}  // namespace optimizer_internal
}  // namespace tessera
