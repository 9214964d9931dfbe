// "momentum": gradient descent with momentum, TF's ApplyMomentum (tf.compat.v1 MomentumOptimizer,
// Keras SGD(momentum=..., nesterov=...)):
//   accum = momentum * accum + grad
//   var  -= learning_rate * accum                                  (nesterov = 0)
//   var  -= learning_rate * (grad + momentum * accum)              (nesterov = 1, new accum)
// Slot "momentum" (zeros). Hyperparameters: learning_rate (0.01, >= 0), momentum (0.9, in
// [0, 1)), nesterov (0, 0 or 1). Keras' default momentum is 0, which is plain "sgd"; this rule
// defaults to the customary 0.9 instead.
//
// A sparse apply updates only the given rows' accumulators (TF's SparseApplyMomentum): a row
// absent from a step keeps its momentum instead of decaying it.
#include <memory>
#include <utility>

#include "core/model/internal/optimizer_rules.h"
#include "tessera/status.h"

namespace tessera {
namespace optimizer_internal {
namespace {

constexpr ParamDef kMomentumParams[] = {
    {"learning_rate", 0.01, ParamRange::kNonNegative},
    {"momentum", 0.9, ParamRange::kFraction},
    {"nesterov", 0, ParamRange::kFlag},
};

class Momentum final : public ElementwiseOptimizer {
 public:
  explicit Momentum(OptimizerSpec spec)
      : ElementwiseOptimizer(std::move(spec), {"momentum"}, {0.0f}),
        learning_rate_(static_cast<float>(param("learning_rate"))),
        momentum_(static_cast<float>(param("momentum"))),
        nesterov_(param("nesterov") == 1) {}

 private:
  void Update(int64_t step, TensorView value, absl::Span<Tensor> slots, const UpdatedRows& rows,
              ConstTensorView grad) const override {
    const float lr = learning_rate_;
    const float mu = momentum_;
    const bool nesterov = nesterov_;
    ForEachSpan<1>(value, slots, rows, grad, [=](auto var, auto g, auto accum) {
      accum = accum * mu + g;
      if (nesterov) {
        var -= g * lr + accum * (mu * lr);
      } else {
        var -= accum * lr;
      }
    });
  }

  float learning_rate_;
  float momentum_;
  bool nesterov_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> MakeMomentum(const OptimizerSpec& spec) {
  TESSERA_ASSIGN_OR_RETURN(OptimizerSpec resolved, ResolveSpec(spec, kMomentumParams));
  return std::unique_ptr<Optimizer>(new Momentum(std::move(resolved)));
}

}  // namespace optimizer_internal
}  // namespace tessera
