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

}  // namespace tessera
