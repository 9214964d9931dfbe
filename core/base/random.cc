#include "core/base/random.h"

#include <cmath>

namespace tessera {
namespace {

constexpr uint32_t kMul0 = 0xD2511F53;
constexpr uint32_t kMul1 = 0xCD9E8D57;
constexpr uint32_t kWeyl0 = 0x9E3779B9;
constexpr uint32_t kWeyl1 = 0xBB67AE85;

inline void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

double BoxMuller(uint32_t a, uint32_t b) {
  // u1 in (0, 1] so the log is finite.
  const double u1 = ((a >> 8) + 1.0) * (1.0 / 16777216.0);
  const double u2 = UniformFromBits(b);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

PhiloxCounter Philox4x32(PhiloxCounter c, PhiloxKey k) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k[0] += kWeyl0;
      k[1] += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, c[0], &hi0, &lo0);
    MulHiLo(kMul1, c[2], &hi1, &lo1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
  }
  return c;
}

PhiloxCounter CounterRandom::Bits(uint64_t index) const {
  return Philox4x32({static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                     static_cast<uint32_t>(stream_), static_cast<uint32_t>(stream_ >> 32)},
                    {static_cast<uint32_t>(seed_), static_cast<uint32_t>(seed_ >> 32)});
}

float CounterRandom::Normal(uint64_t index) const {
  const PhiloxCounter bits = Bits(index);
  return static_cast<float>(BoxMuller(bits[0], bits[1]));
}

PhiloxStream::result_type PhiloxStream::operator()() {
  if (buffered_ == 0) {
    buffer_ = rng_.Bits(next_index_++);
    buffered_ = 4;
  }
  return buffer_[4 - buffered_--];
}

void PhiloxStream::Seek(uint64_t draw) {
  next_index_ = draw / 4;
  buffered_ = 0;
  if (const int skip = static_cast<int>(draw % 4); skip != 0) {
    buffer_ = rng_.Bits(next_index_++);
    buffered_ = 4 - skip;
  }
}

double PhiloxStream::Uniform() {
  const uint32_t hi = (*this)();
  const uint32_t lo = (*this)();
  return UniformDoubleFromBits(hi, lo);
}

double PhiloxStream::Normal() {
  const uint32_t a = (*this)();
  const uint32_t b = (*this)();
  return BoxMuller(a, b);
}

uint64_t PhiloxStream::Below(uint64_t n) {
  // Rejection sampling on 64 bits: unbiased for every n.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() -
                         std::numeric_limits<uint64_t>::max() % n;
  for (;;) {
    const uint64_t x = static_cast<uint64_t>((*this)()) << 32 | (*this)();
    if (x < limit) return x % n;
  }
}

}  // namespace tessera
