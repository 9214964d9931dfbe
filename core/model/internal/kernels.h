// The arithmetic of a training step that gains from wider vectors, compiled once per instruction
// set and chosen when first used, so that a portable build (the x86-64 baseline) still runs it
// with AVX2+FMA or AVX-512 where the CPU has them (Note [Kernels per instruction set, Eigen] in
// kernels.cc): the dense layers' matrix products, ReLU, and the Adagrad and Adam updates.
//
// Matrices are row-major float with a row stride (`ld*`, in floats; >= its columns):
//   mat_mul:           y[m, n]  = x[m, k] w[k, n]
//   add_mat_mul_at_b:  dw[k, n] += x[m, k]^T dz[m, n]
//   add_mat_mul_a_bt:  dx[m, k] += dz[m, n] w[k, n]^T
// Their outputs must not overlap their inputs. The elementwise kernels work on n contiguous
// floats:
//   relu:               y = max(x, 0)                      (y may be x)
//   relu_backward:      dx = y > 0 ? dy : 0                 (dx may be dy)
//   adagrad:            accum += g^2; var -= g lr / (sqrt(accum) + eps)
//   adam:               m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2);
//                       var -= m alpha / (sqrt(v) + eps)
// (the optimizer rules in core/model/optimizer_adagrad.cc and core/model/optimizer_adam.cc say what
// the hyperparameters mean).
//
// Example:
//   const Kernels& kernels = ChosenKernels();
//   kernels.mat_mul(m, k, n, x, k, w, n, y, n);
//
// Thread-safety: the tables are constants; ChosenKernels is safe from any thread.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::kernels {

struct Kernels {
  const char* isa;  // "baseline", "x86-64-v3" (AVX2, FMA), "x86-64-v4" (AVX-512)
  void (*mat_mul)(int64_t m, int64_t k, int64_t n, const float* x, int64_t ldx, const float* w,
                  int64_t ldw, float* y, int64_t ldy);
  void (*add_mat_mul_at_b)(int64_t m, int64_t k, int64_t n, const float* x, int64_t ldx,
                           const float* dz, int64_t lddz, float* dw, int64_t lddw);
  void (*add_mat_mul_a_bt)(int64_t m, int64_t k, int64_t n, const float* dz, int64_t lddz,
                           const float* w, int64_t ldw, float* dx, int64_t lddx);
  void (*relu)(const float* x, float* y, int64_t n);
  void (*relu_backward)(const float* y, const float* dy, float* dx, int64_t n);
  void (*adagrad)(float* var, float* accum, const float* g, int64_t n, float lr, float eps);
  void (*adam)(float* var, float* m, float* v, const float* g, int64_t n, float alpha,
               float one_minus_beta_1, float one_minus_beta_2, float eps);
};

// The kernels this process uses: the widest instruction set both compiled in and run by the CPU,
// or the one the environment variable TESSERA_KERNELS names ("baseline", "x86-64-v3",
// "x86-64-v4": for measurements), when it is among those. Chosen on the first call; an
// unusable TESSERA_KERNELS value is logged and ignored.
const Kernels& ChosenKernels();

// What ChosenKernels decides, for `wanted` in place of TESSERA_KERNELS (null or "": none).
const Kernels& PickKernels(const char* wanted);

// Every variant compiled in that this CPU runs, baseline first.
std::vector<const Kernels*> RunnableKernels();

}  // namespace tessera::kernels
