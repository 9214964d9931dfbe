// The kernels of a training step (core/model/internal/kernels.h), in every variant this build and
// CPU run (baseline, and x86-64-v3 / v4 where compiled in and supported), against plain loops in
// double precision.
#include "core/model/internal/kernels.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace tessera::kernels {
namespace {

// A row-major [rows, cols] matrix stored with a row stride of cols + pad, the pad filled with a
// value no product may read or write.
struct Strided {
  int64_t rows, cols, ld;
  std::vector<float> data;
  Strided(int64_t r, int64_t c, int64_t pad, std::mt19937& rng) : rows(r), cols(c), ld(c + pad) {
    std::uniform_real_distribution<float> u(-1, 1);
    data.assign(static_cast<size_t>(std::max<int64_t>(rows * ld, 1)), 777.0f);
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = 0; j < cols; ++j) at(i, j) = u(rng);
    }
  }
  float& at(int64_t i, int64_t j) { return data[i * ld + j]; }
  float at(int64_t i, int64_t j) const { return data[i * ld + j]; }
  bool PadsUntouched() const {
    for (int64_t i = 0; i < rows; ++i) {
      for (int64_t j = cols; j < ld; ++j) {
        if (at(i, j) != 777.0f) return false;
      }
    }
    return true;
  }
};

// |got - want| within a few float roundings of the sum of |terms| (the products' own scale).
void CheckClose(const Strided& got, const std::vector<double>& want,
                const std::vector<double>& scale) {
  for (int64_t i = 0; i < got.rows; ++i) {
    for (int64_t j = 0; j < got.cols; ++j) {
      const size_t at = i * got.cols + j;
      REQUIRE(std::abs(got.at(i, j) - want[at]) <= 1e-5 * (scale[at] + 1));
    }
  }
  CHECK(got.PadsUntouched());
}

TEST_CASE("every runnable variant multiplies like plain loops, strided, at any size") {
  const std::vector<const Kernels*> runnable = RunnableKernels();
  REQUIRE(!runnable.empty());
  CHECK(std::string(runnable.front()->isa) == "baseline");
  std::mt19937 rng(3);
  struct Size {
    int64_t m, k, n;
  };
  for (const Kernels* kernels : runnable) {
    CAPTURE(kernels->isa);
    for (const Size s : {Size{512, 64, 64}, Size{37, 19, 5}, Size{1, 64, 1}, Size{0, 8, 4},
                         Size{3, 1, 17}, Size{129, 33, 65}}) {
      CAPTURE(s.m);
      CAPTURE(s.k);
      CAPTURE(s.n);
      const Strided x(s.m, s.k, 3, rng), w(s.k, s.n, 1, rng), dz(s.m, s.n, 2, rng);

      Strided y(s.m, s.n, 5, rng);
      kernels->mat_mul(s.m, s.k, s.n, x.data.data(), x.ld, w.data.data(), w.ld, y.data.data(),
                       y.ld);
      std::vector<double> want(s.m * s.n, 0.0), scale(s.m * s.n, 0.0);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t j = 0; j < s.n; ++j) {
          for (int64_t l = 0; l < s.k; ++l) {
            want[i * s.n + j] += double{x.at(i, l)} * w.at(l, j);
            scale[i * s.n + j] += std::abs(double{x.at(i, l)} * w.at(l, j));
          }
        }
      }
      CheckClose(y, want, scale);

      Strided dw(s.k, s.n, 2, rng);  // added to: starts random
      want.assign(s.k * s.n, 0.0);
      scale.assign(s.k * s.n, 0.0);
      for (int64_t l = 0; l < s.k; ++l) {
        for (int64_t j = 0; j < s.n; ++j) {
          want[l * s.n + j] = dw.at(l, j);
          scale[l * s.n + j] = std::abs(dw.at(l, j));
          for (int64_t i = 0; i < s.m; ++i) {
            want[l * s.n + j] += double{x.at(i, l)} * dz.at(i, j);
            scale[l * s.n + j] += std::abs(double{x.at(i, l)} * dz.at(i, j));
          }
        }
      }
      kernels->add_mat_mul_at_b(s.m, s.k, s.n, x.data.data(), x.ld, dz.data.data(), dz.ld,
                                dw.data.data(), dw.ld);
      CheckClose(dw, want, scale);

      Strided dx(s.m, s.k, 4, rng);  // added to: starts random
      want.assign(s.m * s.k, 0.0);
      scale.assign(s.m * s.k, 0.0);
      for (int64_t i = 0; i < s.m; ++i) {
        for (int64_t l = 0; l < s.k; ++l) {
          want[i * s.k + l] = dx.at(i, l);
          scale[i * s.k + l] = std::abs(dx.at(i, l));
          for (int64_t j = 0; j < s.n; ++j) {
            want[i * s.k + l] += double{dz.at(i, j)} * w.at(l, j);
            scale[i * s.k + l] += std::abs(double{dz.at(i, j)} * w.at(l, j));
          }
        }
      }
      kernels->add_mat_mul_a_bt(s.m, s.k, s.n, dz.data.data(), dz.ld, w.data.data(), w.ld,
                                dx.data.data(), dx.ld);
      CheckClose(dx, want, scale);
    }
  }
}

TEST_CASE("every runnable variant's ReLU, Adagrad and Adam are their formulas, at any length") {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-2, 2);
  const auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float& f : v) f = u(rng);
    return v;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const Kernels* kernels : RunnableKernels()) {
    CAPTURE(kernels->isa);
    for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{32}, size_t{45}, size_t{1000}}) {
      CAPTURE(n);
      std::vector<float> x = random(n), y(n), dy = random(n), dx(n);
      if (n > 3) x[3] = nan;
      kernels->relu(x.data(), y.data(), n);
      for (size_t i = 0; i < n; ++i) {
        if (std::isnan(x[i])) {
          CHECK(std::isnan(y[i]));
        } else {
          CHECK(y[i] == (x[i] < 0 ? 0.0f : x[i]));
        }
      }
      kernels->relu_backward(y.data(), dy.data(), dx.data(), n);
      for (size_t i = 0; i < n; ++i) CHECK(dx[i] == (y[i] > 0 ? dy[i] : 0.0f));
      std::vector<float> in_place = x;  // y may be x, dx may be dy
      kernels->relu(in_place.data(), in_place.data(), n);
      std::vector<float> dy_in_place = dy;
      kernels->relu_backward(in_place.data(), dy_in_place.data(), dy_in_place.data(), n);
      for (size_t i = 0; i < n; ++i) {
        CHECK((in_place[i] == y[i] || (std::isnan(in_place[i]) && std::isnan(y[i]))));
        CHECK(dy_in_place[i] == dx[i]);
      }

      const std::vector<float> g = random(n);
      std::vector<float> var = random(n), accum = random(n);
      for (float& a : accum) a = std::abs(a);
      const std::vector<float> var0 = var, accum0 = accum;
      kernels->adagrad(var.data(), accum.data(), g.data(), n, 0.1f, 1e-3f);
      for (size_t i = 0; i < n; ++i) {
        const double a = double{accum0[i]} + double{g[i]} * g[i];
        CHECK(std::abs(accum[i] - a) <= 1e-6 * a + 1e-7);
        const double w = var0[i] - double{g[i]} * 0.1 / (std::sqrt(a) + 1e-3);
        CHECK(std::abs(var[i] - w) <= 1e-5);
      }

      std::vector<float> m = random(n), v = random(n);
      for (float& s : v) s = std::abs(s) + 0.1f;  // sqrt(v) not near 0: a well-posed check
      var = var0;
      const std::vector<float> m0 = m, v0 = v;
      kernels->adam(var.data(), m.data(), v.data(), g.data(), n, 0.01f, 0.1f, 0.001f, 1e-7f);
      for (size_t i = 0; i < n; ++i) {
        const double mi = m0[i] + (double{g[i]} - m0[i]) * 0.1;
        const double vi = v0[i] + (double{g[i]} * g[i] - v0[i]) * 0.001;
        CHECK(std::abs(m[i] - mi) <= 1e-6);
        CHECK(std::abs(v[i] - vi) <= 1e-6);
        CHECK(std::abs(var[i] - (var0[i] - mi * 0.01 / (std::sqrt(vi) + 1e-7))) <= 1e-5);
      }
    }
  }
}

TEST_CASE("the widest runnable variant is chosen unless TESSERA_KERNELS names another") {
  const std::vector<const Kernels*> runnable = RunnableKernels();
  CHECK(&PickKernels(nullptr) == runnable.back());
  CHECK(&PickKernels("") == runnable.back());
  for (const Kernels* kernels : runnable) {
    CHECK(&PickKernels(kernels->isa) == kernels);
  }
  CHECK(&PickKernels("x86-64-v9") == runnable.back());  // logged and ignored
  CHECK(&ChosenKernels() == &PickKernels(std::getenv("TESSERA_KERNELS")));
}

}  // namespace
}  // namespace tessera::kernels
