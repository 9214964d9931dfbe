// "sgd": plain gradient descent, var -= learning_rate * grad (TF's ApplyGradientDescent). No
// slots. Hyperparameters: learning_rate (0.01, >= 0).
#include <memory>
#include <utility>

#include "core/model/internal/optimizer_rules.h"
#include "tessera/status.h"

namespace tessera {
namespace optimizer_internal {
namespace {

constexpr ParamDef kSgdParams[] = {
    {"learning_rate", 0.01, ParamRange::kNonNegative},
};

class Sgd final : public ElementwiseOptimizer {
 public:
  explicit Sgd(OptimizerSpec spec)
      : ElementwiseOptimizer(std::move(spec), {}, {}),
        learning_rate_(static_cast<float>(param("learning_rate"))) {}

 private:
  void Update(int64_t step, TensorView value, absl::Span<Tensor> slots, const UpdatedRows& rows,
              ConstTensorView grad) const override {
    const float lr = learning_rate_;
    ForEachSpan<0>(value, slots, rows, grad, [lr](auto var, auto g) { var -= lr * g; });
  }

  float learning_rate_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> MakeSgd(const OptimizerSpec& spec) {
  TESSERA_ASSIGN_OR_RETURN(OptimizerSpec resolved, ResolveSpec(spec, kSgdParams));
  return std::unique_ptr<Optimizer>(new Sgd(std::move(resolved)));
}

}  // namespace optimizer_internal
}  // namespace tessera
