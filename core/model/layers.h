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
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/base/tensor.h"

namespace tessera {

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

}  // namespace tessera
