// What every bench program shares: the median of interleaved rounds, and a main that parses the
// flags, runs the benchmark and reports its error.
//
// Thread-safety: call from the program's main thread.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "absl/flags/parse.h"
#include "absl/status/status.h"

namespace tessera::bench {

// The median of `v` (the mean of the two middle values for an even count). Precondition: v is
// not empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The value below which a fraction `q` of the sorted `v` lies (nearest rank). Precondition: v is
// sorted and not empty.
inline double Quantile(const std::vector<double>& v, double q) {
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

// Parses the command line, runs `run(argc, argv)` and turns its error into "NAME: message" on
// stderr and exit status 1.
template <class Run>
int Main(const char* name, int argc, char** argv, Run run) {
  absl::ParseCommandLine(argc, argv);
  if (absl::Status status = run(argc, argv); !status.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace tessera::bench
