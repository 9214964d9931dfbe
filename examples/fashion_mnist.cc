// fashion_mnist: an MLP 784-256-128-10 trained asynchronously on parameter servers, on Debian's
// dataset-fashion-mnist (60k train / 10k test images under /usr/share/datasets/fashion-mnist).
//
//   fashion_mnist                              # simulation: 2 PS, 2 workers, 10 epochs, Adam
//   fashion_mnist --mode=local                 # the single-thread baseline
//   fashion_mnist --strategy=mirrored          # synchronous: 2 replicas, gradients all-reduced
//   fashion_mnist --epochs=3 --inject_worker_failures=2 --summary=run.json
//
// What a program states is here: its model, its data, its flags. The training loop, the shared
// flags (--mode, --ps, --checkpoint_dir, --cluster_spec, ...) and the summary are the library's
// (tessera/training.h).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/flags/flag.h"
#include "tessera/command_line.h"
#include "tessera/partitioner.h"
#include "tessera/status.h"
#include "tessera/training.h"
#include "tessera/workloads/fashion_mnist.h"
#include "tessera/workloads/reference_models.h"

ABSL_FLAG(int64_t, steps, 0, "training steps; 0: --epochs passes over the training set");
ABSL_FLAG(int64_t, epochs, 10, "passes over the training set (when --steps is 0)");
ABSL_FLAG(int64_t, batch_size, 128, "examples per step");
ABSL_FLAG(double, learning_rate, 1e-3, "Adam learning rate");
ABSL_FLAG(std::string, partitioner, "none",
          "how variables marked partitioned are sharded (the MLP has none): none | fixed:N | "
          "min_size:BYTES[:MAX] | max_size:BYTES[:MAX]");
ABSL_FLAG(int64_t, train_examples, 0, "use only the first N training images (0: all 60k)");
ABSL_FLAG(std::string, data_dir, tessera::kFashionMnistDir, "directory of the gzip'd IDX files");

namespace tessera {
namespace {

absl::Status Run() {
  TESSERA_ASSIGN_OR_RETURN(const TrainingFlags flags, ReadTrainingFlags());
  TrainingJob job;
  job.name = "fashion_mnist";
  job.batch_size = absl::GetFlag(FLAGS_batch_size);
  TESSERA_ASSIGN_OR_RETURN(job.partitioner, ParsePartitioner(absl::GetFlag(FLAGS_partitioner)));

  // The data: the IDX files, optionally only the first --train_examples training images.
  const std::string dir = absl::GetFlag(FLAGS_data_dir);
  TESSERA_ASSIGN_OR_RETURN(job.train, LoadFashionMnist(FashionMnistSplit::kTrain, dir));
  TESSERA_ASSIGN_OR_RETURN(job.test, LoadFashionMnist(FashionMnistSplit::kTest, dir));
  if (const int64_t n = absl::GetFlag(FLAGS_train_examples); n > 0 && n < job.train.size()) {
    TESSERA_ASSIGN_OR_RETURN(Batch first, job.train.Slice(0, n));
    TESSERA_ASSIGN_OR_RETURN(job.train, Dataset::Create(std::move(first)));
  }

  // The model: the MLP, trained by Adam.
  MlpModelOptions model_options;
  model_options.seed = flags.seed;
  TESSERA_ASSIGN_OR_RETURN(job.model, MlpModelSpec(model_options));
  job.optimizer = {"adam", {{"learning_rate", absl::GetFlag(FLAGS_learning_rate)}}};

  TESSERA_RETURN_IF_ERROR(
      ScheduleTraining(job, absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_epochs)));
  std::printf("fashion_mnist: MLP 784-256-128-10, adam lr %g, %lld train / %lld test images, %s\n",
              absl::GetFlag(FLAGS_learning_rate), static_cast<long long>(job.train.size()),
              static_cast<long long>(job.test.size()), DescribeSchedule(job).c_str());

  job.report = [](const EvalResult& eval, nlohmann::json& summary) {
    std::printf("fashion_mnist: test loss %.4f, test accuracy %.4f\n", eval.loss,
                eval.accuracy.value_or(0));
    summary["test_loss"] = eval.loss;
    summary["test_accuracy"] = eval.accuracy.value_or(0);
  };
  return RunTrainingJob(job, flags);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::ProgramHelp help;
  help.name = "fashion_mnist";
  help.usage = "fashion_mnist [flags]";
  help.about =
      "Trains an MLP 784-256-128-10 on Fashion-MNIST (Debian's dataset-fashion-mnist), "
      "asynchronously on parameter servers (--strategy=ps, the default) or synchronously with a "
      "copy of the model on every worker (--strategy=mirrored): in this process by default "
      "(--mode=sim), as the "
      "single-thread baseline (--mode=local), or as the coordinator or a worker of a networked "
      "cluster (--cluster_spec or TF_CONFIG; README, \"Deploy on several machines\").\n";
  help.groups.push_back({"Model, data and schedule", {}, __FILE__});  // the flags above
  for (const tessera::FlagGroup& group : tessera::TrainingFlagGroups()) {
    help.groups.push_back(group);
  }
  return tessera::RunProgram(argc, argv, help, tessera::Run);
}
