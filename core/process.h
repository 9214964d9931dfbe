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

}  // namespace tessera
