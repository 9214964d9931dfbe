#include "schema/base/internal/crc32c.h"

#include <cstddef>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define TESSERA_CRC32C_X86 1
#endif

namespace tessera {
namespace schema_internal {
namespace {

// The reflected CRC-32C polynomial.
constexpr uint32_t kPoly = 0x82f63b78u;

// Note [Three-way CRC-32C]
// The crc32 instruction has a latency of 3 cycles and a throughput of 1 per cycle, so one
// dependent chain of them runs at a third of the possible speed. The hardware path computes
// three CRCs at once over three consecutive blocks of kLong bytes and joins them: a CRC is
// linear, so crc(A || B) = shift(crc(A), |B|) ^ crc0(B), where crc0 starts from zero and
// shift(c, n) is c times x^(8n) modulo the polynomial, a 32x32 bit matrix over GF(2) applied
// byte by byte through four 256-entry tables (Mark Adler's construction, as in crc32c.c).
constexpr size_t kLong = 8192;
constexpr size_t kShort = 256;

uint32_t Gf2MatrixTimes(const uint32_t* mat, uint32_t vec) {
  uint32_t sum = 0;
  for (; vec != 0; vec >>= 1, ++mat) {
    if (vec & 1) sum ^= *mat;
  }
  return sum;
}

void Gf2MatrixSquare(uint32_t* square, const uint32_t* mat) {
  for (int n = 0; n < 32; ++n) square[n] = Gf2MatrixTimes(mat, mat[n]);
}

struct Tables {
  uint32_t slicing[8][256];  // slicing-by-8 for the portable path
  uint32_t shift_long[4][256];
  uint32_t shift_short[4][256];

  Tables() {
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t crc = n;
      for (int k = 0; k < 8; ++k) crc = (crc & 1) ? (crc >> 1) ^ kPoly : crc >> 1;
      slicing[0][n] = crc;
    }
    for (uint32_t n = 0; n < 256; ++n) {
      uint32_t crc = slicing[0][n];
      for (int k = 1; k < 8; ++k) {
        crc = slicing[0][crc & 0xff] ^ (crc >> 8);
        slicing[k][n] = crc;
      }
    }
    BuildShift(shift_long, kLong);
    BuildShift(shift_short, kShort);
  }

  // The operator appending `len` zero bytes (a power of two) to a CRC, as byte tables.
  static void BuildShift(uint32_t table[4][256], size_t len) {
    uint32_t odd[32], even[32];
    odd[0] = kPoly;  // one zero bit
    for (int n = 1; n < 32; ++n) odd[n] = uint32_t{1} << (n - 1);
    Gf2MatrixSquare(even, odd);  // two zero bits
    Gf2MatrixSquare(odd, even);  // four zero bits
    const uint32_t* op = nullptr;
    // Each square doubles the count: the first gives one zero byte.
    for (;;) {
      Gf2MatrixSquare(even, odd);
      len >>= 1;
      if (len == 0) {
        op = even;
        break;
      }
      Gf2MatrixSquare(odd, even);
      len >>= 1;
      if (len == 0) {
        op = odd;
        break;
      }
    }
    for (uint32_t n = 0; n < 256; ++n) {
      for (int k = 0; k < 4; ++k) table[k][n] = Gf2MatrixTimes(op, n << (8 * k));
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;  // thread-safe initialization
  return tables;
}

uint64_t Load64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// On the raw (not inverted) register.
uint32_t PortableRaw(uint32_t crc, const unsigned char* p, size_t n) {
  const Tables& t = GetTables();
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc = t.slicing[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
    --n;
  }
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t v = Load64(p) ^ crc;  // little-endian (schema/ assumes it)
    crc = t.slicing[7][v & 0xff] ^ t.slicing[6][(v >> 8) & 0xff] ^
          t.slicing[5][(v >> 16) & 0xff] ^ t.slicing[4][(v >> 24) & 0xff] ^
          t.slicing[3][(v >> 32) & 0xff] ^ t.slicing[2][(v >> 40) & 0xff] ^
          t.slicing[1][(v >> 48) & 0xff] ^ t.slicing[0][v >> 56];
  }
  while (n-- > 0) crc = t.slicing[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return crc;
}

#ifdef TESSERA_CRC32C_X86
uint32_t Shift(const uint32_t table[4][256], uint32_t crc) {
  return table[0][crc & 0xff] ^ table[1][(crc >> 8) & 0xff] ^ table[2][(crc >> 16) & 0xff] ^
         table[3][crc >> 24];
}

// Three streams of `block` bytes each while at least 3 * block bytes remain (Note [Three-way
// CRC-32C]).
__attribute__((target("sse4.2"))) uint64_t ThreeWay(uint64_t crc0, const unsigned char*& p,
                                                    size_t& n, size_t block,
                                                    const uint32_t shift[4][256]) {
  while (n >= 3 * block) {
    uint64_t crc1 = 0, crc2 = 0;
    const unsigned char* end = p + block;
    do {
      crc0 = _mm_crc32_u64(crc0, Load64(p));
      crc1 = _mm_crc32_u64(crc1, Load64(p + block));
      crc2 = _mm_crc32_u64(crc2, Load64(p + 2 * block));
      p += 8;
    } while (p < end);
    crc0 = Shift(shift, static_cast<uint32_t>(crc0)) ^ crc1;
    crc0 = Shift(shift, static_cast<uint32_t>(crc0)) ^ crc2;
    p += 2 * block;
    n -= 3 * block;
  }
  return crc0;
}

__attribute__((target("sse4.2"))) uint32_t HardwareRaw(uint32_t crc, const unsigned char* p,
                                                       size_t n) {
  const Tables& t = GetTables();
  uint64_t crc0 = crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    crc0 = _mm_crc32_u8(static_cast<uint32_t>(crc0), *p++);
    --n;
  }
  crc0 = ThreeWay(crc0, p, n, kLong, t.shift_long);
  crc0 = ThreeWay(crc0, p, n, kShort, t.shift_short);
  for (; n >= 8; n -= 8, p += 8) crc0 = _mm_crc32_u64(crc0, Load64(p));
  while (n-- > 0) crc0 = _mm_crc32_u8(static_cast<uint32_t>(crc0), *p++);
  return static_cast<uint32_t>(crc0);
}

bool HasSse42() {
  static const bool has = __builtin_cpu_supports("sse4.2");
  return has;
}
#endif

}  // namespace

uint32_t Crc32c(absl::string_view bytes, uint32_t crc) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
#ifdef TESSERA_CRC32C_X86
  if (HasSse42()) return ~HardwareRaw(~crc, p, bytes.size());
#endif
  return ~PortableRaw(~crc, p, bytes.size());
}

uint32_t Crc32cPortable(absl::string_view bytes, uint32_t crc) {
  return ~PortableRaw(~crc, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

}  // namespace schema_internal
}  // namespace tessera
