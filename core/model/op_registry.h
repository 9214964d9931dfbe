// The op registry: every dense-valued op a ModelSpec node may name — the built-ins (dense, relu,
// concat, dot_interaction, ...: core/model/builtin_ops.cc) and the ones a program registers itself
// — described once: how many inputs it reads, its parameters, its attributes, its shape rule, and
// its forward and backward kernels. ResolveModelSpec checks nodes with it and Model runs them
// with it; an exported model names its ops, so a program serving a model with its own op
// registers that op too. (Embedding lookups are not registry ops: they read ids and produce
// sparse gradients, which the Model handles itself.)
//
// Example, an op that scales its input by a parameter vector s [width] (y = x * s):
//   OpDef scale;
//   scale.name = "scale";
//   scale.params = {{"scale"}};
//   scale.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
//     return OpShape{args.input_widths[0], {Shape{args.input_widths[0]}}};
//   };
//   scale.forward = [](const OpForwardArgs& a, MatrixRef y) {
//     y = (a.inputs[0].array().rowwise() * a.params[0].col(0).transpose().array()).matrix();
//   };
//   scale.backward = [](const OpBackwardArgs& a) {
//     const auto s = a.params[0].col(0).transpose().array();
//     if (a.input_grads[0]) *a.input_grads[0] += (a.dy.array().rowwise() * s).matrix();
//     if (a.param_grads[0]) {
//       a.param_grads[0]->col(0) +=
//           (a.dy.array() * a.inputs[0].array()).colwise().sum().matrix().transpose();
//     }
//   };
//   TESSERA_RETURN_IF_ERROR(RegisterOp(std::move(scale)));
// (A parameter's value and gradient are seen as [rows, row_size] matrices: a vector [n] is a
// column [n, 1].)
//
// Thread-safety: RegisterOp and FindOp may be called from any thread; a registered OpDef is
// immutable and lives as long as the process.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/tensor.h"
#include "core/model/layers.h"

namespace tessera {

struct NodeSpec;

// A node's attributes as its op's kernels and shape rule read them.
struct OpAttrs {
  const std::map<std::string, double>* numbers = nullptr;
  const std::map<std::string, std::string>* strings = nullptr;

  // The attribute's value, or `fallback` when the node does not set it.
  double Number(const std::string& name, double fallback) const;
  std::string String(const std::string& name, const std::string& fallback) const;
  bool HasNumber(const std::string& name) const;
};

struct OpShapeArgs {
  std::vector<int64_t> input_widths;  // one per input, each >= 1
  int num_params = 0;                 // how many parameters the node names
  OpAttrs attrs;
};

struct OpShape {
  int64_t width = 0;  // of the node's [B, width] output, >= 1
  // The shape each of the node's parameters must have, in the node's parameter order.
  std::vector<Shape> param_shapes;
};

struct OpForwardArgs {
  std::vector<ConstMatrixRef> inputs;  // [B, input_widths[i]]
  // The parameters as [rows, row_size] matrices (a vector [n] is [n, 1]).
  std::vector<ConstMatrixRef> params;
  OpAttrs attrs;
};

struct OpBackwardArgs : OpForwardArgs {
  ConstMatrixRef y;  // the forward's output
  // dLoss/dy. The kernel may overwrite it (scratch): nothing reads it after the backward.
  MatrixRef dy;
  // Where to ADD dLoss/d(input i); null: input i needs no gradient.
  std::vector<MatrixRef*> input_grads;
  // Where to ADD dLoss/d(param j), as [rows, row_size]; null: parameter j is frozen.
  std::vector<MatrixRef*> param_grads;

  OpBackwardArgs(OpForwardArgs forward, ConstMatrixRef y_, MatrixRef dy_)
      : OpForwardArgs(std::move(forward)), y(y_), dy(dy_) {}
};

struct OpParamDef {
  std::string role;       // "kernel", "bias": one parameter keeps one role in a model
  bool optional = false;  // only trailing parameters may be optional
};

struct OpDef {
  std::string name;
  int min_inputs = 1;
  int max_inputs = 1;  // -1: any number from min_inputs on
  std::vector<OpParamDef> params;
  // The attributes a node of this op may set (others are InvalidArgument naming them).
  std::vector<std::string> number_attrs;
  std::vector<std::string> string_attrs;
  // Checks the inputs' widths and the attributes; gives the output width and the parameters'
  // shapes. InvalidArgument with a message that the resolver prefixes with the node.
  std::function<absl::StatusOr<OpShape>(const OpShapeArgs&)> infer;
  // y = op(inputs, params). y is [B, width], already sized; its values are unspecified.
  std::function<void(const OpForwardArgs&, MatrixRef y)> forward;
  std::function<void(const OpBackwardArgs&)> backward;
  // y is the inputs side by side, [x_0 | x_1 | ...] (concat). The model may then compute an input
  // that only this node reads straight into its columns of y (Note [Concat in place],
  // core/model/model.cc): forward must leave an input that already is its columns of y as it is,
  // and backward gets a null gradient for it, since dy's columns already are that gradient.
  bool output_holds_inputs = false;
};

// Adds `op` to the registry. InvalidArgument for an empty name, a missing infer, forward or
// backward, bad input counts, or an optional parameter before a required one; AlreadyExists when
// an op of that name is registered (the built-ins included).
absl::Status RegisterOp(OpDef op);

// The op named `name`, or null.
const OpDef* FindOp(const std::string& name);

// Every registered op's name, sorted.
std::vector<std::string> RegisteredOpNames();

// The built-in ops' names (they are registered before any lookup).
std::vector<std::string> BuiltinOpNames();

}  // namespace tessera
