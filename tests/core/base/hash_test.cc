#include "core/base/hash.h"

#include <doctest/doctest.h>

#include <limits>
#include <set>
#include <string>

namespace tessera {
namespace {

TEST_CASE("hash: StringId is FNV-1a 64 of the bytes") {
  // The published FNV-1a 64 test vectors: the empty string is the offset basis.
  CHECK(static_cast<uint64_t>(StringId("")) == 0xcbf29ce484222325ULL);
  CHECK(static_cast<uint64_t>(StringId("a")) == 0xaf63dc4c8601ec8cULL);
  CHECK(static_cast<uint64_t>(StringId("foobar")) == 0x85944171f73967e8ULL);
  // Every byte counts, including bytes above 0x7f and embedded NULs.
  CHECK(StringId(std::string("a\0b", 3)) != StringId("ab"));
  CHECK(StringId("\xff") != StringId("\x7f"));
}

TEST_CASE("hash: Mix64 is the SplitMix64 finalizer") {
  CHECK(Mix64(0) == 0);
  // SplitMix64's first output for seed 0 is Mix64(0x9e3779b97f4a7c15).
  CHECK(Mix64(0x9e3779b97f4a7c15ULL) == 0xe220a8397b1dcdafULL);
}

TEST_CASE("hash: HashBucket is in range, stable and spreads consecutive ids") {
  std::set<int64_t> buckets;
  for (int64_t id = -1000; id < 1000; ++id) {
    const int64_t b = HashBucket(id, 100);
    CHECK(b >= 0);
    CHECK(b < 100);
    buckets.insert(b);
  }
  CHECK(buckets.size() == 100);  // 2000 consecutive ids reach every bucket of 100
  CHECK(HashBucket(StringId("68fd1e64"), 1) == 0);
  CHECK(HashBucket(42, 100000) == HashBucket(42, 100000));
  CHECK(HashBucket(std::numeric_limits<int64_t>::min(), 7) >= 0);
}

}  // namespace
}  // namespace tessera
