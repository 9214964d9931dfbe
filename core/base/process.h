// What a process reports about itself: how long it has been running and the most memory it has
// held, read from Linux's /proc/self. The training summary records both (startup_seconds,
// peak_rss_bytes), a networked worker prints its peak when it finishes, and the benchmarks and
// end-to-end tests hold them to the figures docs/design.md promises.
//
// Thread-safety: pure reads of /proc; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>

namespace tessera {

// Seconds since the kernel started this process (10 ms resolution); nullopt when /proc cannot
// say.
std::optional<double> SecondsSinceProcessStart();

// The peak resident set size (VmHWM) in bytes; nullopt when /proc cannot say.
std::optional<int64_t> PeakResidentBytes();

// The resident set size now, in bytes (process_resident_memory_bytes of the metrics pages);
// nullopt when /proc cannot say.
std::optional<int64_t> ResidentBytes();

// Backs the pages of `count` floats at `data` now, in one call, as if each were written (Linux's
// MADV_POPULATE_WRITE): for a block about to be written whole by a read(2), faulting its pages in
// one by one inside the kernel's copy costs more. Advice only: where it is not supported nothing
// happens, and the pages are faulted in as they are written.
void PopulateForWrite(float* data, int64_t count);

// How many malloc arenas a process keeps (Note [Tensors and malloc's thresholds] in the .cc).
enum class MallocArenas {
  // One for every thread: the least memory, for threads that compute far more than they
  // allocate (the training drivers: coordinator, workers, the simulation).
  kOne,
  // glibc's own, up to eight per core: for many threads allocating at once (`tessera serve`).
  kPerThread,
};

// Sets glibc malloc's policy for a process whose work allocates and frees tensors of a few MiB
// (Note [Tensors and malloc's thresholds] in the .cc): blocks from 32 MiB up get pages of their
// own (untouched pages cost nothing), smaller ones are kept and reused, an arena returns its free
// top to the system only past 64 MiB, and the process keeps `arenas`. Leaves malloc alone when
// GLIBC_TUNABLES or MALLOC_ARENA_MAX is set. Call once at the start of main, before other
// threads: RunProgram (the training drivers) asks for one arena, the `tessera` command for
// glibc's. Does nothing without glibc.
void UseTensorMallocPolicy(MallocArenas arenas);

}  // namespace tessera
