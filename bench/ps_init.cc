// ps_init: how long creating a model's variables on the parameter servers takes, and what the
// initializer itself costs.
//
//   ps_init                                  # recsys U=250000 I=25000 D=1000 (2.2 GB), 3 rounds
//   ps_init --users=600000 --items=60000     # the RFC's model (2.64 GB of values, 5.3 GB in all)
//   ps_init --initial_accumulator=0.1        # Keras' Adagrad: the slots are written too
//
// Model: the recsys reference model (tessera/workloads/reference_models.h: user and item
// embeddings of D floats, random_uniform, and a small dense head) trained by Adagrad, its
// embeddings in --shards shards each (fixed), on --ps in-process PS nodes. A round starts a fresh cluster and
// times ParameterServerStrategy::CreateModelVariables: every shard allocated and its Adagrad slot
// made, on the PS nodes (rows are initialized when training first touches them: Note [Rows
// initialized on first touch], core/ps/first_touch.h). GB/s counts the values and the slots
// (what the model holds). Also printed: the CPU seconds the round took (on a loaded machine the
// wall time counts other processes' turns too), the process's RSS after the round (the memory
// touched: values always, slots only when they start non-zero) and its peak, and, on one thread,
// the initializer alone per kind (floats/s into memory already touched) and random_uniform into a
// fresh block (page faults included), and each batched Philox variant the CPU runs. The last line
// is one JSON object with the medians.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "cluster/base/cluster.h"
#include "coordinator/ps/strategy.h"
#include "core/base/internal/philox_batch.h"
#include "core/model/model.h"
#include "tessera/model.h"
#include "tessera/partitioner.h"
#include "tessera/status.h"
#include "tessera/workloads/reference_models.h"

ABSL_FLAG(int64_t, users, 250000, "rows of the user embedding");
ABSL_FLAG(int64_t, items, 25000, "rows of the item embedding");
ABSL_FLAG(int64_t, dim, 1000, "embedding dimension D");
ABSL_FLAG(int64_t, shards, 4, "shards per embedding (FixedShardsPartitioner)");
ABSL_FLAG(int32_t, ps, 2, "in-process PS nodes");
ABSL_FLAG(int32_t, rounds, 3, "rounds (each on a fresh cluster)");
ABSL_FLAG(double, initial_accumulator, 0.0,
          "Adagrad's initial accumulator (0: slots start at zero, as recsys --initial_accumulator "
          "defaults to)");
ABSL_FLAG(int64_t, kernel_floats, 64 << 20, "floats per initializer-alone measurement");

namespace tessera {
namespace {

using bench::Median;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Resident and peak resident bytes of this process.
int64_t RssBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}
// CPU seconds (user + system) this process has used: on a loaded machine the work a round did,
// where its wall time also counts the other processes' turns.
double CpuSeconds() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_utime.tv_sec + usage.ru_utime.tv_usec / 1e6 + usage.ru_stime.tv_sec +
         usage.ru_stime.tv_usec / 1e6;
}
int64_t PeakRssBytes() {
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

// Floats/s of the initializer `spec` alone over `n` floats on this thread: into a block filled
// once before the timing (no page faults), best of 3.
double KernelFloatsPerSecond(const InitializerSpec& spec, int64_t n) {
  const Shape shape{n / 1000, 1000};
  Tensor block(shape, 1.0f);
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const Clock::time_point start = Clock::now();
    const absl::Status s = InitializeBlock(spec, shape, 0, block.view());
    const double rate = static_cast<double>(shape.num_elements()) / Seconds(start);
    if (!s.ok()) return 0;
    best = std::max(best, rate);
  }
  return best;
}

// Where the Philox measurement leaves its results, so that its loop cannot be dropped.
volatile uint32_t philox_sink = 0;

// Counters/s of one batched Philox variant on this thread over `n` counters, best of 3: the
// generator under every random initializer (core/base/internal/philox_batch.h).
double PhiloxCountersPerSecond(const internal::PhiloxBatchVariant& variant, int64_t n) {
  uint32_t word0[internal::kPhiloxLanes], word1[internal::kPhiloxLanes];
  uint32_t sink = 0;
  double best = 0;
  for (int r = 0; r < 3; ++r) {
    const Clock::time_point start = Clock::now();
    for (int64_t first = 0; first < n; first += internal::kPhiloxLanes) {
      variant.fn(1, 2, static_cast<uint64_t>(first), word0, word1);
      sink ^= word0[first & (internal::kPhiloxLanes - 1)] ^ word1[0];
    }
    best = std::max(best, static_cast<double>(n) / Seconds(start));
  }
  philox_sink = sink;
  return best;
}

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  RecsysModelOptions model_options;
  model_options.num_users = absl::GetFlag(FLAGS_users);
  model_options.num_items = absl::GetFlag(FLAGS_items);
  model_options.embedding_dim = absl::GetFlag(FLAGS_dim);
  model_options.seed = 1;
  TESSERA_ASSIGN_OR_RETURN(ModelSpec spec, RecsysModelSpec(model_options));
  TESSERA_ASSIGN_OR_RETURN(Model built, Model::Create(spec));
  auto model = std::make_shared<const Model>(std::move(built));
  const OptimizerSpec adagrad{
      "adagrad",
      {{"learning_rate", 0.1},
       {"initial_accumulator_value", absl::GetFlag(FLAGS_initial_accumulator)},
       {"epsilon", 1e-7}}};
  int64_t value_bytes = 0;
  for (const ParamSpec& p : spec.params) value_bytes += p.shape.num_elements() * 4;
  const double gb = 2.0 * static_cast<double>(value_bytes) / 1e9;  // values + one slot each
  TESSERA_ASSIGN_OR_RETURN(Partitioner partitioner,
                           FixedShardsPartitioner(absl::GetFlag(FLAGS_shards)));
  std::printf("recsys U=%lld I=%lld D=%lld: %.2f GB of values + %.2f GB of Adagrad slots "
              "(initial accumulator %g), embeddings in %lld shards on %d PS, %u cores\n",
              static_cast<long long>(model_options.num_users),
              static_cast<long long>(model_options.num_items),
              static_cast<long long>(model_options.embedding_dim), value_bytes / 1e9,
              value_bytes / 1e9, absl::GetFlag(FLAGS_initial_accumulator),
              static_cast<long long>(absl::GetFlag(FLAGS_shards)), absl::GetFlag(FLAGS_ps),
              std::thread::hardware_concurrency());

  std::vector<double> seconds, cpu_seconds, rss_gb;
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    ClusterOptions cluster_options;
    cluster_options.num_ps = absl::GetFlag(FLAGS_ps);
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Cluster> cluster,
                             Cluster::StartInProcess(cluster_options));
    const int64_t rss_before = RssBytes();
    double s = 0;
    {
      ParameterServerStrategy strategy(*cluster, partitioner);
      const Clock::time_point start = Clock::now();
      const double cpu_start = CpuSeconds();
      TESSERA_ASSIGN_OR_RETURN(auto vars, strategy.CreateModelVariables(model, adagrad));
      s = Seconds(start);
      seconds.push_back(s);
      cpu_seconds.push_back(CpuSeconds() - cpu_start);
      rss_gb.push_back(static_cast<double>(RssBytes() - rss_before) / 1e9);
    }
    std::printf("round %d: %.2f s, %.2f GB/s (%.2f CPU s); RSS +%.2f GB (peak %.2f GB)\n", r, s,
                gb / s, cpu_seconds.back(), rss_gb.back(), PeakRssBytes() / 1e9);
    cluster.reset();  // the shards go with their nodes
  }

  const int64_t n = absl::GetFlag(FLAGS_kernel_floats);
  nlohmann::json kernels;
  for (const InitializerSpec& init :
       {InitializerSpec{"random_uniform", {}, 1}, InitializerSpec{"glorot_uniform", {}, 1},
        InitializerSpec{"random_normal", {}, 1}, InitializerSpec{"truncated_normal", {}, 1},
        InitializerSpec{"constant", {{"value", 0.1}}, 0}}) {
    const double rate = KernelFloatsPerSecond(init, n);
    kernels[init.name] = rate;
    std::printf("initializer %-16s %6.0f M floats/s (one thread, memory already touched)\n",
                init.name.c_str(), rate / 1e6);
  }
  nlohmann::json philox;
  for (const internal::PhiloxBatchVariant& variant : internal::RunnablePhiloxBatches()) {
    const double rate = PhiloxCountersPerSecond(variant, n);
    philox[variant.name] = rate;
    std::printf("philox %-8s %6.0f M counters/s (one thread; two floats' bits each)\n",
                variant.name, rate / 1e6);
  }
  // random_uniform into a fresh block: what a shard pays, page faults included.
  const Clock::time_point start = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(Tensor fresh,
                           MakeInitializedBlock(InitializerSpec{"random_uniform", {}, 1},
                                                Shape{n / 1000, 1000}, 0, n / 1000));
  const double fresh_rate = static_cast<double>(fresh.size()) / Seconds(start);
  std::printf("initializer random_uniform into a fresh block: %.0f M floats/s (%.2f GB/s)\n",
              fresh_rate / 1e6, fresh_rate * 4 / 1e9);

  nlohmann::json out;
  out["bench"] = "ps_init";
  out["gigabytes"] = gb;
  out["seconds"] = Median(seconds);
  out["gb_per_s"] = gb / Median(seconds);
  out["cpu_seconds"] = Median(cpu_seconds);
  out["rss_gb"] = Median(rss_gb);
  out["peak_rss_gb"] = PeakRssBytes() / 1e9;
  out["kernel_floats_per_s"] = kernels;
  out["philox_counters_per_s"] = philox;
  out["fresh_uniform_floats_per_s"] = fresh_rate;
  std::printf("median: %.2f s to create %.2f GB (%.2f GB/s), %.2f CPU s\n", Median(seconds), gb,
              gb / Median(seconds), Median(cpu_seconds));
  std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) { return tessera::bench::Main("ps_init", argc, argv, tessera::Run); }
