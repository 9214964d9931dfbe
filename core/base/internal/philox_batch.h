// Philox4x32-10 for 32 consecutive counters at once, the inner loop of every random initializer
// (core/variables/initializer.cc): words 0 and 1 of CounterRandom(seed, stream).Bits(first + j) for
// j = 0..31. The rounds are 32x32 -> 64-bit products, which compilers vectorize poorly on their
// own (GCC shuffles every lane through 64-bit registers), so each instruction set gets its own
// intrinsics here and the widest the CPU runs is chosen once (Note [Philox lanes] in the .cc).
// Every variant gives the same bits: the arithmetic is integer.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

namespace tessera::internal {

inline constexpr int kPhiloxLanes = 32;

// The chosen variant.
void PhiloxBatch(uint64_t seed, uint64_t stream, uint64_t first, uint32_t* word0, uint32_t* word1);

// A variant by name ("portable", "sse2", "avx2"), for tests and measurements.
struct PhiloxBatchVariant {
  const char* name;
  void (*fn)(uint64_t seed, uint64_t stream, uint64_t first, uint32_t* word0, uint32_t* word1);
};
// Every variant compiled in that this CPU runs, the portable C++ first.
std::vector<PhiloxBatchVariant> RunnablePhiloxBatches();

}  // namespace tessera::internal
