#include "core/base/random.h"

#include <cmath>
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "core/base/internal/philox_batch.h"

namespace tessera {
namespace {

TEST_CASE("Philox4x32-10 matches the Random123 known-answer vectors") {
  CHECK(Philox4x32({0, 0, 0, 0}, {0, 0}) ==
        PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8});
  CHECK(Philox4x32({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}) ==
        PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd});
  CHECK(Philox4x32({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}) ==
        PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1});
}

TEST_CASE("counter randomness is a pure function of seed, stream and index") {
  CounterRandom a(42, 7), b(42, 7), c(43, 7), d(42, 8);
  CHECK(a.Uniform(123) == b.Uniform(123));
  CHECK(a.Uniform(123) != c.Uniform(123));
  CHECK(a.Uniform(123) != d.Uniform(123));
  CHECK(a.Normal(5) == b.Normal(5));
}

TEST_CASE("every batched Philox variant equals the scalar generator, across word carries") {
  const std::vector<internal::PhiloxBatchVariant> variants = internal::RunnablePhiloxBatches();
  REQUIRE(!variants.empty());
  // Counters whose low word wraps inside a batch, at 0, in the middle and at the very top.
  const uint64_t firsts[] = {0, 1, 0xfffffff8, 0xfffffffc, 0x1fffffff5, 0x123456789abcdef0,
                             0xfffffffffffffff0};
  const uint64_t seeds[] = {0, 1, 0xdeadbeefcafef00d};
  const uint64_t streams[] = {0, 0x100000003, ~uint64_t{0}};
  for (const auto& variant : variants) {
    CAPTURE(variant.name);
    for (uint64_t seed : seeds) {
      for (uint64_t stream : streams) {
        const CounterRandom scalar(seed, stream);
        for (uint64_t first : firsts) {
          uint32_t word0[internal::kPhiloxLanes], word1[internal::kPhiloxLanes];
          variant.fn(seed, stream, first, word0, word1);
          for (int j = 0; j < internal::kPhiloxLanes; ++j) {
            const PhiloxCounter bits = scalar.Bits(first + static_cast<uint64_t>(j));
            CHECK(word0[j] == bits[0]);
            CHECK(word1[j] == bits[1]);
          }
        }
      }
    }
  }
}

TEST_CASE("the stream's uniforms and normals have the right moments") {
  PhiloxStream s(1);
  const int n = 200000;
  double su = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    const double u = s.Uniform();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
    su += u;
    const double z = s.Normal();
    sn += z;
    sn2 += z * z;
  }
  CHECK(su / n == doctest::Approx(0.5).epsilon(0.01));
  CHECK(std::abs(sn / n) < 0.01);
  CHECK(sn2 / n == doctest::Approx(1.0).epsilon(0.02));
}

TEST_CASE("Below is uniform over its range") {
  PhiloxStream s(9);
  int counts[7] = {};
  for (int i = 0; i < 70000; ++i) counts[s.Below(7)]++;
  for (int c : counts) CHECK(std::abs(c - 10000) < 500);
}

TEST_CASE("Seek moves a stream to any draw, as if that many values had been drawn") {
  std::vector<uint32_t> sequential;
  PhiloxStream s(4, 2);
  for (int i = 0; i < 64; ++i) sequential.push_back(s());
  for (const uint64_t draw : {0, 1, 2, 3, 4, 5, 6, 7, 13, 40, 61}) {
    CAPTURE(draw);
    PhiloxStream seeked(4, 2);
    seeked();  // a used stream seeks just the same
    seeked.Seek(draw);
    for (uint64_t k = draw; k < draw + 3; ++k) CHECK(seeked() == sequential[k]);
  }
}

}  // namespace
}  // namespace tessera
