// shard_ops: what sharding costs. Compares, in one run on the same data, each variable operation
// done through the shard actors of an in-process cluster against the same operation on a plain
// tensor with no actors:
//
//   gather       512 ids x 64 floats from a [100000, 64] variable in 4 shards, vs GatherRows
//   scatter_add  512 ids x 64 floats into the same variable, vs ScatterRows(kAdd)
//   dense_read   a [262144, 64] (64 MiB) variable in 4 shards, vs new float[] + memcpy
//
// The actor path is measured the way a worker uses it: non-blocking operations
// (actors/ps/variable_ops.h) issued from inside one event-based actor that keeps N of them in
// flight (Note [Pipelined actor measurement]). The blocking driver forms (ShardedVariable::Gather
// / ScatterAdd / Read) are printed as context. Every row is repeated --repeats times, the repeats
// of a section's rows interleaved so the machine's noise falls on both sides of a ratio alike;
// a row's figure is the median repeat (--statistic), the best one printed beside it. The last
// line is one JSON object with both sides of every ratio. Figures go into bench/README.md.
//
//   shard_ops                                   # all three sections, ~18 s
//   shard_ops --sections=gather --repeats=9     # one section
#include <algorithm>
#include <caf/actor_system.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/scheduler/abstract_coordinator.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <future>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/ps/variable_ops.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/sharded_variable.h"
#include "coordinator/ps/strategy.h"
#include "core/variables/scatter.h"
#include "tessera/partitioner.h"
#include "tessera/status.h"
#include "tessera/tensor.h"

ABSL_FLAG(int32_t, ps, 2, "parameter-server nodes in the in-process cluster");
ABSL_FLAG(int32_t, threads, 0,
          "CAF scheduler threads (0: the cluster's default, see cluster/base/cluster.h)");
ABSL_FLAG(int64_t, shards, 4, "shards per variable (FixedShardsPartitioner)");
ABSL_FLAG(int64_t, rows, 100000, "gather/scatter: rows of the sparse variable");
ABSL_FLAG(int64_t, dim, 64, "floats per row (both variables)");
ABSL_FLAG(int64_t, ids, 512, "gather/scatter: ids per operation");
ABSL_FLAG(std::string, ids_order, "random",
          "gather/scatter: random (uniform draws, a few repeat) or sorted (distinct, ascending: "
          "what a worker's train step gathers)");
ABSL_FLAG(int64_t, batches, 256,
          "gather/scatter: id batches cycled through; the default touches most rows, so both "
          "paths work on the whole table as a training stream does (16 batches would keep a 2 MB "
          "working set in one core's L2)");
ABSL_FLAG(bool, warmup, true,
          "before each timed run, run the path untimed once over all batches (dense_read: one "
          "read), so each path starts with its own data in the caches");
ABSL_FLAG(int64_t, ops, 2000, "gather/scatter: operations per measurement");
ABSL_FLAG(int64_t, blocking_ops, 200, "gather/scatter: operations per blocking measurement");
ABSL_FLAG(std::vector<std::string>, inflight, std::vector<std::string>({"1", "4", "8"}),
          "gather/scatter: operations kept in flight by the benchmark actor");
ABSL_FLAG(int64_t, ratio_inflight, 4,
          "gather/scatter: the --inflight setting the headline ratios use");
ABSL_FLAG(int64_t, dense_rows, 262144, "dense_read: rows of the dense variable (x dim floats)");
ABSL_FLAG(int64_t, dense_ops, 10, "dense_read: reads per measurement");
ABSL_FLAG(std::vector<std::string>, dense_inflight, std::vector<std::string>({"1", "2"}),
          "dense_read: reads kept in flight by the benchmark actor");
ABSL_FLAG(int64_t, dense_ratio_inflight, 1,
          "dense_read: the --dense_inflight setting the headline ratio uses");
ABSL_FLAG(int32_t, repeats, 5, "repeats of every measurement");
ABSL_FLAG(std::string, statistic, "median",
          "how the repeats of a row are summarized: median or best (highest throughput)");
ABSL_FLAG(uint64_t, seed, 1, "seed of the variables' initializer and of the ids");
ABSL_FLAG(int32_t, settle_ms, 60, "pause before every measurement (lets idle CAF workers settle)");
ABSL_FLAG(std::vector<std::string>, sections,
          std::vector<std::string>({"gather", "scatter", "dense_read"}),
          "which sections to run: gather, scatter, dense_read");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Keeps results observable so no measured work can be optimized away.
volatile float g_sink = 0;

// Makes the compiler assume the memory behind `p` is read, so an allocation and the copy into it
// cannot be elided (C++14 allows eliding a new/delete pair).
inline void Escape(const void* p) { asm volatile("" : : "g"(p) : "memory"); }

// Note [Pipelined actor measurement]
// A worker issues variable operations from inside its handlers and never blocks. So the actor
// path is timed from inside one event-based actor: it issues `inflight` operations, and each
// completion (a `done` callback, run in the actor's context) issues the next, until `total`
// have completed. The clock starts before the first issue and stops at the last completion,
// both on the actor, so spawning it and waking the main thread are not counted.
template <class Start>
class Pipeline : public std::enable_shared_from_this<Pipeline<Start>> {
 public:
  Pipeline(caf::event_based_actor* self, Start start, int64_t total,
           std::shared_ptr<std::promise<absl::StatusOr<double>>> result)
      : self_(self), start_(std::move(start)), total_(total), result_(std::move(result)) {}

  void Begin(int64_t inflight) {
    begin_ = Clock::now();
    for (int64_t i = 0; i < std::min(inflight, total_); ++i) Issue();
  }

 private:
  void Issue() {
    const int64_t k = issued_++;
    start_(self_, k, [p = this->shared_from_this()](absl::Status s) { p->Complete(s); });
  }

  void Complete(const absl::Status& status) {
    if (finished_) return;
    if (!status.ok()) {
      finished_ = true;
      result_->set_value(status);
      return;
    }
    if (++completed_ == total_) {
      finished_ = true;
      result_->set_value(Seconds(Clock::now() - begin_));
      return;
    }
    if (issued_ < total_) Issue();
  }

  caf::event_based_actor* self_;
  Start start_;
  const int64_t total_;
  std::shared_ptr<std::promise<absl::StatusOr<double>>> result_;
  Clock::time_point begin_;
  int64_t issued_ = 0;
  int64_t completed_ = 0;
  bool finished_ = false;
};

// Seconds for `total` operations with `inflight` in flight (Note [Pipelined actor measurement]).
// start(self, k, done) issues operation k from `self` and eventually calls done(Status).
template <class Start>
absl::StatusOr<double> RunPipelined(caf::actor_system& system, int64_t total, int64_t inflight,
                                    Start start) {
  auto result = std::make_shared<std::promise<absl::StatusOr<double>>>();
  std::future<absl::StatusOr<double>> seconds = result->get_future();
  // The extra int argument: CAF 0.17 dereferences a null argument tuple without one
  // (coordinator/ps/internal/await.h). The actor lives while its requests are pending.
  system.spawn(
      [start, total, inflight, result](caf::event_based_actor* self, int) {
        std::make_shared<Pipeline<Start>>(self, start, total, result)->Begin(inflight);
      },
      0);
  return seconds.get();
}

// How repeats are summarized (--statistic): the best repeat, or the median one.
bool g_use_median = false;

double Summarize(std::vector<double> v, bool median) {
  std::sort(v.begin(), v.end());
  if (!median) return v.back();
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Process CPU time (every thread: the main thread, the CAF workers, their idle polling).
double ProcessCpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// One row of the output: a way of doing `ops` operations of `bytes_per_op` payload bytes.
struct Row {
  std::string op;    // "gather"
  std::string path;  // "actor GatherAsync, 4 in flight"
  std::string key;   // JSON name: "actor_inflight4"
  int64_t ops = 0;
  int64_t bytes_per_op = 0;
  // Wall seconds for operations 0 .. count - 1.
  std::function<absl::StatusOr<double>(int64_t count)> run;
  std::vector<double> ops_per_s;      // one per repeat
  std::vector<double> cpu_us_per_op;  // process CPU time per op, one per repeat

  // Throughput under --statistic: what the ratios use.
  double OpsPerSecond() const { return Summarize(ops_per_s, g_use_median); }
  // The other statistic, printed beside it.
  double OtherOpsPerSecond() const { return Summarize(ops_per_s, !g_use_median); }
  double CpuMicrosPerOp() const { return Summarize(cpu_us_per_op, /*median=*/true); }
  double MegabytesPerSecond() const {
    return OpsPerSecond() * static_cast<double>(bytes_per_op) / 1e6;
  }
};

Row MakeRow(std::string op, std::string path, std::string key, int64_t ops, int64_t bytes_per_op,
            std::function<absl::StatusOr<double>(int64_t count)> run) {
  Row row;
  row.op = std::move(op);
  row.path = std::move(path);
  row.key = std::move(key);
  row.ops = ops;
  row.bytes_per_op = bytes_per_op;
  row.run = std::move(run);
  return row;
}

// Runs every row `repeats` times, the rows interleaved within each repeat. Before each timed
// run, `warmup` untimed operations bring that path's own data back into the caches: the process
// holds the variable twice (in the shards and as the plain tensor), more than the L3 holds, and
// each path should be measured in its steady state, as in a process holding only its own copy.
absl::Status Measure(std::vector<Row>& rows, int32_t repeats, int64_t warmup) {
  for (int32_t r = 0; r < repeats; ++r) {
    for (Row& row : rows) {
      if (warmup > 0) TESSERA_RETURN_IF_ERROR(row.run(warmup).status());
      // Idle CAF workers keep polling for tens of ms after their last job (then sleep between
      // steal attempts); let them settle so they do not take the CPU from the next row.
      std::this_thread::sleep_for(std::chrono::milliseconds(absl::GetFlag(FLAGS_settle_ms)));
      const double cpu_start = ProcessCpuSeconds();
      TESSERA_ASSIGN_OR_RETURN(const double seconds, row.run(row.ops));
      const double cpu = ProcessCpuSeconds() - cpu_start;
      row.ops_per_s.push_back(static_cast<double>(row.ops) / seconds);
      row.cpu_us_per_op.push_back(1e6 * cpu / static_cast<double>(row.ops));
    }
  }
  return absl::OkStatus();
}

void PrintHeader() {
  const char* stat = g_use_median ? "med" : "best";
  const char* other = g_use_median ? "best" : "med";
  std::printf("%-11s %-40s %6s %12s %10s %10s %12s %10s %8s\n", "op", "path", "ops",
              absl::StrCat("ops/s(", stat, ")").c_str(), "us/op", "MB/s",
              absl::StrCat("ops/s(", other, ")").c_str(), "cpu_us/op", "vs_base");
}

// Prints the rows; the first row is the baseline the last column divides by.
void PrintRows(const std::vector<Row>& rows) {
  const double base = rows.front().OpsPerSecond();
  for (const Row& row : rows) {
    const double ops_per_s = row.OpsPerSecond();
    std::printf("%-11s %-40s %6lld %12.1f %10.1f %10.0f %12.1f %10.1f %8.3f\n", row.op.c_str(),
                row.path.c_str(), static_cast<long long>(row.ops), ops_per_s, 1e6 / ops_per_s,
                row.MegabytesPerSecond(), row.OtherOpsPerSecond(), row.CpuMicrosPerOp(),
                ops_per_s / base);
  }
  std::fflush(stdout);
}

// x with `digits` decimals (keeps the JSON line short).
double Round(double x, int digits) {
  const double scale = std::pow(10.0, digits);
  return std::round(x * scale) / scale;
}

Json RowsJson(const std::vector<Row>& rows) {
  Json out = Json::object();
  for (const Row& row : rows) {
    out[row.key] = {{"path", row.path},
                    {"ops", row.ops},
                    {"ops_per_s", Round(row.OpsPerSecond(), 1)},
                    {"mb_per_s", Round(row.MegabytesPerSecond(), 1)},
                    {"best_ops_per_s", Round(Summarize(row.ops_per_s, false), 1)},
                    {"median_ops_per_s", Round(Summarize(row.ops_per_s, true), 1)},
                    {"cpu_us_per_op", Round(row.CpuMicrosPerOp(), 2)}};
  }
  return out;
}

std::string ActorKey(int64_t inflight) { return absl::StrCat("actor_inflight", inflight); }

const Row& RowByKey(const std::vector<Row>& rows, const std::string& key) {
  for (const Row& row : rows) {
    if (row.key == key) return row;
  }
  return rows.front();  // callers only ask for keys they added
}

// Adds both sides of `op`'s ratio to `summary`: the direct path (the first row) against the
// actor path with `inflight` operations in flight, in throughput and in CPU time per op; plus
// the ratio at every in-flight setting. The headline setting is fixed up front (a flag), not
// the luckiest of the settings measured.
void AddRatio(Json& summary, const std::string& op, const std::vector<Row>& rows,
              int64_t inflight) {
  const Row& base = rows.front();
  const Row& actor = RowByKey(rows, ActorKey(inflight));
  summary[op + "_direct_path"] = base.path;
  summary[op + "_direct_ops_per_s"] = Round(base.OpsPerSecond(), 1);
  summary[op + "_direct_mb_per_s"] = Round(base.MegabytesPerSecond(), 1);
  summary[op + "_direct_cpu_us_per_op"] = Round(base.CpuMicrosPerOp(), 2);
  summary[op + "_actor_inflight"] = inflight;
  summary[op + "_actor_ops_per_s"] = Round(actor.OpsPerSecond(), 1);
  summary[op + "_actor_mb_per_s"] = Round(actor.MegabytesPerSecond(), 1);
  summary[op + "_actor_cpu_us_per_op"] = Round(actor.CpuMicrosPerOp(), 2);
  summary[op + "_ratio"] = Round(actor.OpsPerSecond() / base.OpsPerSecond(), 4);
  for (const Row& row : rows) {
    if (row.key.rfind("actor_inflight", 0) != 0) continue;
    summary[op + "_ratio_inflight" + row.key.substr(std::strlen("actor_inflight"))] =
        Round(row.OpsPerSecond() / base.OpsPerSecond(), 4);
  }
  summary[op + "_cpu_ratio"] = Round(base.CpuMicrosPerOp() / actor.CpuMicrosPerOp(), 4);
  summary[op + "_blocking_ops_per_s"] = Round(RowByKey(rows, "blocking").OpsPerSecond(), 1);
  summary[op + "_rows"] = RowsJson(rows);
}

absl::StatusOr<std::vector<int64_t>> ParseCounts(const std::vector<std::string>& values,
                                                 absl::string_view flag) {
  std::vector<int64_t> out;
  for (const std::string& v : values) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(v, &n) || n < 1) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", v, "' is not >= 1"));
    }
    out.push_back(n);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

bool SameValues(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.size())) == 0;
}

// The id batches and scatter rows both sides use.
struct SparseWorkload {
  std::vector<Ids> ids;      // --batches batches of --ids global ids, uniform over the rows
  std::vector<Tensor> rows;  // kUpdates [ids, dim] updates, U(-1e-3, 1e-3), cycled through
  static constexpr int64_t kUpdates = 16;
};

// `sorted`: each batch is --ids distinct ids in ascending order, the form a worker's train step
// gathers (actors/ps/train_step.h); otherwise uniform draws in draw order, so a few ids repeat.
SparseWorkload MakeSparseWorkload(int64_t num_rows, int64_t dim, int64_t ids_per_op,
                                  int64_t batches, bool sorted, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> id(0, num_rows - 1);
  std::uniform_real_distribution<float> value(-1e-3f, 1e-3f);
  SparseWorkload w;
  for (int64_t b = 0; b < batches; ++b) {
    Ids batch;
    while (static_cast<int64_t>(batch.size()) < ids_per_op) {
      while (static_cast<int64_t>(batch.size()) < ids_per_op) batch.push_back(id(rng));
      if (sorted) {  // drop the repeats and draw again for them
        std::sort(batch.begin(), batch.end());
        batch.erase(std::unique(batch.begin(), batch.end()), batch.end());
      }
    }
    w.ids.push_back(std::move(batch));
  }
  for (int64_t u = 0; u < SparseWorkload::kUpdates; ++u) {
    Tensor rows(Shape{ids_per_op, dim});
    for (float& x : rows.values()) x = value(rng);
    w.rows.push_back(std::move(rows));
  }
  return w;
}

struct Context {
  Cluster* cluster = nullptr;
  ParameterServerStrategy* strategy = nullptr;
  Partitioner partitioner;
  int32_t repeats = 1;
  uint64_t seed = 1;
  std::vector<int64_t> inflight;
  std::vector<int64_t> dense_inflight;
  int64_t ratio_inflight = 4;
  int64_t dense_ratio_inflight = 1;
};

absl::StatusOr<ShardedVariable> CreateVariable(Context& ctx, const std::string& name, int64_t rows,
                                               int64_t dim) {
  VariableOptions options;
  options.name = name;
  options.shape = Shape{rows, dim};
  options.initializer = {"random_uniform", {{"minval", -0.05}, {"maxval", 0.05}}, ctx.seed};
  options.partitioner = ctx.partitioner;
  return ctx.strategy->CreateVariable(options);
}

// (a) gather and (b) scatter_add, on one variable and one plain copy of its values.
absl::Status RunSparse(Context& ctx, bool gather, bool scatter, Json& summary) {
  const int64_t num_rows = absl::GetFlag(FLAGS_rows);
  const int64_t dim = absl::GetFlag(FLAGS_dim);
  const int64_t ids_per_op = absl::GetFlag(FLAGS_ids);
  const int64_t batches = absl::GetFlag(FLAGS_batches);
  const int64_t ops = absl::GetFlag(FLAGS_ops);
  const int64_t blocking_ops = absl::GetFlag(FLAGS_blocking_ops);
  if (num_rows < 1 || dim < 1 || ids_per_op < 1 || batches < 1 || ops < 1 || blocking_ops < 1) {
    return absl::InvalidArgumentError(
        "--rows, --dim, --ids, --batches, --ops and --blocking_ops must be >= 1");
  }
  TESSERA_ASSIGN_OR_RETURN(ShardedVariable var, CreateVariable(ctx, "sparse", num_rows, dim));
  const VariableHandle& handle = var.handle();
  // The plain tensor: the variable's own values, read back once.
  TESSERA_ASSIGN_OR_RETURN(Tensor plain, var.Read());
  const std::string order = absl::GetFlag(FLAGS_ids_order);
  if (order != "random" && order != "sorted") {
    return absl::InvalidArgumentError(
        absl::StrCat("--ids_order: '", order, "' (expected random or sorted)"));
  }
  if (order == "sorted" && ids_per_op > num_rows) {
    return absl::InvalidArgumentError("--ids_order=sorted needs --ids <= --rows");
  }
  const SparseWorkload w =
      MakeSparseWorkload(num_rows, dim, ids_per_op, batches, order == "sorted", ctx.seed);
  int64_t duplicates = 0;
  Ids touched;
  for (Ids batch : w.ids) {
    std::sort(batch.begin(), batch.end());
    const auto end = std::unique(batch.begin(), batch.end());
    duplicates += batch.end() - end;
    touched.insert(touched.end(), batch.begin(), end);
  }
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  const int64_t bytes_per_op = ids_per_op * dim * static_cast<int64_t>(sizeof(float));
  std::printf(
      "sparse variable %s in %lld shards (%.1f MB); %lld ids x %lld floats per op (%.0f KB), "
      "uniform ids (%s); %lld batches cycled (%lld repeats within batches), touching %lld "
      "rows (%.1f MB)\n",
      var.shape().ToString().c_str(), static_cast<long long>(var.num_shards()),
      plain.size() * 4 / 1e6, static_cast<long long>(ids_per_op), static_cast<long long>(dim),
      bytes_per_op / 1e3, order == "sorted" ? "distinct, ascending" : "in draw order",
      static_cast<long long>(batches), static_cast<long long>(duplicates),
      static_cast<long long>(touched.size()), touched.size() * dim * 4 / 1e6);

  // Both paths must compute the same thing: every batch's gather bitwise, and one scatter_add
  // (read back whole) bitwise.
  for (int64_t b = 0; b < batches; ++b) {
    TESSERA_ASSIGN_OR_RETURN(Tensor via_actors, var.Gather(w.ids[b]));
    TESSERA_ASSIGN_OR_RETURN(Tensor direct, GatherRows(plain, w.ids[b]));
    if (!SameValues(via_actors, direct)) {
      return absl::InternalError(absl::StrCat("gather of batch ", b, " differs between paths"));
    }
  }
  TESSERA_RETURN_IF_ERROR(var.ScatterAdd(w.ids[0], w.rows[0]));
  TESSERA_RETURN_IF_ERROR(ScatterRows(ScatterOp::kAdd, plain.view(), w.ids[0], w.rows[0]));
  {
    TESSERA_ASSIGN_OR_RETURN(Tensor after, var.Read());
    if (!SameValues(after, plain)) {
      return absl::InternalError("scatter_add differs between paths");
    }
  }
  std::printf(
      "check: actor gather == GatherRows on all %lld batches, actor scatter_add == "
      "ScatterRows(kAdd) (bitwise)\n",
      static_cast<long long>(batches));

  caf::actor_system& system = ctx.cluster->actors().system();
  // Warm-up: one pass over the batches, which touches the path's whole working set.
  const int64_t warmup = absl::GetFlag(FLAGS_warmup) ? batches : 0;
  auto batch_of = [batches](int64_t k) { return static_cast<size_t>(k % batches); };
  auto update_of = [](int64_t k) { return static_cast<size_t>(k % SparseWorkload::kUpdates); };

  if (gather) {
    std::vector<Row> rows;
    rows.push_back(MakeRow("gather", "direct GatherRows (plain tensor)", "direct", ops,
                           bytes_per_op, [&](int64_t count) -> absl::StatusOr<double> {
                             const Clock::time_point start = Clock::now();
                             for (int64_t k = 0; k < count; ++k) {
                               TESSERA_ASSIGN_OR_RETURN(Tensor out,
                                                        GatherRows(plain, w.ids[batch_of(k)]));
                               g_sink = g_sink + out.data()[0];
                             }
                             return Seconds(Clock::now() - start);
                           }));
    for (int64_t n : ctx.inflight) {
      rows.push_back(MakeRow(
          "gather", absl::StrCat("actor GatherAsync, ", n, " in flight"), ActorKey(n), ops,
          bytes_per_op, [&, n](int64_t count) {
            return RunPipelined(
                system, count, n, [&](caf::event_based_actor* self, int64_t k, DoneStatus done) {
                  ShardClient client(self);
                  GatherAsync(client, handle, w.ids[batch_of(k)], ShardingStrategy::kDiv,
                              [done](absl::StatusOr<Tensor> out) {
                                if (out.ok()) g_sink = g_sink + out->data()[0];
                                done(out.status());
                              });
                });
          }));
    }
    rows.push_back(MakeRow("gather", "blocking ShardedVariable::Gather", "blocking", blocking_ops,
                           bytes_per_op, [&](int64_t count) -> absl::StatusOr<double> {
                             const Clock::time_point start = Clock::now();
                             for (int64_t k = 0; k < count; ++k) {
                               TESSERA_ASSIGN_OR_RETURN(Tensor out, var.Gather(w.ids[batch_of(k)]));
                               g_sink = g_sink + out.data()[0];
                             }
                             return Seconds(Clock::now() - start);
                           }));
    TESSERA_RETURN_IF_ERROR(Measure(rows, ctx.repeats, warmup));
    PrintRows(rows);
    AddRatio(summary, "gather", rows, ctx.ratio_inflight);
  }

  if (scatter) {
    // Both sides keep adding the same small updates; values stay far from overflow.
    std::vector<Row> rows;
    rows.push_back(MakeRow("scatter_add", "direct ScatterRows(kAdd) (plain tensor)", "direct", ops,
                           bytes_per_op, [&](int64_t count) -> absl::StatusOr<double> {
                             const Clock::time_point start = Clock::now();
                             for (int64_t k = 0; k < count; ++k) {
                               TESSERA_RETURN_IF_ERROR(ScatterRows(ScatterOp::kAdd, plain.view(),
                                                                   w.ids[batch_of(k)],
                                                                   w.rows[update_of(k)]));
                             }
                             g_sink = g_sink + plain.data()[0];
                             return Seconds(Clock::now() - start);
                           }));
    for (int64_t n : ctx.inflight) {
      rows.push_back(MakeRow("scatter_add", absl::StrCat("actor ScatterAsync, ", n, " in flight"),
                             ActorKey(n), ops, bytes_per_op, [&, n](int64_t count) {
                               return RunPipelined(
                                   system, count, n,
                                   [&](caf::event_based_actor* self, int64_t k, DoneStatus done) {
                                     ShardClient client(self);
                                     ScatterAsync(client, handle, ScatterOp::kAdd, w.ids[batch_of(k)],
                                                  w.rows[update_of(k)], std::move(done));
                                   });
                             }));
    }
    rows.push_back(
        MakeRow("scatter_add", "blocking ShardedVariable::ScatterAdd", "blocking", blocking_ops,
                bytes_per_op, [&](int64_t count) -> absl::StatusOr<double> {
                  const Clock::time_point start = Clock::now();
                  for (int64_t k = 0; k < count; ++k) {
                    TESSERA_RETURN_IF_ERROR(
                        var.ScatterAdd(w.ids[batch_of(k)], w.rows[update_of(k)]));
                  }
                  return Seconds(Clock::now() - start);
                }));
    TESSERA_RETURN_IF_ERROR(Measure(rows, ctx.repeats, warmup));
    PrintRows(rows);
    AddRatio(summary, "scatter", rows, ctx.ratio_inflight);
  }
  return absl::OkStatus();
}

// (c) a dense read of the whole variable vs copying the same bytes on one thread.
absl::Status RunDenseRead(Context& ctx, Json& summary) {
  const int64_t num_rows = absl::GetFlag(FLAGS_dense_rows);
  const int64_t dim = absl::GetFlag(FLAGS_dim);
  const int64_t ops = absl::GetFlag(FLAGS_dense_ops);
  if (num_rows < 1 || dim < 1 || ops < 1) {
    return absl::InvalidArgumentError("--dense_rows, --dim and --dense_ops must be >= 1");
  }
  TESSERA_ASSIGN_OR_RETURN(ShardedVariable var, CreateVariable(ctx, "dense", num_rows, dim));
  const VariableHandle& handle = var.handle();
  TESSERA_ASSIGN_OR_RETURN(const Tensor plain, var.Read());
  const size_t bytes = sizeof(float) * static_cast<size_t>(plain.size());
  const size_t floats = static_cast<size_t>(plain.size());
  std::printf("dense variable %s in %lld shards (%.1f MiB, %.1f MB per read)\n",
              var.shape().ToString().c_str(), static_cast<long long>(var.num_shards()),
              bytes / 1048576.0, bytes / 1e6);
  // Context: a copy into memory that is already mapped and in use (no allocation, no page
  // faults). Touched once here so the first measurement does not pay for it.
  std::unique_ptr<float[]> pretouched(new float[floats]);
  std::memset(pretouched.get(), 0, bytes);
  caf::actor_system& system = ctx.cluster->actors().system();

  std::vector<Row> rows;
  // The baseline a read must be compared with: a read returns a NEW tensor, so allocate (new
  // float[], uninitialized: no zero-fill, the cheapest allocation there is) then memcpy, then
  // free, on one thread.
  rows.push_back(MakeRow("dense_read", "new float[] + memcpy + delete (1 thread)", "alloc_memcpy",
                         ops, static_cast<int64_t>(bytes),
                         [&](int64_t count) -> absl::StatusOr<double> {
                           const Clock::time_point start = Clock::now();
                           for (int64_t k = 0; k < count; ++k) {
                             std::unique_ptr<float[]> out(new float[floats]);
                             std::memcpy(out.get(), plain.data(), bytes);
                             Escape(out.get());
                           }
                           return Seconds(Clock::now() - start);
                         }));
  rows.push_back(MakeRow("dense_read", "memcpy into a pre-touched buffer", "memcpy_pretouched", ops,
                         static_cast<int64_t>(bytes), [&](int64_t count) -> absl::StatusOr<double> {
                           const Clock::time_point start = Clock::now();
                           for (int64_t k = 0; k < count; ++k) {
                             std::memcpy(pretouched.get(), plain.data(), bytes);
                             Escape(pretouched.get());
                           }
                           return Seconds(Clock::now() - start);
                         }));
  for (int64_t n : ctx.dense_inflight) {
    rows.push_back(MakeRow("dense_read", absl::StrCat("actor ReadAsync, ", n, " in flight"),
                           ActorKey(n), ops, static_cast<int64_t>(bytes), [&, n](int64_t count) {
                             return RunPipelined(
                                 system, count, n,
                                 [&](caf::event_based_actor* self, int64_t, DoneStatus done) {
                                   ShardClient client(self);
                                   ReadAsync(client, handle, [done](absl::StatusOr<Tensor> out) {
                                     if (out.ok()) g_sink = g_sink + out->data()[out->size() - 1];
                                     done(out.status());
                                   });
                                 });
                           }));
  }
  rows.push_back(MakeRow("dense_read", "blocking ShardedVariable::Read", "blocking", ops,
                         static_cast<int64_t>(bytes), [&](int64_t count) -> absl::StatusOr<double> {
                           const Clock::time_point start = Clock::now();
                           for (int64_t k = 0; k < count; ++k) {
                             TESSERA_ASSIGN_OR_RETURN(Tensor out, var.Read());
                             g_sink = g_sink + out.data()[out.size() - 1];
                           }
                           return Seconds(Clock::now() - start);
                         }));
  TESSERA_RETURN_IF_ERROR(Measure(rows, ctx.repeats, /*warmup=*/1));
  PrintRows(rows);
  AddRatio(summary, "dense_read", rows, ctx.dense_ratio_inflight);
  summary["dense_read_memcpy_pretouched_mb_per_s"] =
      Round(RowByKey(rows, "memcpy_pretouched").MegabytesPerSecond(), 1);
  return absl::OkStatus();
}

absl::Status Run(Json& summary) {
  std::vector<std::string> sections = absl::GetFlag(FLAGS_sections);
  auto wants = [&](const char* name) {
    return std::find(sections.begin(), sections.end(), name) != sections.end();
  };
  for (const std::string& s : sections) {
    if (s != "gather" && s != "scatter" && s != "dense_read") {
      return absl::InvalidArgumentError(
          absl::StrCat("--sections: unknown '", s, "' (gather, scatter, dense_read)"));
    }
  }
  Context ctx;
  ctx.repeats = absl::GetFlag(FLAGS_repeats);
  ctx.seed = absl::GetFlag(FLAGS_seed);
  if (ctx.repeats < 1) return absl::InvalidArgumentError("--repeats must be >= 1");
  const std::string statistic = absl::GetFlag(FLAGS_statistic);
  if (statistic != "best" && statistic != "median") {
    return absl::InvalidArgumentError(
        absl::StrCat("--statistic: '", statistic, "' (expected best or median)"));
  }
  g_use_median = statistic == "median";
  TESSERA_ASSIGN_OR_RETURN(ctx.inflight, ParseCounts(absl::GetFlag(FLAGS_inflight), "inflight"));
  TESSERA_ASSIGN_OR_RETURN(ctx.dense_inflight,
                           ParseCounts(absl::GetFlag(FLAGS_dense_inflight), "dense_inflight"));
  // A headline setting that was not measured falls back to the last one listed.
  auto headline = [](const std::vector<int64_t>& measured, int64_t wanted, const char* flag) {
    if (std::find(measured.begin(), measured.end(), wanted) != measured.end()) return wanted;
    std::printf("note: --%s=%lld is not among the settings measured; the ratio uses %lld\n", flag,
                static_cast<long long>(wanted), static_cast<long long>(measured.back()));
    return measured.back();
  };
  ctx.ratio_inflight =
      headline(ctx.inflight, absl::GetFlag(FLAGS_ratio_inflight), "ratio_inflight");
  ctx.dense_ratio_inflight = headline(ctx.dense_inflight, absl::GetFlag(FLAGS_dense_ratio_inflight),
                                      "dense_ratio_inflight");
  TESSERA_ASSIGN_OR_RETURN(ctx.partitioner, FixedShardsPartitioner(absl::GetFlag(FLAGS_shards)));
  ClusterOptions options;
  options.num_ps = absl::GetFlag(FLAGS_ps);
  options.num_workers = 1;
  options.threads = absl::GetFlag(FLAGS_threads);
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Cluster> cluster, Cluster::StartInProcess(options));
  ParameterServerStrategy strategy(*cluster);
  ctx.cluster = cluster.get();
  ctx.strategy = &strategy;
  // What the scheduler really runs (CAF 0.17 starts max(cores, 4) workers by default).
  const int64_t threads =
      static_cast<int64_t>(cluster->actors().system().scheduler().num_workers());
  std::printf(
      "cluster: in-process, %d PS, %lld CAF scheduler threads, partitioner %s; direct paths run "
      "on the main thread\n"
      "figures: the %s of %d interleaved repeats (the other statistic beside it); cpu_us/op is "
      "the median process CPU time (all threads) per op; MB = 10^6 bytes\n",
      options.num_ps, static_cast<long long>(threads), ctx.partitioner.description().c_str(),
      statistic.c_str(), ctx.repeats);
  summary["config"] = {{"ps", options.num_ps},
                       {"scheduler_threads", threads},
                       {"shards", absl::GetFlag(FLAGS_shards)},
                       {"rows", absl::GetFlag(FLAGS_rows)},
                       {"dim", absl::GetFlag(FLAGS_dim)},
                       {"ids", absl::GetFlag(FLAGS_ids)},
                       {"ops", absl::GetFlag(FLAGS_ops)},
                       {"dense_rows", absl::GetFlag(FLAGS_dense_rows)},
                       {"dense_ops", absl::GetFlag(FLAGS_dense_ops)},
                       {"repeats", ctx.repeats},
                       {"statistic", statistic}};
  PrintHeader();
  if (wants("gather") || wants("scatter")) {
    TESSERA_RETURN_IF_ERROR(RunSparse(ctx, wants("gather"), wants("scatter"), summary));
  }
  if (wants("dense_read")) TESSERA_RETURN_IF_ERROR(RunDenseRead(ctx, summary));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  absl::ParseCommandLine(argc, argv);
  std::printf("command: %s\n", absl::StrJoin(args, " ").c_str());
  const auto start = tessera::Clock::now();
  tessera::Json summary = {{"bench", "shard_ops"}};
  const absl::Status status = tessera::Run(summary);
  if (!status.ok()) {
    std::fprintf(stderr, "shard_ops failed: %s\n", status.ToString().c_str());
    return 1;
  }
  const double seconds = tessera::Seconds(tessera::Clock::now() - start);
  std::printf(
      "ratios (actor path / direct path, %s of repeats; gather and scatter at %lld in flight, "
      "dense_read at %lld): gather %s, scatter %s, dense_read %s (targets >= 0.5); total %.1f s\n",
      absl::GetFlag(FLAGS_statistic).c_str(),
      static_cast<long long>(summary.value(
          "gather_actor_inflight",
          summary.value("scatter_actor_inflight", absl::GetFlag(FLAGS_ratio_inflight)))),
      static_cast<long long>(
          summary.value("dense_read_actor_inflight", absl::GetFlag(FLAGS_dense_ratio_inflight))),
      summary.value("gather_ratio", tessera::Json()).dump().c_str(),
      summary.value("scatter_ratio", tessera::Json()).dump().c_str(),
      summary.value("dense_read_ratio", tessera::Json()).dump().c_str(), seconds);
  summary["total_seconds"] = tessera::Round(seconds, 1);
  std::printf("%s\n", summary.dump().c_str());
  return 0;
}
