// fashion_mnist: an MLP 784-256-128-10 trained asynchronously on parameter servers, on Debian's
// dataset-fashion-mnist (60k train / 10k test images under /usr/share/datasets/fashion-mnist).
//
//   fashion_mnist                              # simulation: 2 PS, 2 workers, 10 epochs, Adam
//   fashion_mnist --mode=local                 # the single-thread baseline
//   fashion_mnist --epochs=3 --inject_worker_failures=2 --summary=run.json
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "core/fashion_mnist.h"
#include "core/local_trainer.h"
#include "core/reference_models.h"
#include "core/status.h"
#include "examples/internal/driver.h"

ABSL_FLAG(std::string, mode, "sim", "sim (parameter servers in one process) or local (baseline)");
ABSL_FLAG(int32_t, ps, 2, "parameter-server tasks");
ABSL_FLAG(int32_t, workers, 2, "worker tasks");
ABSL_FLAG(int64_t, steps, 0, "training steps; 0: --epochs passes over the training set");
ABSL_FLAG(int64_t, epochs, 10, "passes over the training set (when --steps is 0)");
ABSL_FLAG(int64_t, batch_size, 128, "examples per step");
ABSL_FLAG(double, learning_rate, 1e-3, "Adam learning rate");
ABSL_FLAG(std::string, partitioner, "none",
          "how variables marked partitioned are sharded (the MLP has none): none | fixed:N | "
          "min_size:BYTES[:MAX] | max_size:BYTES[:MAX]");
ABSL_FLAG(int64_t, train_examples, 0, "use only the first N training images (0: all 60k)");
ABSL_FLAG(std::string, data_dir, tessera::kFashionMnistDir, "directory of the gzip'd IDX files");
ABSL_FLAG(int32_t, closures_per_worker, 1,
          "closures each worker runs at once (1: TF's behaviour; 2 overlaps communication with "
          "compute)");
ABSL_FLAG(std::string, checkpoint_dir, "", "save checkpoints under this directory (sim mode)");
ABSL_FLAG(int64_t, checkpoint_every, 0, "steps between checkpoints (0: only at the end)");
ABSL_FLAG(bool, resume, false,
          "continue from the latest checkpoint in --checkpoint_dir (any --ps or --partitioner)");
ABSL_FLAG(std::string, export_dir, "", "export the trained model here for serving (sim mode)");
ABSL_FLAG(int32_t, inject_worker_failures, 0,
          "kill this many workers at random moments (mid-closure); each restarts after a delay");
ABSL_FLAG(int64_t, restart_delay_ms, 100, "how long a killed worker stays down");
ABSL_FLAG(uint64_t, seed, 1, "model and shuffling seed");
ABSL_FLAG(std::string, summary, "", "write a JSON summary of the run here");

namespace tessera {
namespace {

absl::Status Run() {
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "sim" && mode != "local") {
    return absl::InvalidArgumentError(absl::StrCat("--mode must be sim or local, not ", mode));
  }
  if (mode == "local" && (!absl::GetFlag(FLAGS_checkpoint_dir).empty() ||
                          absl::GetFlag(FLAGS_resume) || !absl::GetFlag(FLAGS_export_dir).empty())) {
    return absl::InvalidArgumentError(
        "--checkpoint_dir, --resume and --export_dir work on parameter servers: use --mode=sim");
  }
  const int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  if (batch_size < 1) return absl::InvalidArgumentError("--batch_size must be >= 1");
  ASSIGN_OR_RETURN(Partitioner partitioner, ParsePartitioner(absl::GetFlag(FLAGS_partitioner)));

  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  ASSIGN_OR_RETURN(Dataset train, LoadFashionMnist(FashionMnistSplit::kTrain, dir));
  ASSIGN_OR_RETURN(Dataset test, LoadFashionMnist(FashionMnistSplit::kTest, dir));
  if (const int64_t n = absl::GetFlag(FLAGS_train_examples); n > 0 && n < train.size()) {
    ASSIGN_OR_RETURN(Batch first, train.Slice(0, n));
    ASSIGN_OR_RETURN(train, Dataset::Create(std::move(first)));
  }

  MlpModelOptions model_options;
  model_options.seed = absl::GetFlag(FLAGS_seed);
  ASSIGN_OR_RETURN(ModelSpec spec, MlpModelSpec(model_options));
  const OptimizerSpec optimizer{"adam", {{"learning_rate", absl::GetFlag(FLAGS_learning_rate)}}};
  ASSIGN_OR_RETURN(LocalTrainer trainer, LocalTrainer::Create(spec, optimizer));

  int64_t steps = absl::GetFlag(FLAGS_steps);
  if (steps <= 0) {
    steps = absl::GetFlag(FLAGS_epochs) * ((train.size() + batch_size - 1) / batch_size);
  }
  std::printf("fashion_mnist: MLP 784-256-128-10, adam lr %g, %lld train / %lld test images, "
              "%lld steps of %lld\n",
              absl::GetFlag(FLAGS_learning_rate), static_cast<long long>(train.size()),
              static_cast<long long>(test.size()), static_cast<long long>(steps),
              static_cast<long long>(batch_size));

  nlohmann::json summary;
  driver::TrainingRun run;
  if (mode == "local") {
    ASSIGN_OR_RETURN(run, driver::TrainLocally(trainer, train, steps, batch_size,
                                               absl::GetFlag(FLAGS_seed), "fashion_mnist",
                                               summary));
  } else {
    driver::SimOptions sim;
    sim.ps = absl::GetFlag(FLAGS_ps);
    sim.workers = absl::GetFlag(FLAGS_workers);
    sim.partitioner = partitioner;
    sim.closures_per_worker = absl::GetFlag(FLAGS_closures_per_worker);
    sim.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
    sim.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
    sim.resume = absl::GetFlag(FLAGS_resume);
    sim.export_dir = absl::GetFlag(FLAGS_export_dir);
    sim.inject_worker_failures = absl::GetFlag(FLAGS_inject_worker_failures);
    sim.restart_delay = absl::Milliseconds(absl::GetFlag(FLAGS_restart_delay_ms));
    sim.seed = absl::GetFlag(FLAGS_seed);
    ASSIGN_OR_RETURN(run, driver::TrainInSimulation(trainer, train, steps, batch_size, sim,
                                                    "fashion_mnist", summary));
  }

  ASSIGN_OR_RETURN(EvalResult eval, trainer.Evaluate(test));
  const double eps = run.examples / std::max(run.wall_seconds, 1e-9);
  std::printf("fashion_mnist: %lld examples in %.2f s (%.0f examples/s); final train loss %.4f\n",
              static_cast<long long>(run.examples), run.wall_seconds, eps, run.final_loss);
  std::printf("fashion_mnist: test loss %.4f, test accuracy %.4f\n", eval.loss,
              eval.accuracy.value_or(0));
  summary["workload"] = "fashion_mnist";
  summary["steps"] = run.steps;
  summary["examples"] = run.examples;
  summary["wall_seconds"] = run.wall_seconds;
  summary["examples_per_sec"] = eps;
  summary["final_loss"] = run.final_loss;
  summary["test_loss"] = eval.loss;
  summary["test_accuracy"] = eval.accuracy.value_or(0);
  return driver::WriteSummary(absl::GetFlag(FLAGS_summary), summary);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("Trains an MLP on Fashion-MNIST on parameter servers.");
  absl::ParseCommandLine(argc, argv);
  if (absl::Status status = tessera::Run(); !status.ok()) {
    std::fprintf(stderr, "fashion_mnist: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
