// shard_stats: how long a shard is busy answering a stats request (ShardState::Info with its K
// hottest rows, Note [Row update counts] in core/ps/row_update_counts.h) — the time a PS node's
// stats take from the shard's training — on a shard of the RFC's user table's row count (600,000
// rows).
// Rows are made hot by sparse gradients of `--ids` random ids (Zipf-like: id = rows * u^3, so a
// few rows are named often), in three states: few rows touched, most touched, and every row
// touched with counts rising along the rows (later rows keep displacing the heap's least: the
// scan's bad case). The figure per state is the median of `--repeats` calls; the row width does not matter
// (the scan reads the counters only).
//
//   shard_stats --rows=600000 --k=5
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "bench/internal/bench_main.h"
#include "core/ps/shard_state.h"

ABSL_FLAG(int64_t, rows, 600000, "rows of the shard");
ABSL_FLAG(int32_t, k, 5, "hottest rows asked for");
ABSL_FLAG(int32_t, repeats, 21, "calls timed per state");

namespace tessera {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The median time of Info(k) on `shard`, in microseconds.
double TimeInfo(const ShardState& shard, int32_t k, int32_t repeats, int64_t& checksum) {
  std::vector<double> us;
  for (int32_t i = 0; i < repeats; ++i) {
    const double start = Now();
    const ShardInfo info = shard.Info(k);
    us.push_back((Now() - start) * 1e6);
    for (const HotRow& hot : info.hottest_rows) checksum += hot.row + hot.updates;
  }
  return bench::Median(us);
}

absl::Status Run(int, char**) {
  const int64_t rows = absl::GetFlag(FLAGS_rows);
  const int32_t k = absl::GetFlag(FLAGS_k);
  const int32_t repeats = absl::GetFlag(FLAGS_repeats);
  std::printf("command: shard_stats --rows=%lld --k=%d --repeats=%d\n",
              static_cast<long long>(rows), k, repeats);
  ShardSpec spec;
  spec.variable = "users";
  spec.full_shape = Shape{rows, 1};
  spec.rows = rows;
  spec.initializer = InitializerSpec{"zeros", {}, 0};
  spec.optimizer = OptimizerSpec{"sgd", {{"learning_rate", 0.1}}};
  absl::StatusOr<ShardState> created = ShardState::Create(spec);
  if (!created.ok()) return created.status();
  ShardState shard = *std::move(created);

  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> uniform(0, 1);
  int64_t checksum = 0;
  const auto train = [&](int64_t ids) -> absl::Status {
    constexpr int64_t kBatch = 512;
    for (int64_t done = 0; done < ids; done += kBatch) {
      Ids batch(kBatch);
      for (int64_t& id : batch) {
        const double u = uniform(rng);
        id = std::min<int64_t>(rows - 1, static_cast<int64_t>(static_cast<double>(rows) * u * u * u));
      }
      absl::Status st = shard.ApplySparseGradient(batch, Tensor(Shape{kBatch, 1}, 0.01f));
      if (!st.ok()) return st;
    }
    return absl::OkStatus();
  };
  const auto report = [&](const char* state) {
    const double info_us = TimeInfo(shard, k, repeats, checksum);
    const double plain_us = TimeInfo(shard, 0, repeats, checksum);
    std::printf("%-34s rows_touched %8lld  Info(%d) %9.1f us  Info(0) %6.2f us\n", state,
                static_cast<long long>(shard.rows_touched()), k, info_us, plain_us);
  };
  if (absl::Status st = train(rows / 10); !st.ok()) return st;
  report("few touched (rows/10 ids)");
  if (absl::Status st = train(rows * 5); !st.ok()) return st;
  report("most touched (5 x rows ids)");
  // Every row named 1 + 20 * r / rows more times: counts climb along the rows, so later rows
  // keep displacing the heap's least.
  for (int64_t base = 0; base < rows; base += 100000) {
    Ids ids;
    for (int64_t r = base; r < std::min(rows, base + 100000); ++r) {
      for (int64_t j = 0; j <= r * 20 / rows; ++j) ids.push_back(r);
    }
    absl::Status st = shard.Scatter(ScatterOp::kAdd, ids,
                                    Tensor(Shape{static_cast<int64_t>(ids.size()), 1}, 0.0f));
    if (!st.ok()) return st;
  }
  report("all touched, counts ascending");
  std::printf("(checksum %lld)\n", static_cast<long long>(checksum));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::bench::Main("shard_stats", argc, argv, tessera::Run); }
