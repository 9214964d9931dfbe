// Stable hashing of categorical values into a fixed number of buckets, so that raw strings or
// large integer ids can feed an embedding table of a chosen size. The functions are part of the
// file formats and the serving API: an exported model hashes its inputs exactly as training did,
// on every machine, forever. Never change them.
//
//   - StringId(bytes): a categorical string's id, FNV-1a 64 over its bytes (as an int64's bits).
//     A data reader turns each categorical field into StringId(field); a serving request may
//     give the string itself for a hashed input.
//   - HashBucket(id, buckets): the SplitMix64 finalizer of the id's 64 bits, modulo `buckets`:
//     the table row of a raw id (an integer id or a StringId).
//
// Example: the bucket of Criteo's categorical value "68fd1e64" in a table of 100000 rows:
//   int64_t row = HashBucket(StringId("68fd1e64"), 100000);
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "absl/strings/string_view.h"

namespace tessera {

inline int64_t StringId(absl::string_view bytes) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a 64 offset basis
  for (const char c : bytes) {
    h ^= static_cast<uint8_t>(c);
    h *= 0x100000001b3ULL;  // FNV-1a 64 prime
  }
  return static_cast<int64_t>(h);
}

// The SplitMix64 finalizer (Steele, Lea, Flood 2014): a bijection of 64-bit values whose every
// output bit depends on every input bit.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Precondition: buckets >= 1.
inline int64_t HashBucket(int64_t id, int64_t buckets) {
  return static_cast<int64_t>(Mix64(static_cast<uint64_t>(id)) % static_cast<uint64_t>(buckets));
}

}  // namespace tessera
