#include "core/base/process.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace tessera {
namespace {

TEST_CASE("the peak resident size grows with memory the process touches and never shrinks") {
  const std::optional<int64_t> peak_before = PeakResidentBytes();
  REQUIRE(peak_before.has_value());
  CHECK(*peak_before > 0);
  // The peak may lie above what is resident now (earlier tests of this process freed memory):
  // touching 64 MiB raises it to at least what is resident now plus that.
  const std::optional<int64_t> resident_before = ResidentBytes();
  REQUIRE(resident_before.has_value());
  {
    std::vector<char> block(size_t{64} << 20);
    std::memset(block.data(), 1, block.size());  // touched: resident
    CHECK(block[12345] == 1);
  }
  const std::optional<int64_t> after = PeakResidentBytes();
  REQUIRE(after.has_value());
  CHECK(*after >= *resident_before + (int64_t{60} << 20));  // freed since, but the peak stays
  CHECK(*after >= *peak_before);                            // and never falls
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

// glibc's malloc only: AddressSanitizer replaces it with an allocator of its own.
#if defined(__GLIBC__) && !defined(__SANITIZE_ADDRESS__)
TEST_CASE(
    "under the tensor malloc policy, blocks under 32 MiB come from the arena and stay there") {
  // The policy leaves malloc alone when the environment sets it.
  unsetenv("GLIBC_TUNABLES");
  unsetenv("MALLOC_ARENA_MAX");
  UseTensorMallocPolicy(MallocArenas::kPerThread);
  const size_t mappings = mallinfo2().hblks;
  // 8 MiB, a few steps' tensors: no mapping of its own (glibc's default makes one).
  void* tensor = std::malloc(size_t{8} << 20);
  REQUIRE(tensor != nullptr);
  std::memset(tensor, 1, size_t{8} << 20);
  CHECK(mallinfo2().hblks == mappings);
  std::free(tensor);
  // Freed, it stays in the arena for the next step instead of being trimmed.
  CHECK(mallinfo2().fordblks >= (size_t{8} << 20));
  // 40 MiB, a shard's block: a mapping of its own, returned on free.
  void* block = std::calloc(size_t{10} << 20, sizeof(float));
  REQUIRE(block != nullptr);
  CHECK(mallinfo2().hblks == mappings + 1);
  std::free(block);
  CHECK(mallinfo2().hblks == mappings);
}
#endif

}  // namespace
}  // namespace tessera
