#include "core/process.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

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

}  // namespace tessera
