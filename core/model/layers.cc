#include "tessera/ops.h"

#include <algorithm>
#include <cassert>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "core/model/internal/kernels.h"

namespace tessera {

absl::StatusOr<Activation> ParseActivation(absl::string_view name) {
  if (name.empty() || name == "linear") return Activation::kLinear;
  if (name == "relu") return Activation::kRelu;
  if (name == "sigmoid") return Activation::kSigmoid;
  if (name == "tanh") return Activation::kTanh;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown activation '", name, "' (expected linear, relu, sigmoid or tanh)"));
}

absl::string_view ActivationName(Activation activation) {
  switch (activation) {
    case Activation::kLinear:
      return "linear";
    case Activation::kRelu:
      return "relu";
    case Activation::kSigmoid:
      return "sigmoid";
    case Activation::kTanh:
      return "tanh";
  }
  return "invalid";
}

namespace {

// Calls f(row of a, row of b, row of c, columns) on every row of three matrices of one shape
// (rows are contiguous: inner stride 1), or once on all of them when none has gaps between rows.
template <typename F>
void ForEachRow(const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                int64_t rows, int64_t cols, F f) {
  if (lda == cols && ldb == cols && ldc == cols) {
    f(a, b, c, rows * cols);
    return;
  }
  for (int64_t r = 0; r < rows; ++r) f(a + r * lda, b + r * ldb, c + r * ldc, cols);
}

}  // namespace

void ActivationForward(Activation activation, ConstMatrixRef x, MatrixRef y) {
  assert(x.rows() == y.rows() && x.cols() == y.cols());
  switch (activation) {
    case Activation::kLinear:
      if (x.data() != y.data()) y = x;
      return;
    case Activation::kRelu: {
      const auto relu = kernels::ChosenKernels().relu;
      ForEachRow(x.data(), x.outerStride(), x.data(), x.outerStride(), y.data(), y.outerStride(),
                 x.rows(), x.cols(), [relu](const float* in, const float*, float* out, int64_t n) {
                   relu(in, out, n);
                 });
      return;
    }
    case Activation::kSigmoid:
      // exp(-x) overflows to +inf for x < -88, and 1 / (1 + inf) is exactly 0: no NaN.
      y = (1.0f + (-x.array()).exp()).inverse().matrix();
      return;
    case Activation::kTanh:
      y = x.array().tanh().matrix();
      return;
  }
}

void ActivationBackward(Activation activation, ConstMatrixRef y, ConstMatrixRef dy, MatrixRef dx) {
  assert(y.rows() == dy.rows() && y.cols() == dy.cols());
  assert(dx.rows() == dy.rows() && dx.cols() == dy.cols());
  switch (activation) {
    case Activation::kLinear:
      if (dx.data() != dy.data()) dx = dy;
      return;
    case Activation::kRelu: {
      const auto backward = kernels::ChosenKernels().relu_backward;
      ForEachRow(y.data(), y.outerStride(), dy.data(), dy.outerStride(), dx.data(),
                 dx.outerStride(), y.rows(), y.cols(), backward);
      return;
    }
    case Activation::kSigmoid:
      dx = (dy.array() * y.array() * (1.0f - y.array())).matrix();
      return;
    case Activation::kTanh:
      dx = (dy.array() * (1.0f - y.array().square())).matrix();
      return;
  }
}

void SoftmaxForward(ConstMatrixRef x, MatrixRef y) {
  assert(x.rows() == y.rows() && x.cols() == y.cols());
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    const float max = x.row(r).maxCoeff();
    y.row(r) = (x.row(r).array() - max).exp().matrix();
    y.row(r) /= y.row(r).sum();
  }
}

void SoftmaxBackward(ConstMatrixRef y, ConstMatrixRef dy, MatrixRef dx) {
  assert(y.rows() == dy.rows() && y.cols() == dy.cols());
  assert(dx.rows() == dy.rows() && dx.cols() == dy.cols());
  for (Eigen::Index r = 0; r < y.rows(); ++r) {
    const float dot = y.row(r).dot(dy.row(r));
    dx.row(r) = (y.row(r).array() * (dy.row(r).array() - dot)).matrix();
  }
}

void DenseForward(ConstMatrixRef x, ConstMatrixRef w, absl::Span<const float> b,
                  Activation activation, MatrixRef y) {
  assert(x.cols() == w.rows() && y.rows() == x.rows() && y.cols() == w.cols());
  kernels::ChosenKernels().mat_mul(x.rows(), x.cols(), w.cols(), x.data(), x.outerStride(),
                                   w.data(), w.outerStride(), y.data(), y.outerStride());
  if (!b.empty()) {
    assert(static_cast<Eigen::Index>(b.size()) == w.cols());
    y.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(b.data(), w.cols());
  }
  ActivationForward(activation, y, y);
}

void DenseBackward(ConstMatrixRef x, ConstMatrixRef w, ConstMatrixRef y, ConstMatrixRef dy,
                   Activation activation, MatrixRef dz, MatrixRef* dw, absl::Span<float> db,
                   MatrixRef* dx) {
  ActivationBackward(activation, y, dy, dz);
  const kernels::Kernels& products = kernels::ChosenKernels();
  if (dw != nullptr) {
    assert(dw->rows() == w.rows() && dw->cols() == w.cols());
    products.add_mat_mul_at_b(x.rows(), x.cols(), dz.cols(), x.data(), x.outerStride(), dz.data(),
                              dz.outerStride(), dw->data(), dw->outerStride());
  }
  if (!db.empty()) {
    assert(static_cast<Eigen::Index>(db.size()) == w.cols());
    Eigen::Map<Eigen::RowVectorXf>(db.data(), w.cols()) += dz.colwise().sum();
  }
  if (dx != nullptr) {
    assert(dx->rows() == x.rows() && dx->cols() == x.cols());
    products.add_mat_mul_a_bt(dz.rows(), w.rows(), dz.cols(), dz.data(), dz.outerStride(), w.data(),
                              w.outerStride(), dx->data(), dx->outerStride());
  }
}

void RowAddresses(ConstMatrixRef table, absl::Span<const int64_t> ids,
                  std::vector<const float*>& rows) {
  rows.resize(ids.size());
  for (size_t k = 0; k < ids.size(); ++k) {
    assert(ids[k] >= 0 && ids[k] < table.rows());
    rows[k] = table.data() + ids[k] * table.outerStride();
  }
}

std::vector<const float*> RowAddresses(ConstMatrixRef table, absl::Span<const int64_t> ids) {
  std::vector<const float*> rows;
  RowAddresses(table, ids, rows);
  return rows;
}

namespace {

// The row of `width` floats at `row`.
Eigen::Map<const Eigen::RowVectorXf> RowAt(const float* row, Eigen::Index width) {
  return Eigen::Map<const Eigen::RowVectorXf>(row, width);
}

}  // namespace

void EmbeddingForward(absl::Span<const float* const> rows, MatrixRef y) {
  assert(y.rows() == static_cast<Eigen::Index>(rows.size()));
  for (size_t b = 0; b < rows.size(); ++b) y.row(b) = RowAt(rows[b], y.cols());
}

void EmbeddingBackward(absl::Span<const int64_t> slots, ConstMatrixRef dy, MatrixRef grad_rows) {
  assert(dy.rows() == static_cast<Eigen::Index>(slots.size()) && dy.cols() == grad_rows.cols());
  for (size_t b = 0; b < slots.size(); ++b) {
    assert(slots[b] >= 0 && slots[b] < grad_rows.rows());
    grad_rows.row(slots[b]) += dy.row(b);
  }
}

void EmbeddingBagForward(absl::Span<const float* const> rows, absl::Span<const int64_t> row_splits,
                         absl::Span<const float> weights, absl::Span<const float> scales,
                         MatrixRef y) {
  assert(row_splits.size() == static_cast<size_t>(y.rows()) + 1);
  for (Eigen::Index b = 0; b < y.rows(); ++b) {
    auto out = y.row(b);
    out.setZero();
    for (int64_t k = row_splits[b]; k < row_splits[b + 1]; ++k) {
      if (weights.empty()) {
        out += RowAt(rows[k], y.cols());
      } else {
        out += weights[k] * RowAt(rows[k], y.cols());
      }
    }
    out *= scales[b];
  }
}

void EmbeddingBagBackward(absl::Span<const int64_t> slots, absl::Span<const int64_t> row_splits,
                          absl::Span<const float> weights, absl::Span<const float> scales,
                          ConstMatrixRef dy, MatrixRef grad_rows) {
  assert(row_splits.size() == static_cast<size_t>(dy.rows()) + 1);
  for (Eigen::Index b = 0; b < dy.rows(); ++b) {
    for (int64_t k = row_splits[b]; k < row_splits[b + 1]; ++k) {
      assert(slots[k] >= 0 && slots[k] < grad_rows.rows());
      const float scale = weights.empty() ? scales[b] : scales[b] * weights[k];
      grad_rows.row(slots[k]) += scale * dy.row(b);
    }
  }
}

void ConcatForward(absl::Span<const ConstMatrixRef> xs, MatrixRef y) {
  Eigen::Index offset = 0;
  for (const ConstMatrixRef& x : xs) {
    assert(x.rows() == y.rows() && offset + x.cols() <= y.cols());
    const bool in_place = x.data() == y.data() + offset && x.outerStride() == y.outerStride();
    if (!in_place) y.middleCols(offset, x.cols()) = x;
    offset += x.cols();
  }
  assert(offset == y.cols());
}

void ConcatBackward(ConstMatrixRef dy, absl::Span<const int64_t> widths,
                    absl::Span<MatrixRef* const> dxs) {
  assert(widths.size() == dxs.size());
  Eigen::Index offset = 0;
  for (size_t i = 0; i < widths.size(); ++i) {
    if (dxs[i] != nullptr) {
      assert(dxs[i]->rows() == dy.rows() && dxs[i]->cols() == widths[i]);
      *dxs[i] += dy.middleCols(offset, widths[i]);
    }
    offset += widths[i];
  }
  assert(offset == dy.cols());
}

}  // namespace tessera
