// checkpoint_io: checkpoint save and restore throughput against plain sequential file I/O of the
// same bytes, in one run.
//
//   checkpoint_io                      # a 2 GiB model: 1 GiB of values + 1 GiB of Adagrad slots
//   checkpoint_io --rows=1048576 --dir=/path/on/another/disk
//   checkpoint_io --optimizer=none     # values only (the model checkpoint_io measured at first)
//
// The model: one [rows, 64] float32 variable trained by Adagrad (so every shard saves and
// restores its values and its accumulator slot), in --shards shards on --ps in-process PS nodes.
// Save = SaveCheckpoint (every shard writes its slice file, fsync'd, in parallel on the PS nodes'
// scheduler threads; then the manifest, fsync'd). Baseline write = one thread writing the same
// number of bytes to one file with write(2) in 8 MiB chunks, then fsync: both sides fsync.
// Restore = RestoreCheckpoint into the same variable (every shard reads the rows it holds into a
// fresh block, checksums verified, and swaps it in, freeing the old one); baseline read = one
// thread reading the baseline file back with read(2) in 8 MiB chunks into freshly allocated
// memory, one shard's worth at a time, each freed when the next is read (what a plain loader
// that ends with the model in new memory does, at the restore's own peak memory). The same read
// into one already-touched buffer (no page faults) is reported as `plain_read_prefaulted`. Reads
// come from the page cache on both sides (the files were just written; nothing drops the cache).
// Per mode the figure is the median round; the last line is one JSON object with both sides and
// `save_ratio`, `restore_ratio` (target >= 0.8; against the fresh-memory read). The restored
// values and slots are checked against the saved ones.
#include "schema/checkpoint/checkpoint_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "bench/internal/scratch_dir.h"
#include "cluster/base/cluster.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/ps/strategy.h"
#include "tessera/status.h"

ABSL_FLAG(int64_t, rows, 4194304, "rows of the variable (x 64 floats: 4M rows = 1 GiB)");
ABSL_FLAG(int64_t, shards, 4, "shards of the variable");
ABSL_FLAG(int32_t, ps, 2, "parameter-server tasks");
ABSL_FLAG(int32_t, rounds, 3, "rounds of (baseline, checkpoint)");
ABSL_FLAG(std::string, optimizer, "adagrad",
          "the variable's optimizer: adagrad (values + one slot saved) or none (values only)");
ABSL_FLAG(std::string, dir, "",
          "scratch directory, kept (default: a fresh one under /tmp, removed at the end)");

namespace tessera {
namespace {

using bench::Median;

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

constexpr size_t kChunk = 8 << 20;

// Writes `size` bytes (`pattern`, repeated) to `path` in kChunk writes, then fsyncs.
absl::StatusOr<double> PlainWrite(const std::string& path, size_t size,
                                  const std::vector<char>& pattern) {
  const Clock::time_point start = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  for (size_t done = 0; done < size;) {
    const size_t at = done % pattern.size();
    const ssize_t n = ::write(fd, pattern.data() + at,
                              std::min({kChunk, size - done, pattern.size() - at}));
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

// Reads `size` bytes of `path` in pieces of `piece` bytes (a shard's worth), each with kChunk
// reads. Into `into` (`piece` bytes, already touched) when given; else each piece into memory
// allocated (not initialized) for it inside the timing, freed once the next piece is in, as a
// restore frees each shard's old block.
absl::StatusOr<double> PlainRead(const std::string& path, size_t size, size_t piece, char* into) {
  const Clock::time_point start = Clock::now();
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("cannot open ", path));
  std::unique_ptr<char[]> previous;
  for (size_t done = 0; done < size;) {
    const size_t n = std::min(piece, size - done);
    std::unique_ptr<char[]> fresh;
    char* out = into;
    if (out == nullptr) {
      fresh.reset(new char[n]);
      out = fresh.get();
    }
    for (size_t got = 0; got < n;) {
      const ssize_t r = ::read(fd, out + got, std::min(kChunk, n - got));
      if (r <= 0) {
        ::close(fd);
        return absl::UnavailableError("short read");
      }
      got += static_cast<size_t>(r);
    }
    done += n;
    previous = std::move(fresh);  // frees the piece before
  }
  ::close(fd);
  const double s = Seconds(start);
  previous.reset();  // the last piece is the model's, as a restored shard's block
  return s;
}

// Whether the files of checkpoints `a` and `b` other than the manifest are byte for byte the
// same (two saves of the same state are).
absl::StatusOr<bool> SameSliceFiles(const std::string& a, const std::string& b) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(a)) {
    const std::string name = entry.path().filename().string();
    if (name != kManifestFile) names.push_back(name);
  }
  if (names.empty()) return absl::InternalError(absl::StrCat("no slice files in ", a));
  std::vector<char> x(kChunk), y(kChunk);
  for (const std::string& name : names) {
    std::ifstream fa(a + "/" + name, std::ios::binary), fb(b + "/" + name, std::ios::binary);
    if (!fa || !fb) return false;
    while (fa && fb) {
      fa.read(x.data(), static_cast<std::streamsize>(x.size()));
      fb.read(y.data(), static_cast<std::streamsize>(y.size()));
      if (fa.gcount() != fb.gcount() ||
          !std::equal(x.begin(), x.begin() + fa.gcount(), y.begin())) {
        return false;
      }
    }
    if (fa.eof() != fb.eof()) return false;
  }
  return true;
}

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  const bench::ScratchDir scratch(absl::GetFlag(FLAGS_dir), "tessera_ckpt_io");
  const std::string& dir = scratch.path();
  const int64_t rows = absl::GetFlag(FLAGS_rows), width = 64;
  const std::string optimizer = absl::GetFlag(FLAGS_optimizer);
  if (optimizer != "adagrad" && optimizer != "none") {
    return absl::InvalidArgumentError("--optimizer is adagrad or none");
  }
  const int64_t tensors = optimizer == "adagrad" ? 2 : 1;  // values (+ the accumulator)
  const size_t bytes = static_cast<size_t>(rows * width * 4 * tensors);
  const double mb = static_cast<double>(bytes) / 1e6;

  ClusterOptions cluster_options;
  cluster_options.num_ps = absl::GetFlag(FLAGS_ps);
  TESSERA_ASSIGN_OR_RETURN(auto cluster, Cluster::StartInProcess(cluster_options));
  TESSERA_ASSIGN_OR_RETURN(Partitioner partitioner,
                           FixedShardsPartitioner(absl::GetFlag(FLAGS_shards)));
  VariableOptions options;
  options.name = "table";
  options.shape = Shape{rows, width};
  options.initializer = {"random_uniform", {{"minval", -1.0}, {"maxval", 1.0}}, 1};
  if (optimizer == "adagrad") {
    options.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}};
  }
  ParameterServerStrategy strategy(*cluster, partitioner);
  TESSERA_ASSIGN_OR_RETURN(ShardedVariable table, strategy.CreateVariable(options));
  const int64_t shards = table.num_shards();
  const size_t piece = (bytes + static_cast<size_t>(shards) - 1) / static_cast<size_t>(shards);
  std::printf("variable [%lld, %lld] float32, optimizer %s: %.0f MB saved (values%s) in %lld "
              "shards on %d PS; scratch %s\n",
              static_cast<long long>(rows), static_cast<long long>(width), optimizer.c_str(), mb,
              tensors == 2 ? " + slots" : "", static_cast<long long>(shards), cluster->num_ps(),
              dir.c_str());

  std::vector<char> pattern(64 << 20);
  for (size_t i = 0; i < pattern.size(); i += 4096) pattern[i] = static_cast<char>(i >> 12);
  std::vector<char> prefaulted(piece, 1);
  // Rows changed before each restore, which must bring them back.
  const std::vector<int64_t> probe = {0, rows / 2, rows - 1};
  const Tensor marks(Shape{3, width}, 7.0f);
  TESSERA_ASSIGN_OR_RETURN(const Tensor saved_rows, table.Gather(probe));
  std::vector<double> write_mbs, save_mbs, read_mbs, prefaulted_mbs, restore_mbs;
  const int32_t rounds = absl::GetFlag(FLAGS_rounds);
  // One run: every save carries its id, so the exactness check below compares like with like.
  const RunId run = RunId::Random();
  for (int32_t r = 0; r < rounds; ++r) {
    const std::string plain = dir + "/plain.bin", ckpt = absl::StrCat(dir, "/ckpt-", r);
    TESSERA_ASSIGN_OR_RETURN(double write_s, PlainWrite(plain, bytes, pattern));
    Clock::time_point start = Clock::now();
    TESSERA_RETURN_IF_ERROR(SaveCheckpoint(strategy, ckpt, r, run));
    const double save_s = Seconds(start);
    TESSERA_ASSIGN_OR_RETURN(double prefaulted_s,
                             PlainRead(plain, bytes, piece, prefaulted.data()));
    TESSERA_ASSIGN_OR_RETURN(double read_s, PlainRead(plain, bytes, piece, nullptr));
    TESSERA_RETURN_IF_ERROR(table.ScatterUpdate(probe, marks));
    start = Clock::now();
    TESSERA_ASSIGN_OR_RETURN(int64_t step, RestoreCheckpoint(strategy, ckpt));
    const double restore_s = Seconds(start);
    if (step != r) return absl::InternalError("restored the wrong checkpoint");
    TESSERA_ASSIGN_OR_RETURN(const Tensor restored_rows, table.Gather(probe));
    if (!std::equal(saved_rows.values().begin(), saved_rows.values().end(),
                    restored_rows.values().begin())) {
      return absl::InternalError("the restore did not bring the saved rows back");
    }
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
    if (r + 1 < rounds) fs::remove_all(ckpt);
  }
  // The restore is exact, slots included: saving the restored state again writes the same
  // slice files (checked once, outside the timing).
  const std::string last = absl::StrCat(dir, "/ckpt-", rounds - 1);
  TESSERA_RETURN_IF_ERROR(SaveCheckpoint(strategy, dir + "/again", rounds - 1, run));
  TESSERA_ASSIGN_OR_RETURN(const bool same, SameSliceFiles(last, dir + "/again"));
  if (!same) return absl::InternalError("the restored state saves differently from the saved one");

  nlohmann::json out;
  out["bench"] = "checkpoint_io";
  out["megabytes"] = mb;
  out["optimizer"] = optimizer;
  out["plain_write_mb_per_s"] = Median(write_mbs);
  out["save_mb_per_s"] = Median(save_mbs);
  out["plain_read_mb_per_s"] = Median(read_mbs);
  out["plain_read_prefaulted_mb_per_s"] = Median(prefaulted_mbs);
  out["restore_mb_per_s"] = Median(restore_mbs);
  out["save_ratio"] = Median(save_mbs) / Median(write_mbs);
  out["restore_ratio"] = Median(restore_mbs) / Median(read_mbs);
  out["restore_ratio_prefaulted"] = Median(restore_mbs) / Median(prefaulted_mbs);
  std::printf("median: save %.2fx plain write, restore %.2fx plain read (targets >= 0.8); "
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
