#include "tessera/model.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/internal/philox_batch.h"
#include "core/base/random.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// Note [Initializer streams]
// Every random initializer draws from CounterRandom(spec.seed, stream) at the element's global
// flat index g = (row_offset + local_row) * row_size + col, so a value depends only on
// (seed, kind, g), never on the shard that computes it. The stream word keeps the kinds apart:
// its low 32 bits name the kind (below), so random_uniform and random_normal with the same seed
// are independent. Its high 32 bits count truncated_normal's re-draw attempts: attempt k of
// element g reads index g on stream kTruncatedNormalStream | k << 32, a value no other element or
// attempt reads, which keeps the re-draws a pure function of (seed, g) as well.
// These constants are part of the persisted meaning of a seed: changing one changes every
// variable initialized from a spec, so never renumber them.
constexpr uint64_t kRandomUniformStream = 1;
constexpr uint64_t kRandomNormalStream = 2;
constexpr uint64_t kTruncatedNormalStream = 3;
constexpr uint64_t kGlorotUniformStream = 4;

// truncated_normal re-draws a value beyond 2 stddev; one attempt fails with probability 0.0455,
// so 64 failures in a row (probability ~1e-86) never happen in practice. The cap only guarantees
// termination; were it reached the value would be the mean, which is still inside the bounds.
constexpr uint64_t kMaxTruncatedNormalAttempts = 64;
constexpr float kTruncationBound = 2.0f;  // in stddevs

enum class Kind {
  kZeros,
  kOnes,
  kConstant,
  kRandomUniform,
  kRandomNormal,
  kTruncatedNormal,
  kGlorotUniform
};

struct ParamDefault {
  const char* name;
  double value;
};

struct KindInfo {
  const char* name;
  Kind kind;
  // The accepted parameters in the order `a`, `b` of ResolvedInitializer; nullptr-named when
  // unused.
  ParamDefault params[2];
};

constexpr KindInfo kKinds[] = {
    {"zeros", Kind::kZeros, {{nullptr, 0}, {nullptr, 0}}},
    {"ones", Kind::kOnes, {{nullptr, 0}, {nullptr, 0}}},
    {"constant", Kind::kConstant, {{"value", 0}, {nullptr, 0}}},
    {"random_uniform", Kind::kRandomUniform, {{"minval", -0.05}, {"maxval", 0.05}}},
    {"random_normal", Kind::kRandomNormal, {{"mean", 0}, {"stddev", 0.05}}},
    {"truncated_normal", Kind::kTruncatedNormal, {{"mean", 0}, {"stddev", 0.05}}},
    {"glorot_uniform", Kind::kGlorotUniform, {{nullptr, 0}, {nullptr, 0}}},
};

// A validated spec: the kind and its two parameters with defaults applied
// (constant: a = value; random_uniform: a = minval, b = maxval; normals: a = mean, b = stddev).
struct ResolvedInitializer {
  const KindInfo* info = nullptr;
  double a = 0;
  double b = 0;
};

std::string KindNames() {
  std::vector<std::string> names;
  for (const KindInfo& k : kKinds) names.push_back(k.name);
  return absl::StrJoin(names, ", ");
}

std::string ParamNames(const KindInfo& info) {
  std::vector<std::string> names;
  for (const ParamDefault& p : info.params) {
    if (p.name != nullptr) names.push_back(p.name);
  }
  return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

absl::StatusOr<ResolvedInitializer> Resolve(const InitializerSpec& spec) {
  const KindInfo* info = nullptr;
  for (const KindInfo& k : kKinds) {
    if (spec.name == k.name) info = &k;
  }
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown initializer \"", spec.name, "\"; expected one of ", KindNames()));
  }
  double values[2] = {info->params[0].value, info->params[1].value};
  for (const auto& [key, value] : spec.params) {
    int slot = -1;
    for (int i = 0; i < 2; ++i) {
      if (info->params[i].name != nullptr && key == info->params[i].name) slot = i;
    }
    if (slot < 0) {
      return absl::InvalidArgumentError(absl::StrCat("initializer ", info->name,
                                                     ": unknown parameter \"", key,
                                                     "\"; accepted: ", ParamNames(*info)));
    }
    // Values are float32, so a parameter must be a finite float, not just a finite double.
    if (!std::isfinite(static_cast<float>(value))) {
      return absl::InvalidArgumentError(absl::StrCat("initializer ", info->name, ": parameter ",
                                                     key, " is ", value,
                                                     "; it must be a finite float32"));
    }
    values[slot] = value;
  }
  if (info->kind == Kind::kRandomUniform) {
    // Compared as the floats the fill uses: a range that rounds to empty is empty.
    const float minval = static_cast<float>(values[0]);
    const float maxval = static_cast<float>(values[1]);
    if (!(maxval > minval)) {
      return absl::InvalidArgumentError(absl::StrCat("initializer ", info->name, ": maxval (",
                                                     values[1], ") must be greater than minval (",
                                                     values[0], ")"));
    }
    if (!std::isfinite(maxval - minval)) {
      return absl::InvalidArgumentError(
          absl::StrCat("initializer ", info->name, ": the range maxval - minval (",
                       values[1] - values[0], ") overflows a float32"));
    }
  }
  if ((info->kind == Kind::kRandomNormal || info->kind == Kind::kTruncatedNormal) &&
      values[1] < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer ", info->name, ": stddev (", values[1], ") must be >= 0"));
  }
  return ResolvedInitializer{info, values[0], values[1]};
}

// Keras' fan computation (keras.initializers.VarianceScaling), on the FULL variable shape so
// every shard uses the same limit.
std::pair<double, double> Fans(const Shape& shape) {
  const int rank = shape.rank();
  if (rank < 1) return {1, 1};
  if (rank == 1) return {static_cast<double>(shape.dim(0)), static_cast<double>(shape.dim(0))};
  if (rank == 2) return {static_cast<double>(shape.dim(0)), static_cast<double>(shape.dim(1))};
  double receptive_field = 1;
  for (int i = 0; i < rank - 2; ++i) receptive_field *= static_cast<double>(shape.dim(i));
  return {shape.dim(rank - 2) * receptive_field, shape.dim(rank - 1) * receptive_field};
}

// limit = sqrt(3 * scale) with scale = 1 / max(1, (fan_in + fan_out) / 2), which is
// sqrt(6 / (fan_in + fan_out)) whenever fan_in + fan_out >= 2 (Keras' fan_avg mode; the max
// only matters for empty variables, where it keeps the limit finite).
double GlorotLimit(const Shape& full_shape) {
  const auto [fan_in, fan_out] = Fans(full_shape);
  return std::sqrt(3.0 / std::max(1.0, (fan_in + fan_out) / 2.0));
}

absl::Status CheckBlock(const ResolvedInitializer& init, const Shape& full_shape,
                        int64_t row_offset, const Shape& block_shape) {
  // A scalar variable's only block may be shaped [] as well as [1].
  const bool scalar_block = full_shape.rank() == 0 && block_shape.rank() == 0;
  const Shape expected = full_shape.WithRows(block_shape.rows());
  if (!scalar_block && block_shape != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer ", init.info->name, ": block shape ", block_shape.ToString(),
                     " does not match the variable's trailing dims: expected ", expected.ToString(),
                     " for variable shape ", full_shape.ToString()));
  }
  const int64_t rows = block_shape.rows();
  const int64_t full_rows = full_shape.rows();
  if (row_offset < 0 || rows > full_rows || row_offset > full_rows - rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer ", init.info->name, ": a block of ", rows, " rows at row offset ",
                     row_offset, " falls outside the variable's ", full_rows,
                     " rows (variable shape ", full_shape.ToString(), ")"));
  }
  return absl::OkStatus();
}

// Note [Batched generation]
// Calling CounterRandom per element costs ~10 ns (uniform) and ~40 ns (normal: scalar libm log,
// cos and sqrt), so a 100M-element variable would take seconds. The fill therefore computes 32
// consecutive global indices at a time with the same Philox4x32-10 as core/base/random.h, on vector
// registers (core/base/internal/philox_batch.h: its own intrinsics per instruction set, since
// compilers shuffle 32x32 -> 64-bit products badly), and a branch-free Box-Muller in double
// precision with polynomial log / sin / cos (accurate to ~1e-15, far below a float's 6e-8
// rounding step). What each element gets:
//   uniform kinds: minval + (maxval - minval) * u in float32, u = CounterRandom(seed,
//                  stream).Uniform(g) exactly (so maxval itself can occur by rounding);
//   normal kinds:  CounterRandom(seed, stream).Normal(g) up to the last float bit (the same
//                  Philox words and the same Box-Muller formula; only libm is replaced).
// Invariance needs every element computed by the same machine code whatever its block, so each
// kernel is one out-of-line function that always produces a full batch of 32 lanes (a block's
// partial last batch goes through a buffer): no scalar epilogue whose rounding (FMA contraction)
// could differ from the vector body. Every element's value depends on its global index alone,
// so the batch width is free to change. Measured on the 2-vCPU EPYC (AVX2, no AVX-512),
// `bench/ps_init`: random_uniform ~320M floats/s on one thread (~140M with 16 lanes and the
// compiler's own vectorization of Philox); random_normal ~35M/s, bound by its double-precision
// log and cos.
//
// Note [Kernels per instruction set]
// The kernels are compiled three times, for x86-64-v4 (AVX-512), x86-64-v3 (AVX2) and the
// baseline, and the loader picks the one the CPU runs (GCC's target_clones), so the build needs
// no -march and the fast path costs nothing where it is missing. All give the same bits: the
// file is compiled with -ffp-contract=off (core/CMakeLists.txt), so no instruction set fuses a
// multiply and an add (an FMA rounds once where the baseline rounds twice), every other
// operation (+, -, *, /, sqrt, conversions) is correctly rounded on every path, and Philox is
// integer arithmetic (tests/core/variables/initializer_test.cc pins the bits, computed from a build
// without the clones; tests/core/base/random_test.cc checks every Philox variant against the scalar
// generator). Before -ffp-contract=off, a TESSERA_NATIVE build on an FMA machine gave other
// values than a baseline build.
constexpr int kBatch = 32;

// Not under ThreadSanitizer: the loader runs target_clones' resolvers while it relocates the
// binary, before the TSan runtime is up, and GCC instruments them, so every TSan binary died
// with SIGSEGV before main. Such a build runs the baseline kernel.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define TESSERA_KERNEL \
  __attribute__((noinline, target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TESSERA_KERNEL ABSL_ATTRIBUTE_NOINLINE
#endif

// Philox words of the 32 lanes come from core/base/internal/philox_batch.h.
static_assert(kBatch == internal::kPhiloxLanes);

// ln(x) for x in [1, 2^24], branch-free: x = m * 2^e with m in [sqrt(1/2), sqrt(2)), and
// ln(m) = 2 atanh(s) with s = (m - 1) / (m + 1), |s| <= 0.172, summed to s^17 (error < 1e-15).
ABSL_ATTRIBUTE_ALWAYS_INLINE inline double LogOfPositive(double x) {
  uint64_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  const uint64_t mantissa_bits = (bits & ((uint64_t{1} << 52) - 1)) | (uint64_t{1023} << 52);
  double m;
  std::memcpy(&m, &mantissa_bits, sizeof(m));
  double e = static_cast<double>(static_cast<int64_t>(bits >> 52) - 1023);
  const bool above = m > 1.4142135623730951;
  m = above ? 0.5 * m : m;
  e = above ? e + 1.0 : e;
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double series = 1.0 / 17;
  for (int k = 15; k >= 1; k -= 2) series = 1.0 / k + s2 * series;
  return e * 0.69314718055994530942 + 2.0 * s * series;
}

// cos(2 pi k / 2^24) for k in [0, 2^24): the exact integer reduction k = q 2^22 + t with
// |t| <= 2^21 leaves x = t pi / 2^23 in [-pi/4, pi/4], where the Taylor series of cos to x^16
// and of sin to x^15 are exact to 1e-16; cos(q pi / 2 + x) is then +-cos x or +-sin x.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline double CosOfTurn(uint32_t k) {
  constexpr double kCos[] = {1.0 / 20922789888000.0,
                             -1.0 / 87178291200.0,
                             1.0 / 479001600.0,
                             -1.0 / 3628800.0,
                             1.0 / 40320.0,
                             -1.0 / 720.0,
                             1.0 / 24.0,
                             -1.0 / 2.0,
                             1.0};
  constexpr double kSin[] = {
      -1.0 / 1307674368000.0, 1.0 / 6227020800.0, -1.0 / 39916800.0, 1.0 / 362880.0,
      -1.0 / 5040.0,          1.0 / 120.0,        -1.0 / 6.0,        1.0};
  const uint32_t quadrant = (k + (uint32_t{1} << 21)) >> 22;  // 0..4; 4 is a full turn
  const int32_t t = static_cast<int32_t>(k - (quadrant << 22));
  const double x = t * (3.14159265358979323846 / 8388608.0);
  const double x2 = x * x;
  double cos_x = kCos[0];
  for (int i = 1; i < 9; ++i) cos_x = cos_x * x2 + kCos[i];
  double sin_x = kSin[0];
  for (int i = 1; i < 8; ++i) sin_x = sin_x * x2 + kSin[i];
  sin_x *= x;
  const uint32_t q = quadrant & 3;
  const double v = (q & 1) ? sin_x : cos_x;
  return ((q + 1) & 2) ? -v : v;  // quadrants 1 and 2 are negative
}

// The kernels: each writes the values of global indices first .. first + 15 to out[0..15].
TESSERA_KERNEL void UniformKernel(uint64_t seed, uint64_t stream, uint64_t first,
                                           float minval, float width, float* out) {
  alignas(64) uint32_t word0[kBatch], word1[kBatch];
  internal::PhiloxBatch(seed, stream, first, word0, word1);
  for (int j = 0; j < kBatch; ++j) out[j] = minval + width * UniformFromBits(word0[j]);
}

// Standard normals (mean 0, stddev 1) by the Box-Muller of core/base/random.cc on the same two
// Philox words: u1 = ((a >> 8) + 1) / 2^24 in (0, 1], u2 = (b >> 8) / 2^24, z = sqrt(-2 ln u1)
// cos(2 pi u2).
TESSERA_KERNEL void NormalKernel(uint64_t seed, uint64_t stream, uint64_t first,
                                          float* out) {
  alignas(64) uint32_t word0[kBatch], word1[kBatch];
  internal::PhiloxBatch(seed, stream, first, word0, word1);
  alignas(64) double radius[kBatch], cosine[kBatch];
  for (int j = 0; j < kBatch; ++j) {
    const double log_u1 = LogOfPositive((word0[j] >> 8) + 1.0) - 24 * 0.69314718055994530942;
    // ln u1 <= 0 mathematically; max() keeps rounding at u1 = 1 out of sqrt's domain.
    radius[j] = std::max(0.0, -2.0 * log_u1);
    cosine[j] = CosOfTurn(word1[j] >> 8);
  }
  // A loop of its own: std::sqrt's errno contract keeps the compiler from vectorizing it, and
  // kept apart it does not stop the loops around it from being vectorized.
  for (int j = 0; j < kBatch; ++j) radius[j] = std::sqrt(radius[j]);
  for (int j = 0; j < kBatch; ++j) out[j] = static_cast<float>(radius[j] * cosine[j]);
}

// Standard normals truncated to [-2, 2]; see Note [Initializer streams] for the re-draws. A
// re-draw batch holds attempt k for all 32 indices, and a lane takes it only while it still
// needs one, so each element's value depends on its own index and attempts alone.
void TruncatedNormalKernel(uint64_t seed, uint64_t first, float* out) {
  NormalKernel(seed, kTruncatedNormalStream, first, out);
  alignas(64) float redraw[kBatch];
  for (uint64_t attempt = 1; attempt < kMaxTruncatedNormalAttempts; ++attempt) {
    bool pending = false;
    for (int j = 0; j < kBatch; ++j) pending |= std::abs(out[j]) > kTruncationBound;
    if (!pending) return;
    NormalKernel(seed, kTruncatedNormalStream | attempt << 32, first, redraw);
    for (int j = 0; j < kBatch; ++j) {
      if (std::abs(out[j]) > kTruncationBound) out[j] = redraw[j];
    }
  }
  for (int j = 0; j < kBatch; ++j) {
    if (std::abs(out[j]) > kTruncationBound) out[j] = 0.0f;
  }
}

// Runs `kernel(global_index, batch)` over the n elements whose global indices start at `first`.
template <typename Kernel>
void FillBatched(uint64_t first, float* out, int64_t n, Kernel kernel) {
  alignas(64) float batch[kBatch];
  for (int64_t i = 0; i < n; i += kBatch) {
    kernel(first + static_cast<uint64_t>(i), batch);
    std::memcpy(out + i, batch, sizeof(float) * std::min<int64_t>(kBatch, n - i));
  }
}

// mean + stddev * z over a batch of standard normals.
void ScaleBatch(float mean, float stddev, float* batch) {
  for (int j = 0; j < kBatch; ++j) batch[j] = mean + stddev * batch[j];
}

}  // namespace

absl::Status ValidateInitializer(const InitializerSpec& spec) { return Resolve(spec).status(); }

absl::Status InitializeBlock(const InitializerSpec& spec, const Shape& full_shape,
                             int64_t row_offset, TensorView block) {
  TESSERA_ASSIGN_OR_RETURN(const ResolvedInitializer init, Resolve(spec));
  TESSERA_RETURN_IF_ERROR(CheckBlock(init, full_shape, row_offset, block.shape()));

  float* const out = block.data();
  const int64_t n = block.size();
  if (n == 0) return absl::OkStatus();
  // Rows are contiguous, so the block's element i has global flat index first + i.
  const uint64_t first =
      static_cast<uint64_t>(row_offset) * static_cast<uint64_t>(full_shape.row_size());
  const float a = static_cast<float>(init.a);
  const float b = static_cast<float>(init.b);
  switch (init.info->kind) {
    case Kind::kZeros:
      std::fill(out, out + n, 0.0f);
      break;
    case Kind::kOnes:
      std::fill(out, out + n, 1.0f);
      break;
    case Kind::kConstant:
      std::fill(out, out + n, a);
      break;
    case Kind::kRandomUniform:
      FillBatched(first, out, n, [&](uint64_t g, float* batch) {
        UniformKernel(spec.seed, kRandomUniformStream, g, a, b - a, batch);
      });
      break;
    case Kind::kRandomNormal:
      FillBatched(first, out, n, [&](uint64_t g, float* batch) {
        NormalKernel(spec.seed, kRandomNormalStream, g, batch);
        ScaleBatch(a, b, batch);
      });
      break;
    case Kind::kTruncatedNormal:
      FillBatched(first, out, n, [&](uint64_t g, float* batch) {
        TruncatedNormalKernel(spec.seed, g, batch);
        ScaleBatch(a, b, batch);
      });
      break;
    case Kind::kGlorotUniform: {
      const float limit = static_cast<float>(GlorotLimit(full_shape));
      FillBatched(first, out, n, [&](uint64_t g, float* batch) {
        UniformKernel(spec.seed, kGlorotUniformStream, g, -limit, 2 * limit, batch);
      });
      break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensor> MakeInitializedBlock(const InitializerSpec& spec, const Shape& full_shape,
                                            int64_t row_offset, int64_t rows) {
  if (rows < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("initializer ", spec.name, ": block row count ", rows, " is negative"));
  }
  // Validate before allocating, so a bad request never allocates a huge block.
  TESSERA_ASSIGN_OR_RETURN(const ResolvedInitializer init, Resolve(spec));
  const Shape block_shape =
      full_shape.rank() == 0 && rows == 1 ? full_shape : full_shape.WithRows(rows);
  TESSERA_RETURN_IF_ERROR(CheckBlock(init, full_shape, row_offset, block_shape));
  Tensor block(block_shape);  // zeros (Note [Tensor storage]): "zeros" needs no pass at all
  if (init.info->kind == Kind::kZeros) return block;
  TESSERA_RETURN_IF_ERROR(InitializeBlock(spec, full_shape, row_offset, block.view()));
  return block;
}

uint64_t DeriveParamSeed(uint64_t model_seed, int64_t index) {
  constexpr uint64_t kParamSeedStream = 0x6d6f64656c;  // "model"
  const PhiloxCounter bits =
      CounterRandom(model_seed, kParamSeedStream).Bits(static_cast<uint64_t>(index));
  return static_cast<uint64_t>(bits[0]) << 32 | bits[1];
}

}  // namespace tessera
