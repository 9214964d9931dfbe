// The ops a model is made of: the layer kernels and losses built in, and the op registry where a
// program adds ops of its own (a shape rule, a forward and a backward kernel). Three parts below:
// the kernels, the losses, the registry.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

// Layer kernels: the forward and backward math of every op a model graph is built from, on
// batch-major matrices (one row per example) with Eigen.
//
// These are the building blocks core/model/model.h composes; they check nothing. Each function
// states its shapes as a precondition: the Model validates the graph once at Create and the batch
// and parameters on every call, so the kernels stay branch-free. Outputs are written into
// caller-sized matrices (no allocation); the `Accumulate*` backward functions ADD into their
// gradient outputs, so a value consumed twice (a shared parameter, a node feeding two nodes) sums
// its gradients, as the chain rule wants.
//
// The dense layers' matrix products and ReLU run in the kernels of the widest instruction set the
// CPU has (core/model/internal/kernels.h); the rest is Eigen compiled with the library's flags.
//
// Notation: B = batch size, `x` an op's input, `y` its output, `dy` = dLoss/dy.
//
// Thread-safety: pure functions.

// Views that accept a RowMatrix, a Tensor's matrix() or a column block of either, without a
// copy (rows must be contiguous: inner stride 1).
using MatrixRef = Eigen::Ref<RowMatrix>;
using ConstMatrixRef = Eigen::Ref<const RowMatrix>;

// Elementwise activations, also usable as a Dense layer's fused activation.
enum class Activation { kLinear, kRelu, kSigmoid, kTanh };

// "linear" (also ""), "relu", "sigmoid", "tanh"; InvalidArgument naming the unknown name.
absl::StatusOr<Activation> ParseActivation(absl::string_view name);
// The canonical name ParseActivation accepts ("linear" for kLinear).
absl::string_view ActivationName(Activation activation);

// y = activation(x), elementwise. Precondition: y has x's shape; y may alias x (in place).
// Sigmoid is computed as 1 / (1 + exp(-x)), which saturates to exactly 0 or 1 at extreme x
// instead of producing NaN.
void ActivationForward(Activation activation, ConstMatrixRef x, MatrixRef y);

// dx = dy * activation'(x), written from the OUTPUT y (relu: y > 0, sigmoid: y (1 - y),
// tanh: 1 - y^2), so the input need not be kept. Precondition: y, dy, dx have one shape; dx may
// alias dy. At exactly x = 0 relu's derivative is taken as 0 (TF's choice).
void ActivationBackward(Activation activation, ConstMatrixRef y, ConstMatrixRef dy, MatrixRef dx);

// Softmax over each row, stable at any logit magnitude (the row max is subtracted first).
// Precondition: y has x's shape (y may alias x).
void SoftmaxForward(ConstMatrixRef x, MatrixRef y);
// dx = y * (dy - rowsum(dy * y)). Precondition: one shape for y, dy, dx (dx may alias dy).
void SoftmaxBackward(ConstMatrixRef y, ConstMatrixRef dy, MatrixRef dx);

// Dense: y = activation(x W + b), with x [B, in], W [in, out], b [out] (empty: no bias),
// y [B, out]. Precondition: shapes as stated.
void DenseForward(ConstMatrixRef x, ConstMatrixRef w, absl::Span<const float> b,
                  Activation activation, MatrixRef y);

// The backward of DenseForward given its output y. `dz` is scratch of y's shape that receives
// dLoss/d(x W + b); it may alias dy (then dy is overwritten). When non-null / non-empty, adds
// x^T dz to *dw ([in, out]), the column sums of dz to db ([out]) and dz W^T to *dx ([B, in]);
// a null or empty output is skipped (a frozen weight, no bias, an input needing no gradient).
void DenseBackward(ConstMatrixRef x, ConstMatrixRef w, ConstMatrixRef y, ConstMatrixRef dy,
                   Activation activation, MatrixRef dz, MatrixRef* dw, absl::Span<float> db,
                   MatrixRef* dx);

// Where each looked-up row lives: rows[k] is the address of row ids[k] of `table` (y.cols() floats
// from there). Model resolves a lookup so, from a whole table or from a step's gathered rows, which
// may come in several blocks (EmbeddingRows, core/model/model.h). Precondition: every ids[k] in [0,
// table.rows()).
void RowAddresses(ConstMatrixRef table, absl::Span<const int64_t> ids,
                  std::vector<const float*>& rows);
std::vector<const float*> RowAddresses(ConstMatrixRef table, absl::Span<const int64_t> ids);

// Embedding lookup: y.row(b) = the y.cols() floats at rows[b] (RowAddresses). Precondition: y is
// [rows.size(), width].
void EmbeddingForward(absl::Span<const float* const> rows, MatrixRef y);

// Embedding gradient: grad_rows.row(slots[b]) += dy.row(b). grad_rows holds one row per unique
// id of the step, so repeated ids in a batch sum into one row. Precondition: every slots[b] in
// [0, grad_rows.rows()), dy is [slots.size(), grad_rows.cols()].
void EmbeddingBackward(absl::Span<const int64_t> slots, ConstMatrixRef dy, MatrixRef grad_rows);

// Embedding bags (several ids per example): y.row(b) = scales[b] * sum over k in
// [row_splits[b], row_splits[b+1]) of weights[k] * (the row at rows[k]) (weights empty: all 1;
// an empty bag is a zero row). `scales` carries the combiner (1 for sum, 1 / sum of weights for
// mean, 1 / sqrt(sum of squared weights) for sqrtn). Precondition: row_splits has y.rows() + 1
// entries from 0 to rows.size(), non-decreasing; rows are RowAddresses of y.cols() floats;
// scales has y.rows() entries; weights is empty or rows.size() long.
void EmbeddingBagForward(absl::Span<const float* const> rows, absl::Span<const int64_t> row_splits,
                         absl::Span<const float> weights, absl::Span<const float> scales,
                         MatrixRef y);

// Its gradient: grad_rows.row(slots[k]) += scales[b] * weights[k] * dy.row(b) for every id k of
// example b. The same preconditions, with slots in place of rows.
void EmbeddingBagBackward(absl::Span<const int64_t> slots, absl::Span<const int64_t> row_splits,
                          absl::Span<const float> weights, absl::Span<const float> scales,
                          ConstMatrixRef dy, MatrixRef grad_rows);

// Concat along the feature axis: y = [x_0 | x_1 | ...]. An x_i that already is its columns of y
// (the same memory: computed in place, Note [Concat in place] in core/model/model.cc) is left as it
// is. Precondition: every x_i has y's row count and the column counts sum to y.cols().
void ConcatForward(absl::Span<const ConstMatrixRef> xs, MatrixRef y);

// Adds dy's column block of input i (widths[i] columns, after those of inputs 0..i-1) to
// *dxs[i]; a null dxs[i] skips input i (it needs no gradient). Precondition: widths sum to
// dy.cols(), dxs has one entry per width, and *dxs[i] is [dy.rows(), widths[i]].
void ConcatBackward(ConstMatrixRef dy, absl::Span<const int64_t> widths,
                    absl::Span<MatrixRef* const> dxs);

// Losses on logits: sigmoid cross-entropy (binary, or independent multi-label) and softmax
// cross-entropy with sparse integer labels; and the mean squared error of a regression. Each
// returns the MEAN loss over the batch and, when asked, dLoss/dlogits (already divided by the batch
// size).
//
// Both are written in the log-sum-exp form, so any finite logit (|logit| = 1e4 included) gives a
// finite loss and finite gradients: no exp of a large positive number, no log of 0.
//
// Labels come from data, so they are validated: bad labels are InvalidArgument, never UB.
//
// Thread-safety: pure functions.

enum class LossKind { kSigmoidCrossEntropy, kSoftmaxCrossEntropy, kMeanSquaredError };

// "sigmoid_cross_entropy", "softmax_cross_entropy" or "mean_squared_error"; InvalidArgument
// naming the unknown name.
absl::StatusOr<LossKind> ParseLoss(absl::string_view name);
absl::string_view LossName(LossKind kind);

// Mean over all elements of max(z, 0) - z * y + log1p(exp(-|z|)) for logits z and labels y of
// one shape [B, k] (k = 1 for a binary task; TF's sigmoid_cross_entropy_with_logits). When
// `dlogits` is non-null it is set (not added) to (sigmoid(z) - y) / (B * k).
// InvalidArgument when the shapes differ or are empty, or a label is outside [0, 1] or NaN.
absl::StatusOr<float> SigmoidCrossEntropyWithLogits(ConstMatrixRef logits, ConstMatrixRef labels,
                                                    MatrixRef* dlogits);

// Mean over the batch of logsumexp(z_b) - z_b[label_b] for logits z [B, C] and labels [B, 1]
// holding class indices as floats (a Batch's labels). When `dlogits` is non-null it is set to
// (softmax(z_b) - onehot(label_b)) / B. InvalidArgument when labels is not [B, 1], B or C is 0,
// or a label is not an integer in [0, C) (the message names the example and the value).
absl::StatusOr<float> SoftmaxCrossEntropyWithLogits(ConstMatrixRef logits, ConstMatrixRef labels,
                                                    MatrixRef* dlogits);

// Mean over all elements of (p - y)^2 for predictions p and labels y of one shape [B, k]
// (regression). When `dpredictions` is non-null it is set to 2 (p - y) / (B * k).
// InvalidArgument when the shapes differ or are empty, or a label is not finite.
absl::StatusOr<float> MeanSquaredError(ConstMatrixRef predictions, ConstMatrixRef labels,
                                       MatrixRef* dpredictions);

// Dispatches to the loss `kind` names.
absl::StatusOr<float> ComputeLoss(LossKind kind, ConstMatrixRef logits, ConstMatrixRef labels,
                                  MatrixRef* dlogits);

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
