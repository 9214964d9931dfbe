// Every reader against damaged bytes: truncations, random byte flips, and forged Cap'n Proto
// pointers and segment tables. The contract: never a crash, an exception or a huge allocation;
// a damaged file either fails with a Status or reads back exactly what was written.
#include <doctest/doctest.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tests/schema/schema_test_util.h"

namespace tessera {
namespace {

using namespace schema_test;  // NOLINT: the test helpers

// One reader under test: decodes bytes and encodes the result again, so that "decodes to exactly
// the original" is "re-encodes to the original's bytes" (encoding is deterministic).
struct Reader {
  std::string name;
  FileKind kind;
  std::string bytes;  // a valid encoding
  std::function<absl::StatusOr<std::string>(const std::string&)> reencode;
};

template <typename Decoded>
std::function<absl::StatusOr<std::string>(const std::string&)> Reencoder(
    absl::StatusOr<Decoded> (*decode)(const std::string&),
    absl::StatusOr<std::string> (*encode)(const Decoded&)) {
  return [decode, encode](const std::string& bytes) -> absl::StatusOr<std::string> {
    absl::StatusOr<Decoded> decoded = decode(bytes);
    if (!decoded.ok()) return decoded.status();
    return encode(*decoded);
  };
}

std::vector<Reader> Readers() {
  return {
      {"manifest", FileKind::kManifest, Must(EncodeManifest(SampleManifest())),
       Reencoder<CheckpointManifest>(&DecodeManifest, &EncodeManifest)},
      {"slice", FileKind::kSlice, Must(EncodeSlice(SampleSlice(Shape{13, 3}, 4, 5, true))),
       Reencoder<TensorSlice>(&DecodeSlice, &EncodeSlice)},
      {"model", FileKind::kModel, Must(EncodeExportedModel(SmallRecsysModel())),
       Reencoder<ExportedModel>(&DecodeExportedModel, &EncodeExportedModel)},
  };
}

// `bytes` with `count` random bytes xor-ed with random non-zero values.
std::string Flip(std::string bytes, int count, std::mt19937_64& rng) {
  std::uniform_int_distribution<size_t> position(0, bytes.size() - 1);
  std::uniform_int_distribution<int> mask(1, 255);
  for (int i = 0; i < count; ++i) bytes[position(rng)] ^= static_cast<char>(mask(rng));
  return bytes;
}

TEST_CASE("every truncation of a file is an error") {
  for (const Reader& r : Readers()) {
    CAPTURE(r.name);
    CHECK(Must(r.reencode(r.bytes)) == r.bytes);
    int accepted = 0;
    for (size_t n = 0; n < r.bytes.size(); ++n) {
      if (r.reencode(r.bytes.substr(0, n)).ok()) ++accepted;
    }
    CHECK(accepted == 0);
    CHECK(!r.reencode(r.bytes + std::string(8, '\0')).ok());
    CHECK(!r.reencode(std::string()).ok());
  }
}

TEST_CASE("random byte flips are errors or read back exactly the original") {
  std::mt19937_64 rng(20240601);
  for (const Reader& r : Readers()) {
    CAPTURE(r.name);
    int accepted = 0;
    for (int trial = 0; trial < 3000; ++trial) {
      const int count = trial < 2000 ? 1 : 2 + trial % 7;
      const absl::StatusOr<std::string> again = r.reencode(Flip(r.bytes, count, rng));
      if (!again.ok()) continue;
      ++accepted;
      CHECK(*again == r.bytes);
    }
    CHECK(accepted == 0);  // the envelope's checksum covers every byte
  }
}

// With the envelope resealed over the damage, the flips reach the Cap'n Proto parser and the
// field decoders. Whatever they produce must be a Status or a value that encodes and decodes
// consistently.
TEST_CASE("flips behind a valid envelope checksum never crash and decode consistently") {
  std::mt19937_64 rng(7);
  for (const Reader& r : Readers()) {
    CAPTURE(r.name);
    const std::string body = BodyOf(r.bytes);
    for (int trial = 0; trial < 3000; ++trial) {
      const int count = trial < 2000 ? 1 : 2 + trial % 7;
      const absl::StatusOr<std::string> again =
          r.reencode(Reseal(r.kind, Flip(body, count, rng), TailBytesOf(r.bytes)));
      if (!again.ok()) continue;
      CHECK(Must(r.reencode(*again)) == *again);
    }
  }
}

TEST_CASE("forged pointer counts and segment tables are errors") {
  for (const Reader& r : Readers()) {
    CAPTURE(r.name);
    const std::string body = BodyOf(r.bytes);
    // Segment table: count - 1 (uint32), then the first segment's size in words (uint32).
    // (Cap'n Proto reads a count - 1 of 0xffffffff as one segment: the same message.)
    for (const auto& [at, value] : std::vector<std::pair<size_t, uint32_t>>{
             {0, 0xffffffffu}, {0, 600}, {0, 1}, {4, 0xffffffffu}, {4, 0x1fffffffu}, {4, 0}}) {
      std::string forged = body;
      std::memcpy(forged.data() + at, &value, 4);
      CAPTURE(at);
      CAPTURE(value);
      const absl::StatusOr<std::string> again =
          r.reencode(Reseal(r.kind, forged, TailBytesOf(r.bytes)));
      CHECK((!again.ok() || *again == r.bytes));
    }
    // Every list pointer gets the largest element count (2^29 - 1), far past the message's end.
    // A list pointer has tag 01 in its low bits, an element size or count in its upper half, and
    // in these small messages an offset and a count below 2^14 (bytes 2, 3, 6 and 7 zero). That
    // excludes the text, float and integer words seen here, whose change could be a legitimate
    // new value (or unused padding) rather than an error.
    int lists = 0, rejected = 0;
    for (size_t at = 8; at + 8 <= body.size(); at += 8) {
      uint64_t word = 0;
      std::memcpy(&word, body.data() + at, 8);
      if ((word & 3) != 1 || (word >> 32) == 0 || (word & 0xffff0000ffff0000u) != 0) continue;
      ++lists;
      word |= uint64_t{0x1fffffff} << 35;
      std::string forged = body;
      std::memcpy(forged.data() + at, &word, 8);
      const absl::StatusOr<std::string> again =
          r.reencode(Reseal(r.kind, forged, TailBytesOf(r.bytes)));
      if (!again.ok()) {
        ++rejected;
        continue;
      }
      CHECK(Must(r.reencode(*again)) == *again);
    }
    CHECK(lists > 3);
    CHECK(rejected == lists);
  }
}

}  // namespace
}  // namespace tessera
