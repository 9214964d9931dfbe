// train_throughput: the recsys reference workload (docs/design.md §5) trained by the single-thread
// local trainer and by the parameter-server simulation, interleaved in one run on the same data
// and batch stream, so their ratio is measured under the same machine conditions.
//
//   train_throughput                        # 3 rounds of: local, sim (2 PS, 2 workers)
// It takes the training flags' --ps, --workers and --closures_per_worker
// (coordinator/training/training_flags.h).
//   train_throughput --rounds=5 --workers=4 --closures_per_worker=2
//
// Each round trains a fresh model for one pass over the training set; examples/s counts the
// training loop only (not data generation or evaluation). The figure per mode is the median
// round. The last line is one JSON object with both sides and `sim_vs_local`.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "bench/internal/recsys_job.h"
#include "coordinator/ps/parameter_server_training.h"
#include "coordinator/training/local_training.h"
#include "coordinator/training/training_flags.h"
#include "tessera/status.h"

ABSL_FLAG(int32_t, rounds, 3, "rounds of (local, sim)");
ABSL_FLAG(std::string, partitioner, "fixed:4", "simulation: embedding partitioner");
ABSL_FLAG(int64_t, train_examples, 1000000, "training examples (one pass per round)");
ABSL_FLAG(int64_t, batch_size, 512, "examples per step");

namespace tessera {
namespace {

using bench::Median;

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  TESSERA_ASSIGN_OR_RETURN(TrainingJob job,
                           bench::RecsysThroughputJob(absl::GetFlag(FLAGS_train_examples),
                                                      absl::GetFlag(FLAGS_batch_size),
                                                      absl::GetFlag(FLAGS_partitioner)));
  // The shared training flags: --ps, --workers, --closures_per_worker (defaults 2, 2, 1).
  TESSERA_ASSIGN_OR_RETURN(TrainingFlags flags, ReadTrainingFlags());
  const ParameterServerTrainingOptions& sim = flags.parameter_servers;

  std::vector<double> local_eps, sim_eps;
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    nlohmann::json ignored;
    job.name = "local";
    TESSERA_ASSIGN_OR_RETURN(TrainingRun local,
                             TrainLocally(job, /*seed=*/1, /*eval_every=*/0, ignored));
    local_eps.push_back(local.examples / local.wall_seconds);
    job.name = "sim";
    TESSERA_ASSIGN_OR_RETURN(TrainingRun run,
                             TrainOnParameterServers(job, sim, /*eval_every=*/0, ignored));
    sim_eps.push_back(run.examples / run.wall_seconds);
    std::printf("round %d: local %.0f examples/s, sim %.0f examples/s (%.2fx)\n", r,
                local_eps.back(), sim_eps.back(), sim_eps.back() / local_eps.back());
  }
  const double local = Median(local_eps), simulated = Median(sim_eps);
  std::printf("median: local %.0f examples/s, sim (%d PS, %d workers, %d closure(s) each) %.0f "
              "examples/s: %.2fx\n",
              local, sim.ps, sim.workers, sim.closures_per_worker, simulated, simulated / local);
  nlohmann::json out;
  out["local_examples_per_sec"] = local;
  out["sim_examples_per_sec"] = simulated;
  out["sim_vs_local"] = simulated / local;
  out["local_rounds"] = local_eps;
  out["sim_rounds"] = sim_eps;
  out["ps"] = sim.ps;
  out["workers"] = sim.workers;
  out["closures_per_worker"] = sim.closures_per_worker;
  std::printf("%s\n", out.dump().c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::bench::Main("train_throughput", argc, argv, tessera::Run);
}
