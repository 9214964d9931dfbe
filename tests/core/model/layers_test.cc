#include "core/base/sorted_ids.h"
#include "tessera/ops.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/base/random.h"

namespace tessera {
namespace {

// Note [Finite-difference checks]
// Each check builds the scalar L = sum(R .* y) for a fixed random R, so dL/dy = R, runs the
// layer's backward from R, and compares every analytic derivative with the central difference
// (L(v + eps) - L(v - eps)) / (2 eps), L summed in double. Layers compute in float, so eps is
// 1e-2: the truncation error O(eps^2) and the rounding error O(6e-8 / eps) both stay near 1e-4.
constexpr float kEps = 1e-2f;

RowMatrix RandomMatrix(int64_t rows, int64_t cols, uint64_t seed, float scale = 1.0f) {
  PhiloxStream rng(seed);
  RowMatrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = scale * static_cast<float>(rng.Normal());
  return m;
}

double Dot(const RowMatrix& r, const RowMatrix& y) {
  double sum = 0;
  for (int64_t i = 0; i < y.size(); ++i) sum += static_cast<double>(r.data()[i]) * y.data()[i];
  return sum;
}

// Central differences of `loss` with respect to every element of `x`, which is perturbed in
// place and restored.
RowMatrix NumericGradient(RowMatrix& x, const std::function<double()>& loss) {
  RowMatrix grad(x.rows(), x.cols());
  for (int64_t i = 0; i < x.size(); ++i) {
    const float saved = x.data()[i];
    x.data()[i] = saved + kEps;
    const double plus = loss();
    x.data()[i] = saved - kEps;
    const double minus = loss();
    x.data()[i] = saved;
    grad.data()[i] = static_cast<float>((plus - minus) / (2.0 * kEps));
  }
  return grad;
}

void CheckGradient(const RowMatrix& analytic, const RowMatrix& numeric, const char* what) {
  INFO(what);
  REQUIRE(analytic.rows() == numeric.rows());
  REQUIRE(analytic.cols() == numeric.cols());
  for (int64_t i = 0; i < analytic.size(); ++i) {
    INFO("element " << i);
    CHECK(analytic.data()[i] ==
          doctest::Approx(numeric.data()[i]).epsilon(1e-2).scale(0.2));  // |diff| <~ 2e-3
  }
}

struct ActivationCase {
  Activation activation;
  const char* name;
};

constexpr ActivationCase kActivations[] = {{Activation::kLinear, "linear"},
                                           {Activation::kRelu, "relu"},
                                           {Activation::kSigmoid, "sigmoid"},
                                           {Activation::kTanh, "tanh"}};

// ReLU's derivative jumps at 0; a finite difference across the kink is meaningless, so inputs
// are kept at least 5 eps away from it.
void PushAwayFromZero(RowMatrix& m) {
  for (int64_t i = 0; i < m.size(); ++i) {
    float& v = m.data()[i];
    if (std::abs(v) < 5 * kEps) v = v < 0 ? v - 5 * kEps : v + 5 * kEps;
  }
}

TEST_CASE("activations parse by name and reject unknown names") {
  for (const ActivationCase& c : kActivations) {
    auto parsed = ParseActivation(c.name);
    REQUIRE(parsed.ok());
    CHECK(*parsed == c.activation);
    CHECK(ActivationName(c.activation) == c.name);
  }
  CHECK(*ParseActivation("") == Activation::kLinear);
  auto bad = ParseActivation("gelu");
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.status().message()).find("gelu") != std::string::npos);
}

TEST_CASE("every activation's backward matches finite differences") {
  for (const ActivationCase& c : kActivations) {
    INFO(c.name);
    RowMatrix x = RandomMatrix(3, 4, 11);
    PushAwayFromZero(x);
    const RowMatrix r = RandomMatrix(3, 4, 12);
    RowMatrix y(3, 4);
    ActivationForward(c.activation, x, y);
    RowMatrix dx(3, 4);
    ActivationBackward(c.activation, y, r, dx);
    const RowMatrix numeric = NumericGradient(x, [&] {
      RowMatrix out(3, 4);
      ActivationForward(c.activation, x, out);
      return Dot(r, out);
    });
    CheckGradient(dx, numeric, "dx");
  }
}

TEST_CASE("activations compute their textbook values and stay finite at extreme inputs") {
  RowMatrix x(1, 4);
  x << -1e4f, -1.0f, 0.5f, 1e4f;
  RowMatrix y(1, 4);
  ActivationForward(Activation::kRelu, x, y);
  CHECK(y(0, 0) == 0.0f);
  CHECK(y(0, 2) == 0.5f);
  ActivationForward(Activation::kSigmoid, x, y);
  CHECK(y(0, 0) == 0.0f);
  CHECK(y(0, 1) == doctest::Approx(1.0 / (1.0 + std::exp(1.0))));
  CHECK(y(0, 3) == 1.0f);
  ActivationForward(Activation::kTanh, x, y);
  CHECK(y(0, 0) == -1.0f);
  CHECK(y(0, 2) == doctest::Approx(std::tanh(0.5)));
  RowMatrix dx(1, 4);
  ActivationBackward(Activation::kSigmoid, y, RowMatrix::Ones(1, 4), dx);
  CHECK(dx.allFinite());
}

TEST_CASE("softmax rows sum to one and its backward matches finite differences") {
  RowMatrix x = RandomMatrix(3, 5, 21, 2.0f);
  const RowMatrix r = RandomMatrix(3, 5, 22);
  RowMatrix y(3, 5);
  SoftmaxForward(x, y);
  for (int i = 0; i < 3; ++i) CHECK(y.row(i).sum() == doctest::Approx(1.0));
  RowMatrix dx(3, 5);
  SoftmaxBackward(y, r, dx);
  const RowMatrix numeric = NumericGradient(x, [&] {
    RowMatrix out(3, 5);
    SoftmaxForward(x, out);
    return Dot(r, out);
  });
  CheckGradient(dx, numeric, "dx");

  RowMatrix extreme(1, 3);
  extreme << 1e4f, -1e4f, 0.0f;
  RowMatrix p(1, 3);
  SoftmaxForward(extreme, p);
  CHECK(p(0, 0) == 1.0f);
  CHECK(p(0, 1) == 0.0f);
}

TEST_CASE("a dense layer's backward matches finite differences for every activation") {
  for (const ActivationCase& c : kActivations) {
    INFO(c.name);
    RowMatrix x = RandomMatrix(4, 3, 81);
    RowMatrix w = RandomMatrix(3, 5, 82, 0.7f);
    RowMatrix b = RandomMatrix(1, 5, 83, 0.5f);
    // The seeds are chosen so that every pre-activation is away from relu's kink.
    RowMatrix z = x * w;
    z.rowwise() += b.row(0);
    for (int64_t i = 0; i < z.size(); ++i) REQUIRE(std::abs(z.data()[i]) > 0.1f);
    const RowMatrix r = RandomMatrix(4, 5, 84);
    auto loss = [&] {
      RowMatrix y(4, 5);
      DenseForward(x, w, absl::MakeConstSpan(b.data(), 5), c.activation, y);
      return Dot(r, y);
    };
    RowMatrix y(4, 5);
    DenseForward(x, w, absl::MakeConstSpan(b.data(), 5), c.activation, y);
    RowMatrix dz(4, 5);
    RowMatrix dw = RowMatrix::Zero(3, 5);
    RowMatrix db = RowMatrix::Zero(1, 5);
    RowMatrix dx = RowMatrix::Zero(4, 3);
    MatrixRef dw_ref(dw);
    MatrixRef dx_ref(dx);
    DenseBackward(x, w, y, r, c.activation, dz, &dw_ref, absl::MakeSpan(db.data(), 5), &dx_ref);
    CheckGradient(dx, NumericGradient(x, loss), "dx");
    CheckGradient(dw, NumericGradient(w, loss), "dw");
    CheckGradient(db, NumericGradient(b, loss), "db");
  }
}

TEST_CASE("dense backward accumulates into its gradients and skips null outputs") {
  const RowMatrix x = RandomMatrix(2, 3, 41);
  const RowMatrix w = RandomMatrix(3, 2, 42);
  const RowMatrix dy = RandomMatrix(2, 2, 43);
  RowMatrix y(2, 2);
  DenseForward(x, w, {}, Activation::kLinear, y);
  CHECK(y.isApprox(x * w));
  RowMatrix dz(2, 2);
  RowMatrix dw = RowMatrix::Ones(3, 2);
  MatrixRef dw_ref(dw);
  DenseBackward(x, w, y, dy, Activation::kLinear, dz, &dw_ref, {}, nullptr);
  const RowMatrix expected = RowMatrix::Ones(3, 2) + x.transpose() * dy;
  CHECK(dw.isApprox(expected));
}

TEST_CASE("an embedding gathers rows and sums the gradients of repeated ids") {
  RowMatrix table = RandomMatrix(6, 3, 51);
  const Ids ids = {4, 1, 4, 0, 4};
  RowMatrix y(5, 3);
  EmbeddingForward(RowAddresses(table, ids), y);
  for (size_t b = 0; b < ids.size(); ++b) CHECK(y.row(b) == table.row(ids[b]));

  SortedIds unique;
  std::vector<int64_t> slots;
  UniqueIds(ids, unique, slots);
  CHECK(unique.ids() == Ids{0, 1, 4});
  CHECK(slots == std::vector<int64_t>{2, 1, 2, 0, 2});

  const RowMatrix r = RandomMatrix(5, 3, 52);
  RowMatrix grad_rows = RowMatrix::Zero(3, 3);
  EmbeddingBackward(slots, r, grad_rows);
  CHECK(grad_rows.row(2).isApprox(r.row(0) + r.row(2) + r.row(4)));

  // The dense gradient of the whole table has the sparse rows at their ids and zeros elsewhere.
  const RowMatrix numeric = NumericGradient(table, [&] {
    RowMatrix out(5, 3);
    EmbeddingForward(RowAddresses(table, ids), out);
    return Dot(r, out);
  });
  RowMatrix analytic = RowMatrix::Zero(6, 3);
  for (size_t k = 0; k < unique.size(); ++k) analytic.row(unique[k]) = grad_rows.row(k);
  CheckGradient(analytic, numeric, "dtable");
}

TEST_CASE("concat places its inputs side by side and splits the gradient back") {
  RowMatrix a = RandomMatrix(3, 2, 61);
  RowMatrix b = RandomMatrix(3, 4, 62);
  const RowMatrix r = RandomMatrix(3, 6, 63);
  auto forward = [&](RowMatrix& out) {
    std::vector<ConstMatrixRef> xs = {a, b};
    ConcatForward(xs, out);
  };
  RowMatrix y(3, 6);
  forward(y);
  CHECK(y.leftCols(2) == a);
  CHECK(y.rightCols(4) == b);
  RowMatrix da = RowMatrix::Zero(3, 2);
  RowMatrix db = RowMatrix::Zero(3, 4);
  MatrixRef da_ref(da);
  MatrixRef db_ref(db);
  const std::vector<int64_t> widths = {2, 4};
  const std::vector<MatrixRef*> dxs = {&da_ref, &db_ref};
  ConcatBackward(r, widths, dxs);
  auto loss = [&] {
    RowMatrix out(3, 6);
    forward(out);
    return Dot(r, out);
  };
  CheckGradient(da, NumericGradient(a, loss), "da");
  CheckGradient(db, NumericGradient(b, loss), "db");

  // A null entry skips its input but keeps its columns.
  RowMatrix db_only = RowMatrix::Zero(3, 4);
  MatrixRef db_only_ref(db_only);
  const std::vector<MatrixRef*> skip_first = {nullptr, &db_only_ref};
  ConcatBackward(r, widths, skip_first);
  CHECK(db_only == r.rightCols(4));

  // An input that already is its columns of the output (computed in place) stays; the others are
  // copied around it, an input the same width at another place included.
  RowMatrix joined = RowMatrix::Zero(3, 6);
  joined.middleCols(2, 2) = a;
  const RowMatrix c = RandomMatrix(3, 2, 64);
  const std::vector<ConstMatrixRef> xs = {c, joined.middleCols(2, 2), a};
  ConcatForward(xs, joined);
  CHECK(joined.leftCols(2) == c);
  CHECK(joined.middleCols(2, 2) == a);
  CHECK(joined.rightCols(2) == a);
}

}  // namespace
}  // namespace tessera
