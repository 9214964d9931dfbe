// "ftrl": FTRL-Proximal (McMahan et al. 2013), TF's ApplyFtrlV2 / Keras' Ftrl. With
// p = -learning_rate_power and l2' = l2 + beta / (2 * learning_rate):
//   grad_s   = grad + 2 * l2_shrinkage * var
//   accum'   = accum + grad^2                       (the plain gradient, as TF)
//   linear  += grad_s - (accum'^p - accum^p) / learning_rate * var
//   quad     = accum'^p / learning_rate + 2 * l2'
//   var      = |linear| > l1 ? (sign(linear) * l1 - linear) / quad : 0
//   accum    = accum'
// Slots "accumulator" (filled with initial_accumulator_value) and "linear" (zeros).
// Hyperparameters (Keras' names and defaults): learning_rate (0.001, > 0: it divides),
// learning_rate_power (-0.5, <= 0; 0 is a fixed learning rate), initial_accumulator_value (0.1,
// >= 0), l1_regularization_strength, l2_regularization_strength,
// l2_shrinkage_regularization_strength and beta (all 0, >= 0). With l2_shrinkage 0 this is
// exactly TF's ApplyFtrl.
//
// A sparse apply updates only the given rows (TF's SparseApplyFtrl); FTRL's state is per
// coordinate, so this is the rule's natural sparse form.
#include <limits>
#include <memory>
#include <utility>

#include "core/model/internal/optimizer_rules.h"
#include "tessera/status.h"

namespace tessera {
namespace optimizer_internal {
namespace {

constexpr ParamDef kFtrlParams[] = {
    {"learning_rate", 0.001, ParamRange::kPositive},
    {"learning_rate_power", -0.5, ParamRange::kNonPositive},
    {"initial_accumulator_value", 0.1, ParamRange::kNonNegative},
    {"l1_regularization_strength", 0, ParamRange::kNonNegative},
    {"l2_regularization_strength", 0, ParamRange::kNonNegative},
    {"l2_shrinkage_regularization_strength", 0, ParamRange::kNonNegative},
    {"beta", 0, ParamRange::kNonNegative},
};

struct FtrlCoefficients {
  float lr;
  float power;  // -learning_rate_power, >= 0
  float l1;
  float two_l2;
  float two_shrinkage;
};

// One FTRL update of corresponding elements (Eigen array maps). AccumPower(x) is x^power as an
// array expression: sqrt for TF's default power 0.5, pow otherwise.
template <typename AccumPower, typename Var, typename Grad>
void FtrlKernel(const FtrlCoefficients& c, AccumPower accum_power, Var var, Grad g, Var accum,
                Var linear) {
  // Three elementwise statements in this order, so none needs a temporary array: linear reads
  // the old accumulator and var, then accum advances, then var is rebuilt from linear and accum.
  linear += g + c.two_shrinkage * var -
            (accum_power(accum + g.square()) - accum_power(accum)) / c.lr * var;
  accum += g.square();
  // (sign(linear) * l1 - linear) where |linear| > l1, else 0, is clamp(linear, -l1, l1) -
  // linear: branch-free, so it vectorizes (Eigen 3.4's select does not). The denominator is
  // kept >= FLT_MIN so that 0 / 0 cannot arise where TF's select gives 0 (accum and l2 both 0).
  var = (linear.cwiseMax(-c.l1).cwiseMin(c.l1) - linear) /
        (accum_power(accum) / c.lr + c.two_l2).cwiseMax(std::numeric_limits<float>::min());
}

class Ftrl final : public ElementwiseOptimizer {
 public:
  // `initial_accumulator` is the spec's initial_accumulator_value, passed apart because `spec` is
  // moved into the base.
  Ftrl(OptimizerSpec spec, float initial_accumulator)
      : ElementwiseOptimizer(std::move(spec), {"accumulator", "linear"},
                             {initial_accumulator, 0.0f}) {
    const double lr = param("learning_rate");
    coefficients_.lr = static_cast<float>(lr);
    coefficients_.power = static_cast<float>(-param("learning_rate_power"));
    coefficients_.l1 = static_cast<float>(param("l1_regularization_strength"));
    coefficients_.two_l2 =
        static_cast<float>(2 * (param("l2_regularization_strength") + param("beta") / (2 * lr)));
    coefficients_.two_shrinkage =
        static_cast<float>(2 * param("l2_shrinkage_regularization_strength"));
  }

 private:
  void Update(int64_t step, TensorView value, absl::Span<Tensor> slots, const UpdatedRows& rows,
              ConstTensorView grad) const override {
    const FtrlCoefficients c = coefficients_;
    if (c.power == 0.5f) {
      const auto square_root = [](const auto& x) { return x.sqrt(); };
      ForEachSpan<2>(value, slots, rows, grad, [&](auto var, auto g, auto accum, auto linear) {
        FtrlKernel(c, square_root, var, g, accum, linear);
      });
    } else {
      const auto power = [&c](const auto& x) { return x.pow(c.power); };
      ForEachSpan<2>(value, slots, rows, grad, [&](auto var, auto g, auto accum, auto linear) {
        FtrlKernel(c, power, var, g, accum, linear);
      });
    }
  }

  FtrlCoefficients coefficients_{};
};

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> MakeFtrl(const OptimizerSpec& spec) {
  TESSERA_ASSIGN_OR_RETURN(OptimizerSpec resolved, ResolveSpec(spec, kFtrlParams));
  const float initial_accumulator =
      static_cast<float>(resolved.params.at("initial_accumulator_value"));
  return std::unique_ptr<Optimizer>(new Ftrl(std::move(resolved), initial_accumulator));
}

}  // namespace optimizer_internal
}  // namespace tessera
