// local_train: trains the reference workloads (docs/design.md §5) with the LocalTrainer — one
// process, one thread — and prints throughput and learning curves. The baseline every
// distributed mode is measured against; figures go into bench/README.md.
//
//   local_train --workload=recsys          # U=100k, I=10k, D=32, batch 512, 1M examples
//   local_train --workload=fashion_mnist   # MLP 784-256-128-10, Adam 1e-3, batch 128, 10 epochs
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/training/local_trainer.h"
#include "tessera/status.h"
#include "tessera/workloads/fashion_mnist.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"

ABSL_FLAG(std::string, workload, "all", "recsys, fashion_mnist or all");
ABSL_FLAG(uint64_t, seed, 1, "model seed (initializers) and shuffling seed");

ABSL_FLAG(int64_t, users, 100000, "recsys: number of users U");
ABSL_FLAG(int64_t, items, 10000, "recsys: number of items I");
ABSL_FLAG(int64_t, embedding_dim, 32, "recsys: embedding dimension D");
ABSL_FLAG(int64_t, hidden, 64, "recsys: hidden units");
ABSL_FLAG(int64_t, train_examples, 1000000, "recsys: training examples");
ABSL_FLAG(int64_t, test_examples, 100000, "recsys: test examples");
ABSL_FLAG(int64_t, recsys_batch, 512, "recsys: batch size");
ABSL_FLAG(int64_t, recsys_epochs, 1, "recsys: passes over the training set");
ABSL_FLAG(std::string, recsys_optimizer, "adagrad", "recsys: optimizer name");
ABSL_FLAG(double, recsys_lr, 0.1, "recsys: learning rate");
ABSL_FLAG(double, initial_accumulator, 0.0,
          "recsys adagrad: initial accumulator (0 = PyTorch's default; TF/Keras use 0.1)");
ABSL_FLAG(double, adagrad_epsilon, 1e-10, "recsys adagrad: epsilon (PyTorch 1e-10, TF 1e-7)");
ABSL_FLAG(int64_t, eval_every, 200000, "recsys: evaluate on the test set every this many examples");

ABSL_FLAG(std::string, mnist_dir, tessera::kFashionMnistDir, "fashion_mnist: IDX directory");
ABSL_FLAG(int64_t, mnist_batch, 128, "fashion_mnist: batch size");
ABSL_FLAG(int64_t, mnist_epochs, 10, "fashion_mnist: epochs");
ABSL_FLAG(std::string, mnist_optimizer, "adam", "fashion_mnist: optimizer name");
ABSL_FLAG(double, mnist_lr, 1e-3, "fashion_mnist: learning rate");

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string Describe(const OptimizerSpec& spec) {
  return absl::StrCat(spec.name, " {", absl::StrJoin(spec.params, ", ", absl::PairFormatter("=")),
                      "}");
}

std::string Optional(const std::optional<double>& v) {
  return v ? absl::StrFormat("%.4f", *v) : std::string("n/a");
}

// Trains until `batches` is exhausted, calling `on_progress` whenever `every` more examples
// have been seen (and at the end). Returns the pure training time (batch assembly + steps).
template <typename OnProgress>
absl::StatusOr<double> TrainLoop(LocalTrainer& trainer, BatchIterator& batches, int64_t every,
                                 OnProgress&& on_progress) {
  Clock::duration train_time{};
  int64_t examples = 0;
  int64_t next_report = every;
  double loss_sum = 0;
  int64_t loss_examples = 0;
  while (true) {
    const Clock::time_point start = Clock::now();
    TESSERA_ASSIGN_OR_RETURN(std::optional<Batch> batch, batches.Next());
    if (!batch) break;
    TESSERA_ASSIGN_OR_RETURN(const float loss, trainer.TrainStep(*batch));
    train_time += Clock::now() - start;
    examples += batch->size;
    loss_sum += static_cast<double>(loss) * batch->size;
    loss_examples += batch->size;
    if (examples >= next_report) {
      TESSERA_RETURN_IF_ERROR(on_progress(examples, loss_sum / loss_examples, Seconds(train_time)));
      loss_sum = 0;
      loss_examples = 0;
      while (next_report <= examples) next_report += every;
    }
  }
  if (loss_examples > 0) {
    TESSERA_RETURN_IF_ERROR(on_progress(examples, loss_sum / loss_examples, Seconds(train_time)));
  }
  return Seconds(train_time);
}

absl::Status RunRecsys() {
  RecsysConfig data_config;
  data_config.num_users = absl::GetFlag(FLAGS_users);
  data_config.num_items = absl::GetFlag(FLAGS_items);
  data_config.num_train = absl::GetFlag(FLAGS_train_examples);
  data_config.num_test = absl::GetFlag(FLAGS_test_examples);
  const Clock::time_point gen_start = Clock::now();
  TESSERA_ASSIGN_OR_RETURN(RecsysData data, GenerateRecsysData(data_config));
  std::printf("recsys: U=%lld I=%lld train=%lld test=%lld (generated in %.2f s), Bayes AUC %.4f\n",
              static_cast<long long>(data_config.num_users),
              static_cast<long long>(data_config.num_items),
              static_cast<long long>(data.train.size()), static_cast<long long>(data.test.size()),
              Seconds(Clock::now() - gen_start), data.bayes_auc);

  RecsysModelOptions model_options;
  model_options.num_users = data_config.num_users;
  model_options.num_items = data_config.num_items;
  model_options.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  model_options.hidden_units = absl::GetFlag(FLAGS_hidden);
  model_options.seed = absl::GetFlag(FLAGS_seed);
  TESSERA_ASSIGN_OR_RETURN(ModelSpec spec, RecsysModelSpec(model_options));
  OptimizerSpec optimizer{absl::GetFlag(FLAGS_recsys_optimizer),
                          {{"learning_rate", absl::GetFlag(FLAGS_recsys_lr)}}};
  if (optimizer.name == "adagrad") {
    optimizer.params["initial_accumulator_value"] = absl::GetFlag(FLAGS_initial_accumulator);
    optimizer.params["epsilon"] = absl::GetFlag(FLAGS_adagrad_epsilon);
  }
  TESSERA_ASSIGN_OR_RETURN(LocalTrainer trainer, LocalTrainer::Create(spec, optimizer));
  const bool pytorch_style = optimizer.name == "adagrad" &&
                             trainer.optimizer().spec().params.at("initial_accumulator_value") == 0;
  std::printf("recsys: D=%lld hidden=%lld batch=%lld epochs=%lld optimizer %s%s\n",
              static_cast<long long>(model_options.embedding_dim),
              static_cast<long long>(model_options.hidden_units),
              static_cast<long long>(absl::GetFlag(FLAGS_recsys_batch)),
              static_cast<long long>(absl::GetFlag(FLAGS_recsys_epochs)),
              Describe(trainer.optimizer().spec()).c_str(),
              optimizer.name != "adagrad" ? ""
              : pytorch_style             ? " (PyTorch-style initial accumulator 0)"
                                          : " (TF-style nonzero initial accumulator)");
  std::printf("recsys: init embeddings U(-0.05, 0.05), dense glorot_uniform, biases 0\n");

  BatchOptions batch_options;
  batch_options.batch_size = absl::GetFlag(FLAGS_recsys_batch);
  batch_options.num_epochs = absl::GetFlag(FLAGS_recsys_epochs);
  TESSERA_ASSIGN_OR_RETURN(BatchIterator batches, BatchIterator::Create(data.train, batch_options));
  std::printf("%12s %12s %10s %10s %10s %12s\n", "examples", "train_loss", "test_loss", "test_auc",
              "test_acc", "examples/s");
  TESSERA_ASSIGN_OR_RETURN(
      const double train_seconds,
      TrainLoop(trainer, batches, absl::GetFlag(FLAGS_eval_every),
                [&](int64_t examples, double train_loss, double seconds) -> absl::Status {
                  TESSERA_ASSIGN_OR_RETURN(EvalResult eval, trainer.Evaluate(data.test));
                  std::printf("%12lld %12.4f %10.4f %10s %10s %12.0f\n",
                              static_cast<long long>(examples), train_loss, eval.loss,
                              Optional(eval.auc).c_str(), Optional(eval.accuracy).c_str(),
                              examples / seconds);
                  std::fflush(stdout);
                  return absl::OkStatus();
                }));
  const int64_t total = data.train.size() * absl::GetFlag(FLAGS_recsys_epochs);
  std::printf(
      "recsys: trained %lld examples in %.2f s: %.0f examples/s (%lld steps, %.1f us/step)\n",
      static_cast<long long>(total), train_seconds, total / train_seconds,
      static_cast<long long>(trainer.steps()), 1e6 * train_seconds / trainer.steps());
  return absl::OkStatus();
}

absl::Status RunFashionMnist() {
  const std::string dir = absl::GetFlag(FLAGS_mnist_dir);
  TESSERA_ASSIGN_OR_RETURN(Dataset train, LoadFashionMnist(FashionMnistSplit::kTrain, dir));
  TESSERA_ASSIGN_OR_RETURN(Dataset test, LoadFashionMnist(FashionMnistSplit::kTest, dir));
  MlpModelOptions model_options;
  model_options.seed = absl::GetFlag(FLAGS_seed);
  TESSERA_ASSIGN_OR_RETURN(ModelSpec spec, MlpModelSpec(model_options));
  const OptimizerSpec optimizer{absl::GetFlag(FLAGS_mnist_optimizer),
                                {{"learning_rate", absl::GetFlag(FLAGS_mnist_lr)}}};
  TESSERA_ASSIGN_OR_RETURN(LocalTrainer trainer, LocalTrainer::Create(spec, optimizer));
  const int64_t epochs = absl::GetFlag(FLAGS_mnist_epochs);
  std::printf(
      "fashion_mnist: train=%lld test=%lld MLP 784-256-128-10 batch=%lld epochs=%lld "
      "optimizer %s, glorot_uniform kernels, zero biases, shuffled per epoch\n",
      static_cast<long long>(train.size()), static_cast<long long>(test.size()),
      static_cast<long long>(absl::GetFlag(FLAGS_mnist_batch)), static_cast<long long>(epochs),
      Describe(trainer.optimizer().spec()).c_str());
  BatchOptions batch_options;
  batch_options.batch_size = absl::GetFlag(FLAGS_mnist_batch);
  batch_options.shuffle = true;
  batch_options.seed = absl::GetFlag(FLAGS_seed);
  batch_options.num_epochs = epochs;
  TESSERA_ASSIGN_OR_RETURN(BatchIterator batches, BatchIterator::Create(train, batch_options));
  std::printf("%6s %12s %10s %10s %12s\n", "epoch", "train_loss", "test_loss", "test_acc",
              "examples/s");
  int epoch = 0;
  TESSERA_ASSIGN_OR_RETURN(
      const double train_seconds,
      TrainLoop(trainer, batches, train.size(),
                [&](int64_t examples, double train_loss, double seconds) -> absl::Status {
                  TESSERA_ASSIGN_OR_RETURN(EvalResult eval, trainer.Evaluate(test));
                  std::printf("%6d %12.4f %10.4f %10s %12.0f\n", ++epoch, train_loss, eval.loss,
                              Optional(eval.accuracy).c_str(), examples / seconds);
                  std::fflush(stdout);
                  return absl::OkStatus();
                }));
  const int64_t total = train.size() * epochs;
  std::printf(
      "fashion_mnist: trained %lld examples in %.2f s: %.0f examples/s (%lld steps, "
      "%.1f us/step)\n",
      static_cast<long long>(total), train_seconds, total / train_seconds,
      static_cast<long long>(trainer.steps()), 1e6 * train_seconds / trainer.steps());
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  absl::ParseCommandLine(argc, argv);
  std::printf("command: %s\n", absl::StrJoin(args, " ").c_str());
  const std::string workload = absl::GetFlag(FLAGS_workload);
  if (workload != "all" && workload != "recsys" && workload != "fashion_mnist") {
    std::fprintf(stderr, "unknown --workload=%s (expected recsys, fashion_mnist or all)\n",
                 workload.c_str());
    return 2;
  }
  for (const char* name : {"recsys", "fashion_mnist"}) {
    if (workload != "all" && workload != name) continue;
    const absl::Status status =
        std::string(name) == "recsys" ? tessera::RunRecsys() : tessera::RunFashionMnist();
    if (!status.ok()) {
      std::fprintf(stderr, "%s failed: %s\n", name, status.ToString().c_str());
      return 1;
    }
  }
  return 0;
}
