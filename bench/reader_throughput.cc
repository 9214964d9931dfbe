// reader_throughput: how fast DelimitedTextSource (tessera/delimited_text.h) indexes and reads a
// Criteo-layout file, plain and gzip. Writes a synthetic file of --lines lines (label, 13 counts
// with some missing, 26 hex categorical values with some missing: the shape of Criteo's lines,
// not its statistics), then measures, single-threaded:
//   index    Open without a sidecar: the scan that parses every line and builds the index
//   load     Open with the sidecar the scan wrote
//   read     Read of contiguous --batch-row batches in file order, the whole file
//   shuffled the batches of a shuffled BatchStream (contiguous batches in a random order: gzip
//            restarts from an access point for each)
// as the median of --rounds. The last line is JSON.
//
//   reader_throughput --lines=1000000 --rounds=3
#include <stdlib.h>
#include <time.h>
#include <zlib.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "core/base/hash.h"
#include "tessera/data.h"
#include "tessera/delimited_text.h"
#include "tessera/status.h"

ABSL_FLAG(int64_t, lines, 1000000, "lines in the generated file");
ABSL_FLAG(int32_t, rounds, 3, "rounds of each measurement (the median is reported)");
ABSL_FLAG(int64_t, batch_rows, 4096, "rows per read");
ABSL_FLAG(std::string, dir, "", "where to write the files (default: a new directory in $TMPDIR)");

namespace tessera {
namespace {

using bench::Median;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// This thread's CPU time: on a shared machine, the figure per core that wall time hides.
double CpuNow() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// Line i: label, 13 small counts (about 1 in 5 missing), 26 categorical values of 8 hex digits
// drawn from a few thousand per column (about 1 in 8 missing).
std::string SyntheticCriteoLine(int64_t i) {
  uint64_t state = Mix64(static_cast<uint64_t>(i) + 1);
  auto next = [&] { return state = Mix64(state + 0x9e3779b97f4a7c15ULL); };
  std::string line = (next() % 4 == 0) ? "1" : "0";
  for (int k = 0; k < 13; ++k) {
    const uint64_t r = next();
    line += '\t';
    if (r % 5 != 0) absl::StrAppend(&line, (r >> 8) % (k == 1 ? 2000 : 60));
  }
  for (int k = 0; k < 26; ++k) {
    const uint64_t r = next();
    line += '\t';
    if (r % 8 != 0) {
      absl::StrAppend(&line, absl::StrFormat("%08x", Mix64(k * 100003 + (r >> 8) % 5000) >> 32));
    }
  }
  line += '\n';
  return line;
}

absl::Status WriteFiles(const std::string& plain, const std::string& gzip, int64_t lines) {
  std::ofstream out(plain, std::ios::binary | std::ios::trunc);
  gzFile gz = gzopen(gzip.c_str(), "wb6");
  if (gz == nullptr) return absl::UnavailableError(absl::StrCat("cannot create ", gzip));
  std::string chunk;
  for (int64_t i = 0; i < lines; ++i) {
    chunk += SyntheticCriteoLine(i);
    if (chunk.size() > (1 << 20) || i + 1 == lines) {
      out << chunk;
      if (gzwrite(gz, chunk.data(), static_cast<unsigned>(chunk.size())) !=
          static_cast<int>(chunk.size())) {
        gzclose(gz);
        return absl::UnavailableError(absl::StrCat("cannot write ", gzip));
      }
      chunk.clear();
    }
  }
  if (gzclose(gz) != Z_OK || !out.good()) {
    return absl::UnavailableError(absl::StrCat("cannot write ", plain, " or ", gzip));
  }
  return absl::OkStatus();
}

struct Figures {
  double index_lines_per_s = 0, load_s = 0, read_lines_per_s = 0, shuffled_lines_per_s = 0;
  // The same per second of this thread's CPU time.
  double index_lines_per_cpu_s = 0, read_lines_per_cpu_s = 0;
  uint64_t bytes = 0;
};

absl::StatusOr<Figures> Measure(const std::string& path, const char* name) {
  const int64_t batch_rows = absl::GetFlag(FLAGS_batch_rows);
  std::vector<double> index_s, load_s, read_s, shuffled_s, index_cpu_s, read_cpu_s;
  int64_t rows = 0;
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    std::filesystem::remove(path + ".tsidx");
    double start = Now(), cpu_start = CpuNow();
    TESSERA_ASSIGN_OR_RETURN(auto built, DelimitedTextSource::Open({path}, CriteoFormat()));
    index_s.push_back(Now() - start);
    index_cpu_s.push_back(CpuNow() - cpu_start);
    start = Now();
    TESSERA_ASSIGN_OR_RETURN(auto source, DelimitedTextSource::Open({path}, CriteoFormat()));
    load_s.push_back(Now() - start);
    if (!source->index_loaded(0)) return absl::InternalError("the sidecar was not loaded");
    rows = source->size();

    TESSERA_ASSIGN_OR_RETURN(Dataset data, Dataset::FromSource(source));
    start = Now();
    cpu_start = CpuNow();
    double checksum = 0;
    for (int64_t begin = 0; begin < rows; begin += batch_rows) {
      TESSERA_ASSIGN_OR_RETURN(Batch batch, data.Slice(begin, std::min(batch_rows, rows - begin)));
      checksum += batch.labels.values()[0];
    }
    read_s.push_back(Now() - start);
    read_cpu_s.push_back(CpuNow() - cpu_start);
    TESSERA_ASSIGN_OR_RETURN(BatchStream stream,
                             BatchStream::Create(data, batch_rows, true, r + 1));
    start = Now();
    for (int64_t i = 0; i < stream.batches_per_epoch(); ++i) {
      TESSERA_ASSIGN_OR_RETURN(Batch batch, stream.Get(i));
      checksum += batch.labels.values()[0];
    }
    shuffled_s.push_back(Now() - start);
    std::printf(
        "%s round %d: index %.2f s (cpu %.2f s), load %.3f s, read %.2f s (cpu %.2f s), "
        "shuffled %.2f s (%g)\n",
        name, r, index_s.back(), index_cpu_s.back(), load_s.back(), read_s.back(),
        read_cpu_s.back(), shuffled_s.back(), checksum);
  }
  Figures f;
  f.index_lines_per_s = rows / Median(index_s);
  f.load_s = Median(load_s);
  f.read_lines_per_s = rows / Median(read_s);
  f.shuffled_lines_per_s = rows / Median(shuffled_s);
  f.index_lines_per_cpu_s = rows / Median(index_cpu_s);
  f.read_lines_per_cpu_s = rows / Median(read_cpu_s);
  f.bytes = std::filesystem::file_size(path);
  std::printf(
      "%s: %lld lines, %.1f MB: index %.2fM lines/s (%.2fM per cpu s), load %.3f s, "
      "read %.2fM lines/s (%.2fM per cpu s), shuffled batches %.2fM lines/s\n",
      name, static_cast<long long>(rows), f.bytes / 1e6, f.index_lines_per_s / 1e6,
      f.index_lines_per_cpu_s / 1e6, f.load_s, f.read_lines_per_s / 1e6,
      f.read_lines_per_cpu_s / 1e6, f.shuffled_lines_per_s / 1e6);
  return f;
}

std::string Json(const Figures& f) {
  return absl::StrFormat(
      "{\"file_bytes\":%d,\"index_lines_per_s\":%.0f,\"index_lines_per_cpu_s\":%.0f,"
      "\"load_s\":%.4f,\"read_lines_per_s\":%.0f,\"read_lines_per_cpu_s\":%.0f,"
      "\"shuffled_read_lines_per_s\":%.0f}",
      f.bytes, f.index_lines_per_s, f.index_lines_per_cpu_s, f.load_s, f.read_lines_per_s,
      f.read_lines_per_cpu_s, f.shuffled_lines_per_s);
}

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  const int64_t lines = absl::GetFlag(FLAGS_lines);
  std::string dir = absl::GetFlag(FLAGS_dir);
  const bool own_dir = dir.empty();
  if (own_dir) {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr ? tmp : "/tmp") + "/reader_throughput_XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) return absl::UnavailableError("mkdtemp failed");
    dir = pattern;
  }
  const std::string plain = dir + "/criteo.tsv", gzip = dir + "/criteo.tsv.gz";
  double start = Now();
  TESSERA_RETURN_IF_ERROR(WriteFiles(plain, gzip, lines));
  std::printf("wrote %lld lines in %.1f s\n", static_cast<long long>(lines), Now() - start);
  absl::StatusOr<Figures> plain_figures = Measure(plain, "plain");
  absl::StatusOr<Figures> gzip_figures =
      plain_figures.ok() ? Measure(gzip, "gzip") : plain_figures.status();
  if (own_dir) std::filesystem::remove_all(dir);
  TESSERA_RETURN_IF_ERROR(gzip_figures.status());
  std::printf(
      "{\"bench\":\"reader_throughput\",\"lines\":%lld,\"batch_rows\":%lld,"
      "\"plain\":%s,\"gzip\":%s}\n",
      static_cast<long long>(lines), static_cast<long long>(absl::GetFlag(FLAGS_batch_rows)),
      Json(*plain_figures).c_str(), Json(*gzip_figures).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::bench::Main("reader_throughput", argc, argv, tessera::Run);
}
