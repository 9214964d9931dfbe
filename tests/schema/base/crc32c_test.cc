// CRC-32C: the known check value, and the hardware path against the portable one on every
// alignment and length pattern the three-way blocks split differently.
#include "schema/base/internal/crc32c.h"

#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <string>

namespace tessera {
namespace schema_internal {
namespace {

TEST_CASE("CRC-32C gives the standard check values") {
  CHECK(Crc32c("123456789") == 0xe3069283u);
  CHECK(Crc32cPortable("123456789") == 0xe3069283u);
  CHECK(Crc32c("") == 0u);
  CHECK(Crc32c(std::string(32, '\0')) == 0x8a9136aau);  // RFC 3720 B.4
  CHECK(Crc32c(std::string(32, '\xff')) == 0x62a8ab43u);
}

TEST_CASE("CRC-32C is the same on every path, length, alignment and split") {
  std::mt19937_64 rng(42);
  std::string bytes(3 * 8192 * 2 + 3 * 256 + 100, '\0');
  for (char& c : bytes) c = static_cast<char>(rng());
  const absl::string_view all(bytes);
  std::uniform_int_distribution<size_t> offset(0, 15);
  for (size_t length : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{255}, size_t{768},
                        size_t{769}, size_t{3 * 8192 - 1}, size_t{3 * 8192}, size_t{3 * 8192 + 9},
                        size_t{2 * 3 * 8192 + 3 * 256 + 17}}) {
    for (int trial = 0; trial < 4; ++trial) {
      const absl::string_view piece = all.substr(offset(rng), length);
      CAPTURE(length);
      const uint32_t want = Crc32cPortable(piece);
      CHECK(Crc32c(piece) == want);
      const size_t split = piece.empty() ? 0 : rng() % piece.size();
      CHECK(Crc32c(piece.substr(split), Crc32c(piece.substr(0, split))) == want);
    }
  }
}

}  // namespace
}  // namespace schema_internal
}  // namespace tessera
