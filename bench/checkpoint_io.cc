// checkpoint_io: checkpoint save and restore throughput against plain sequential file I/O of the
// same bytes, in one run.
//
//   checkpoint_io                      # a 1 GiB variable in 4 shards on 2 PS, 3 rounds
//   checkpoint_io --rows=1048576 --dir=/path/on/another/disk
//
// Save = SaveCheckpoint (every shard encodes and writes its slice file, fsync'd, in parallel;
// then the manifest). Baseline write = one thread writing the same number of bytes to one file
// with write(2) in 8 MiB chunks, then fsync. Restore = RestoreCheckpoint into a fresh strategy
// (every shard reads and decodes the slice files it overlaps, checksums verified); baseline
// read = one thread reading the baseline file back with read(2) in 8 MiB chunks into freshly
// allocated memory holding all the bytes (what a plain loader does: a restore too must end with
// the whole variable in new memory). The earlier baseline, reading into the same already-touched
// 1 GiB buffer every round (no page faults), is reported too, as `plain_read_prefaulted`. Reads
// come from the page cache when it holds the files (as it does right after writing on this
// machine). Per mode the figure is the median round; the last line is one JSON object with both
// sides and `save_ratio`, `restore_ratio` (targets >= 0.5; against the fresh-memory read).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "cluster/cluster.h"
#include "coordinator/checkpoint.h"
#include "coordinator/strategy.h"
#include "core/status.h"

ABSL_FLAG(int64_t, rows, 4194304, "rows of the variable (x 64 floats: 4M rows = 1 GiB)");
ABSL_FLAG(int64_t, shards, 4, "shards of the variable");
ABSL_FLAG(int32_t, ps, 2, "parameter-server tasks");
ABSL_FLAG(int32_t, rounds, 3, "rounds of (baseline, checkpoint)");
ABSL_FLAG(std::string, dir, "", "scratch directory (default: a fresh one under /tmp)");

namespace tessera {
namespace {

using bench::Median;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

absl::StatusOr<double> PlainWrite(const std::string& path, const std::vector<char>& bytes) {
  const Clock::time_point start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  constexpr size_t kChunk = 8 << 20;
  for (size_t done = 0; done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, std::min(kChunk, bytes.size() - done));
    if (n <= 0) {
      ::close(fd);
      return absl::UnavailableError("write failed");
    }
    done += static_cast<size_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  return Seconds(start);
}

// Reads `size` bytes of `path` into `into`, or, when it is null, into memory allocated (and not
// initialized) for them inside the timing, as a plain loader does; freed after the timing.
absl::StatusOr<double> PlainRead(const std::string& path, size_t size, char* into) {
  const Clock::time_point start = Clock::now();
  std::unique_ptr<char[]> fresh;
  if (into == nullptr) {
    fresh.reset(new char[size]);
    into = fresh.get();
  }
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  constexpr size_t kChunk = 8 << 20;
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::read(fd, into + done, std::min(kChunk, size - done));
    if (n <= 0) {
      ::close(fd);
      return absl::UnavailableError("short read");
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return Seconds(start);  // before `fresh` is freed
}

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  std::string dir = absl::GetFlag(FLAGS_dir);
  if (dir.empty()) dir = (fs::temp_directory_path() / ("tessera_ckpt_io_" + std::to_string(getpid()))).string();
  fs::create_directories(dir);
  const int64_t rows = absl::GetFlag(FLAGS_rows), width = 64;
  const double mb = rows * width * 4.0 / 1e6;

  ClusterOptions cluster_options;
  cluster_options.num_ps = absl::GetFlag(FLAGS_ps);
  // Two clusters: the variable and its restored copy share a name (restore matches by name).
  ASSIGN_OR_RETURN(auto cluster, Cluster::StartInProcess(cluster_options));
  ASSIGN_OR_RETURN(auto restore_cluster, Cluster::StartInProcess(cluster_options));
  ASSIGN_OR_RETURN(Partitioner partitioner, FixedShardsPartitioner(absl::GetFlag(FLAGS_shards)));
  VariableOptions options;
  options.name = "table";
  options.shape = Shape{rows, width};
  options.initializer = {"random_uniform", {{"minval", -1.0}, {"maxval", 1.0}}, 1};
  ParameterServerStrategy source(*cluster, partitioner);
  ASSIGN_OR_RETURN(ShardedVariable table, source.CreateVariable(options));
  ParameterServerStrategy target(*restore_cluster, partitioner);
  options.initializer = {"zeros", {}, 0};
  ASSIGN_OR_RETURN(ShardedVariable restored, target.CreateVariable(options));
  std::printf("variable [%lld, %lld] float32 = %.0f MB in %lld shards on %d PS; scratch %s\n",
              static_cast<long long>(rows), static_cast<long long>(width), mb,
              static_cast<long long>(table.num_shards()), cluster->num_ps(), dir.c_str());

  std::vector<char> bytes(static_cast<size_t>(rows * width * 4));
  for (size_t i = 0; i < bytes.size(); i += 4096) bytes[i] = static_cast<char>(i);
  std::vector<double> write_mbs, save_mbs, read_mbs, prefaulted_mbs, restore_mbs;
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    const std::string plain = dir + "/plain.bin", ckpt = absl::StrCat(dir, "/ckpt-", r);
    ASSIGN_OR_RETURN(double write_s, PlainWrite(plain, bytes));
    Clock::time_point start = Clock::now();
    RETURN_IF_ERROR(SaveCheckpoint(source, ckpt, r));
    const double save_s = Seconds(start);
    ASSIGN_OR_RETURN(double prefaulted_s, PlainRead(plain, bytes.size(), bytes.data()));
    ASSIGN_OR_RETURN(double read_s, PlainRead(plain, bytes.size(), nullptr));
    start = Clock::now();
    ASSIGN_OR_RETURN(int64_t step, RestoreCheckpoint(target, ckpt));
    const double restore_s = Seconds(start);
    if (step != r) return absl::InternalError("restored the wrong checkpoint");
    write_mbs.push_back(mb / write_s);
    save_mbs.push_back(mb / save_s);
    read_mbs.push_back(mb / read_s);
    prefaulted_mbs.push_back(mb / prefaulted_s);
    restore_mbs.push_back(mb / restore_s);
    std::printf("round %d: write %.0f MB/s, save %.0f MB/s (%.2fx); read %.0f MB/s (prefaulted "
                "%.0f), restore %.0f MB/s (%.2fx; %.2fx prefaulted)\n",
                r, write_mbs.back(), save_mbs.back(), save_mbs.back() / write_mbs.back(),
                read_mbs.back(), prefaulted_mbs.back(), restore_mbs.back(),
                restore_mbs.back() / read_mbs.back(), restore_mbs.back() / prefaulted_mbs.back());
    fs::remove_all(ckpt);
  }
  // The restore must be exact (checked once, outside the timing).
  ASSIGN_OR_RETURN(Tensor want, table.Slice(rows - 3, rows));
  ASSIGN_OR_RETURN(Tensor got, restored.Slice(rows - 3, rows));
  if (!std::equal(want.values().begin(), want.values().end(), got.values().begin())) {
    return absl::InternalError("the restored variable differs from the saved one");
  }
  fs::remove_all(dir);

  nlohmann::json out;
  out["bench"] = "checkpoint_io";
  out["megabytes"] = mb;
  out["plain_write_mb_per_s"] = Median(write_mbs);
  out["save_mb_per_s"] = Median(save_mbs);
  out["plain_read_mb_per_s"] = Median(read_mbs);
  out["plain_read_prefaulted_mb_per_s"] = Median(prefaulted_mbs);
  out["restore_mb_per_s"] = Median(restore_mbs);
  out["save_ratio"] = Median(save_mbs) / Median(write_mbs);
  out["restore_ratio"] = Median(restore_mbs) / Median(read_mbs);
  out["restore_ratio_prefaulted"] = Median(restore_mbs) / Median(prefaulted_mbs);
  std::printf("median: save %.2fx plain write, restore %.2fx plain read (targets >= 0.5); "
              "restore %.2fx the prefaulted read\n",
              out["save_ratio"].get<double>(), out["restore_ratio"].get<double>(),
              out["restore_ratio_prefaulted"].get<double>());
  std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::bench::Main("checkpoint_io", argc, argv, tessera::Run);
}
