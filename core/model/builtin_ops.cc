// The built-in ops of the model language (tessera/model.h's table), registered in the op
// registry (tessera/ops.h) like any program's own op.
//
// Dense layers, activations, softmax and concat call the kernels of tessera/ops.h (the
// per-instruction-set GEMMs and ReLU); the rest are Eigen expressions here.
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tessera/ops.h"
#include "tessera/status.h"

namespace tessera {
namespace {

absl::Span<const float> Values(const ConstMatrixRef& m) {
  return absl::MakeConstSpan(m.data(), static_cast<size_t>(m.size()));
}

absl::Status SameWidths(const OpShapeArgs& args) {
  for (size_t i = 1; i < args.input_widths.size(); ++i) {
    if (args.input_widths[i] != args.input_widths[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs must have one width: input 0 is ", args.input_widths[0],
                       " wide, input ", i, " is ", args.input_widths[i]));
    }
  }
  return absl::OkStatus();
}

// An op of one input whose output has the input's width and no parameters.
OpDef Elementwise(std::string name, std::function<void(const OpForwardArgs&, MatrixRef)> forward,
                  std::function<void(const OpBackwardArgs&)> backward) {
  OpDef op;
  op.name = std::move(name);
  op.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
    return OpShape{args.input_widths[0], {}};
  };
  op.forward = std::move(forward);
  op.backward = std::move(backward);
  return op;
}

OpDef Activation1(std::string name, Activation activation) {
  return Elementwise(
      std::move(name),
      [activation](const OpForwardArgs& a, MatrixRef y) {
        ActivationForward(activation, a.inputs[0], y);
      },
      [activation](const OpBackwardArgs& a) {
        if (a.input_grads[0] == nullptr) return;
        ActivationBackward(activation, a.y, a.dy, a.dy);
        *a.input_grads[0] += a.dy;
      });
}

OpDef DenseOp() {
  OpDef op;
  op.name = "dense";
  op.params = {{"kernel"}, {"bias", /*optional=*/true}};
  op.number_attrs = {"units"};
  op.string_attrs = {"activation"};
  op.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
    if (!args.attrs.HasNumber("units")) {
      return absl::InvalidArgumentError("missing attribute 'units'");
    }
    const double units = args.attrs.Number("units", 0);
    if (!(units >= 1 && units <= 1e12) || units != std::floor(units)) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'units' must be an integer >= 1, got ", units));
    }
    TESSERA_RETURN_IF_ERROR(ParseActivation(args.attrs.String("activation", "linear")).status());
    OpShape shape;
    shape.width = static_cast<int64_t>(units);
    shape.param_shapes.push_back(Shape{args.input_widths[0], shape.width});
    if (args.num_params == 2) shape.param_shapes.push_back(Shape{shape.width});
    return shape;
  };
  op.forward = [](const OpForwardArgs& a, MatrixRef y) {
    const Activation activation = *ParseActivation(a.attrs.String("activation", "linear"));
    absl::Span<const float> bias;
    if (a.params.size() == 2) bias = Values(a.params[1]);
    DenseForward(a.inputs[0], a.params[0], bias, activation, y);
  };
  op.backward = [](const OpBackwardArgs& a) {
    const Activation activation = *ParseActivation(a.attrs.String("activation", "linear"));
    absl::Span<float> db;
    if (a.params.size() == 2 && a.param_grads[1] != nullptr) {
      db = absl::MakeSpan(a.param_grads[1]->data(), static_cast<size_t>(a.param_grads[1]->size()));
    }
    DenseBackward(a.inputs[0], a.params[0], a.y, a.dy, activation, a.dy, a.param_grads[0], db,
                  a.input_grads[0]);
  };
  return op;
}

OpDef SoftmaxOp() {
  return Elementwise(
      "softmax", [](const OpForwardArgs& a, MatrixRef y) { SoftmaxForward(a.inputs[0], y); },
      [](const OpBackwardArgs& a) {
        if (a.input_grads[0] == nullptr) return;
        SoftmaxBackward(a.y, a.dy, a.dy);
        *a.input_grads[0] += a.dy;
      });
}

OpDef ConcatOp() {
  OpDef op;
  op.name = "concat";
  op.max_inputs = -1;
  op.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
    OpShape shape;
    for (int64_t w : args.input_widths) shape.width += w;
    return shape;
  };
  op.forward = [](const OpForwardArgs& a, MatrixRef y) { ConcatForward(a.inputs, y); };
  op.output_holds_inputs = true;
  op.backward = [](const OpBackwardArgs& a) {
    std::vector<int64_t> widths;
    for (const ConstMatrixRef& x : a.inputs) widths.push_back(x.cols());
    ConcatBackward(a.dy, widths, a.input_grads);
  };
  return op;
}

// An op of two or more inputs of one width, whose output has that width too.
OpDef SameWidthOp(std::string name) {
  OpDef op;
  op.name = std::move(name);
  op.min_inputs = 2;
  op.max_inputs = -1;
  op.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
    TESSERA_RETURN_IF_ERROR(SameWidths(args));
    return OpShape{args.input_widths[0], {}};
  };
  return op;
}

// y = x_0 + x_1 + ...
OpDef AddOp() {
  OpDef op = SameWidthOp("add");
  op.forward = [](const OpForwardArgs& a, MatrixRef y) {
    y = a.inputs[0];
    for (size_t i = 1; i < a.inputs.size(); ++i) y += a.inputs[i];
  };
  op.backward = [](const OpBackwardArgs& a) {
    for (MatrixRef* dx : a.input_grads) {
      if (dx != nullptr) *dx += a.dy;
    }
  };
  return op;
}

// y = x_0 * x_1 * ... elementwise.
OpDef MultiplyOp() {
  OpDef op = SameWidthOp("multiply");
  op.forward = [](const OpForwardArgs& a, MatrixRef y) {
    y = a.inputs[0];
    for (size_t i = 1; i < a.inputs.size(); ++i) y.array() *= a.inputs[i].array();
  };
  op.backward = [](const OpBackwardArgs& a) {
    // d/dx_i = dy * prod_{j != i} x_j, without dividing (inputs may be 0).
    RowMatrix others;
    for (size_t i = 0; i < a.inputs.size(); ++i) {
      if (a.input_grads[i] == nullptr) continue;
      others = a.dy;
      for (size_t j = 0; j < a.inputs.size(); ++j) {
        if (j != i) others.array() *= a.inputs[j].array();
      }
      *a.input_grads[i] += others;
    }
  };
  return op;
}

// y[b] = <x_0[b], x_1[b]>: [B, 1].
OpDef DotOp() {
  OpDef op;
  op.name = "dot";
  op.min_inputs = 2;
  op.max_inputs = 2;
  op.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
    TESSERA_RETURN_IF_ERROR(SameWidths(args));
    return OpShape{1, {}};
  };
  op.forward = [](const OpForwardArgs& a, MatrixRef y) {
    y.col(0) = (a.inputs[0].array() * a.inputs[1].array()).rowwise().sum().matrix();
  };
  op.backward = [](const OpBackwardArgs& a) {
    if (a.input_grads[0] != nullptr) {
      *a.input_grads[0] += (a.inputs[1].array().colwise() * a.dy.col(0).array()).matrix();
    }
    if (a.input_grads[1] != nullptr) {
      *a.input_grads[1] += (a.inputs[0].array().colwise() * a.dy.col(0).array()).matrix();
    }
  };
  return op;
}

// DLRM's interaction: for inputs z_0 .. z_{n-1} of width d, y = [z_0 | <z_i, z_j> for i < j in
// the order (0,1), (0,2), ..., (0,n-1), (1,2), ...]; with self_interaction, i <= j.
OpDef DotInteractionOp() {
  OpDef op;
  op.name = "dot_interaction";
  op.min_inputs = 2;
  op.max_inputs = -1;
  op.number_attrs = {"self_interaction"};
  op.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
    TESSERA_RETURN_IF_ERROR(SameWidths(args));
    const double self = args.attrs.Number("self_interaction", 0);
    if (self != 0 && self != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("attribute 'self_interaction' must be 0 or 1, got ", self));
    }
    const int64_t n = static_cast<int64_t>(args.input_widths.size());
    const int64_t pairs = self != 0 ? n * (n + 1) / 2 : n * (n - 1) / 2;
    return OpShape{args.input_widths[0] + pairs, {}};
  };
  op.forward = [](const OpForwardArgs& a, MatrixRef y) {
    const int64_t n = static_cast<int64_t>(a.inputs.size());
    const int64_t d = a.inputs[0].cols();
    const bool self = a.attrs.Number("self_interaction", 0) != 0;
    y.leftCols(d) = a.inputs[0];
    RowMatrix z(n, d);
    RowMatrix gram(n, n);
    for (int64_t b = 0; b < y.rows(); ++b) {
      for (int64_t i = 0; i < n; ++i) z.row(i) = a.inputs[i].row(b);
      gram.noalias() = z * z.transpose();
      float* out = y.row(b).data() + d;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = self ? i : i + 1; j < n; ++j) *out++ = gram(i, j);
      }
    }
  };
  op.backward = [](const OpBackwardArgs& a) {
    const int64_t n = static_cast<int64_t>(a.inputs.size());
    const int64_t d = a.inputs[0].cols();
    const bool self = a.attrs.Number("self_interaction", 0) != 0;
    if (a.input_grads[0] != nullptr) *a.input_grads[0] += a.dy.leftCols(d);
    RowMatrix z(n, d);
    RowMatrix g(n, n);  // dLoss/dgram, symmetrized
    RowMatrix dz(n, d);
    for (int64_t b = 0; b < a.dy.rows(); ++b) {
      for (int64_t i = 0; i < n; ++i) z.row(i) = a.inputs[i].row(b);
      g.setZero();
      const float* dout = a.dy.row(b).data() + d;
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t j = self ? i : i + 1; j < n; ++j) {
          const float v = *dout++;
          // <z_i, z_j> has gradient z_j for z_i and z_i for z_j; <z_i, z_i> has 2 z_i.
          g(i, j) += v;
          g(j, i) += v;
        }
      }
      dz.noalias() = g * z;
      for (int64_t i = 0; i < n; ++i) {
        if (a.input_grads[i] != nullptr) a.input_grads[i]->row(b) += dz.row(i);
      }
    }
  };
  return op;
}

// DCN's cross layer: y = x0 * (xl W + b) + xl, inputs (x0, xl) of width d, W [d, d], b [d].
OpDef CrossOp() {
  OpDef op;
  op.name = "cross";
  op.min_inputs = 2;
  op.max_inputs = 2;
  op.params = {{"kernel"}, {"bias"}};
  op.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
    TESSERA_RETURN_IF_ERROR(SameWidths(args));
    const int64_t d = args.input_widths[0];
    return OpShape{d, {Shape{d, d}, Shape{d}}};
  };
  op.forward = [](const OpForwardArgs& a, MatrixRef y) {
    y.noalias() = a.inputs[1] * a.params[0];
    y.rowwise() += a.params[1].col(0).transpose();
    y.array() *= a.inputs[0].array();
    y += a.inputs[1];
  };
  op.backward = [](const OpBackwardArgs& a) {
    const ConstMatrixRef& x0 = a.inputs[0];
    const ConstMatrixRef& xl = a.inputs[1];
    RowMatrix u = xl * a.params[0];
    u.rowwise() += a.params[1].col(0).transpose();
    if (a.input_grads[0] != nullptr) *a.input_grads[0] += (a.dy.array() * u.array()).matrix();
    const RowMatrix du = (a.dy.array() * x0.array()).matrix();
    if (a.input_grads[1] != nullptr) {
      *a.input_grads[1] += a.dy;
      a.input_grads[1]->noalias() += du * a.params[0].transpose();
    }
    if (a.param_grads[0] != nullptr) a.param_grads[0]->noalias() += xl.transpose() * du;
    if (a.param_grads[1] != nullptr) {
      a.param_grads[1]->col(0) += du.colwise().sum().transpose();
    }
  };
  return op;
}

// y = log(1 + max(x, 0)): DLRM's transform of count features (negative counts clamp to 0).
OpDef Log1pOp() {
  return Elementwise(
      "log1p",
      [](const OpForwardArgs& a, MatrixRef y) {
        y = a.inputs[0].array().max(0.0f).log1p().matrix();
      },
      [](const OpBackwardArgs& a) {
        if (a.input_grads[0] == nullptr) return;
        const auto x = a.inputs[0].array();
        *a.input_grads[0] +=
            (x > 0.0f).select(a.dy.array() / (1.0f + x), 0.0f).matrix();
      });
}

}  // namespace

std::vector<OpDef> BuiltinOps() {
  std::vector<OpDef> ops;
  ops.push_back(DenseOp());
  ops.push_back(Activation1("relu", Activation::kRelu));
  ops.push_back(Activation1("sigmoid", Activation::kSigmoid));
  ops.push_back(Activation1("tanh", Activation::kTanh));
  ops.push_back(SoftmaxOp());
  ops.push_back(ConcatOp());
  ops.push_back(AddOp());
  ops.push_back(MultiplyOp());
  ops.push_back(DotOp());
  ops.push_back(DotInteractionOp());
  ops.push_back(CrossOp());
  ops.push_back(Log1pOp());
  return ops;
}

}  // namespace tessera
