#include "core/base/process.h"

#include <sys/mman.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace tessera {

std::optional<double> SecondsSinceProcessStart() {
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (!std::getline(stat, line)) return std::nullopt;
  // Field 2 (the command) may hold spaces and parentheses: count fields after its last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  for (int k = 3; k <= 22 && fields >> field; ++k) {
  }
  // `field` is now field 22: the start time in clock ticks after boot.
  double start_ticks = 0;
  double uptime = 0;
  std::ifstream uptime_file("/proc/uptime");
  const long ticks_per_second = sysconf(_SC_CLK_TCK);
  try {
    start_ticks = std::stod(field);
  } catch (...) {
    return std::nullopt;
  }
  if (!(uptime_file >> uptime) || ticks_per_second <= 0) return std::nullopt;
  const double seconds = uptime - start_ticks / static_cast<double>(ticks_per_second);
  return seconds < 0 ? 0 : seconds;
}

std::optional<int64_t> PeakResidentBytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) != 0) continue;
    std::istringstream in(line.substr(6));
    int64_t kib = 0;
    if (in >> kib) return kib * 1024;
    return std::nullopt;
  }
  return std::nullopt;
}

std::optional<int64_t> ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  int64_t resident = 0;
  if (!(statm >> pages >> resident)) return std::nullopt;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

void PopulateForWrite(float* data, int64_t count) {
#ifdef MADV_POPULATE_WRITE
  constexpr uintptr_t kPage = 4096;
  if (data == nullptr || count <= 0) return;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(data) & ~(kPage - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(data + count);
  madvise(reinterpret_cast<void*>(begin), end - begin, MADV_POPULATE_WRITE);
#else
  (void)data;
  (void)count;
#endif
}

// Note [Tensors and malloc's thresholds]
// glibc serves a request of at least M_MMAP_THRESHOLD (128 KiB at first) with pages of its own
// and unmaps them on free; after such a free it raises the threshold to that size and the trim
// threshold to twice it, and an arena whose free top exceeds the trim threshold gives it back.
// A training step allocates and frees tensors of a few MiB (a [512, 2000] concat is 4 MiB; gather
// replies, gradients and their splits are 0.5-2 MiB), so with the defaults some of every step's
// tensors were new mappings, or an arena's top was trimmed (madvise) and grown again: their pages
// faulted in and were zeroed by the kernel again every step. Fixed thresholds end that: under
// 32 MiB (the largest glibc accepts) a block comes from an arena and returns to it, and an arena
// keeps up to 64 MiB of free top for the next step. Blocks of 32 MiB and more (a shard's values
// and slots) are still mappings of their own, so a calloc'd shard's untouched rows cost no memory
// (Note [Rows initialized on first touch], core/ps/first_touch.h).
//
// Kept tensors make each arena as large as the most its threads ever held at once, and glibc
// gives up to eight arenas per core, one per thread as threads first allocate: on a networked
// worker at the RFC's scale each arena added ~12 MiB to the peak (4 arenas: 109-119 MiB, 2:
// 98-102, 1: 87-91). A training driver's threads compute far more than they allocate (a few
// blocks per message, each used for microseconds of arithmetic or more), and glibc's per-thread
// cache takes the small allocations without the arena's lock: one arena, and the simulation's
// and the networked run's throughput did not move on two cores (bench/README.md, *scale*). A
// server's threads are the other way round: `tessera serve` answering 100-instance predicts
// from 8 clients fell from ~8.4k to ~5.1k requests/s with one arena, as its handler threads
// queued on the arena's lock. So the caller says which it is. Measured on the RFC-scale recsys
// (one arena): ~1.14x the examples/s of glibc's defaults in the simulation.
//
// A process started with MALLOC_ARENA_MAX or GLIBC_TUNABLES set keeps what they say: the policy
// is then the operator's.
void UseTensorMallocPolicy(MallocArenas arenas) {
#ifdef __GLIBC__
  if (std::getenv("GLIBC_TUNABLES") != nullptr || std::getenv("MALLOC_ARENA_MAX") != nullptr) {
    return;
  }
  constexpr int kMiB = 1 << 20;
  mallopt(M_MMAP_THRESHOLD, 32 * kMiB);
  mallopt(M_TRIM_THRESHOLD, 64 * kMiB);
  if (arenas == MallocArenas::kOne) mallopt(M_ARENA_MAX, 1);
#else
  (void)arenas;
#endif
}

}  // namespace tessera
