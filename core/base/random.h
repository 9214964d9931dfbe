// Counter-based randomness: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
// 1, 2, 3", SC'11), the generator TensorFlow and JAX use for stateless random ops.
//
// A Philox value is a pure function of (key, counter), so the random value for a global element
// position is the same whichever shard computes it and in whatever order: this is what makes
// initialization independent of the number of shards (docs/design.md §3). PhiloxStream walks the same
// function sequentially for datasets and shuffling.
//
// Thread-safety: CounterRandom is immutable and safe to share; a PhiloxStream is not.
#pragma once

#include <array>
#include <cstdint>
#include <limits>

namespace tessera {

using PhiloxCounter = std::array<uint32_t, 4>;
using PhiloxKey = std::array<uint32_t, 2>;

// Ten rounds of Philox4x32 on `counter` under `key`.
PhiloxCounter Philox4x32(PhiloxCounter counter, PhiloxKey key);

// Maps 32 random bits to a float in [0, 1) (24 bits of mantissa).
inline float UniformFromBits(uint32_t bits) { return (bits >> 8) * (1.0f / 16777216.0f); }
// Maps 64 random bits to a double in [0, 1) (53 bits of mantissa).
inline double UniformDoubleFromBits(uint32_t hi, uint32_t lo) {
  const uint64_t x = (static_cast<uint64_t>(hi) << 32 | lo) >> 11;
  return x * (1.0 / 9007199254740992.0);
}

// Random values as a pure function of (seed, stream, index).
class CounterRandom {
 public:
  explicit CounterRandom(uint64_t seed, uint64_t stream = 0) : seed_(seed), stream_(stream) {}

  // 128 random bits for `index`.
  PhiloxCounter Bits(uint64_t index) const;
  // U[0, 1) for `index`.
  float Uniform(uint64_t index) const { return UniformFromBits(Bits(index)[0]); }
  // N(0, 1) for `index` (Box-Muller over the first two words, in double precision).
  float Normal(uint64_t index) const;

 private:
  uint64_t seed_;
  uint64_t stream_;
};

// A sequential Philox generator; a UniformRandomBitGenerator of 32-bit values.
class PhiloxStream {
 public:
  using result_type = uint32_t;
  explicit PhiloxStream(uint64_t seed, uint64_t stream = 0) : rng_(seed, stream) {}

  static constexpr result_type min() { return 0; }
  static constexpr result_type max() { return std::numeric_limits<uint32_t>::max(); }
  result_type operator()();
  // Moves to the stream's `draw`-th 32-bit value (0-based): the next operator() returns what the
  // draw-th call from the start would, in O(1). With a fixed number of draws per item, item i
  // can be drawn alone (what an on-demand data source does).
  void Seek(uint64_t draw);

  double Uniform();                 // U[0, 1), 53 bits
  double Normal();                  // N(0, 1)
  uint64_t Below(uint64_t n);       // uniform in [0, n), unbiased; n >= 1
  bool Bernoulli(double p) { return Uniform() < p; }

 private:
  CounterRandom rng_;
  uint64_t next_index_ = 0;
  PhiloxCounter buffer_{};
  int buffered_ = 0;
};

}  // namespace tessera
