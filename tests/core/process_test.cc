#include "core/process.h"

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

namespace tessera {
namespace {

TEST_CASE("the peak resident size grows with memory the process touches and never shrinks") {
  const std::optional<int64_t> before = PeakResidentBytes();
  REQUIRE(before.has_value());
  CHECK(*before > 0);
  {
    std::vector<char> block(size_t{64} << 20);
    std::memset(block.data(), 1, block.size());  // touched: resident
    CHECK(block[12345] == 1);
  }
  const std::optional<int64_t> after = PeakResidentBytes();
  REQUIRE(after.has_value());
  CHECK(*after >= *before + (int64_t{60} << 20));  // freed since, but the peak stays
}

TEST_CASE("the resident size follows memory touched and freed") {
  const std::optional<int64_t> before = ResidentBytes();
  REQUIRE(before.has_value());
  CHECK(*before > 0);
  std::vector<char> block(size_t{64} << 20);
  std::memset(block.data(), 1, block.size());
  const std::optional<int64_t> during = ResidentBytes();
  REQUIRE(during.has_value());
  CHECK(*during >= *before + (int64_t{60} << 20));
  CHECK(*during <= *PeakResidentBytes());
  CHECK(block[777] == 1);
}

TEST_CASE("a process has been running for a little while, not for negative or absurd times") {
  const std::optional<double> seconds = SecondsSinceProcessStart();
  REQUIRE(seconds.has_value());
  CHECK(*seconds >= 0);
  CHECK(*seconds < 3600);  // a test binary started within the hour
}

}  // namespace
}  // namespace tessera
