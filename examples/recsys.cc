// recsys: the RFC's recommendation model (docs/design.md §5) trained asynchronously on parameter
// servers — user and item embeddings sharded across PS tasks, workers running training steps on
// their own part of the data, a coordinator scheduling them and surviving preempted workers.
//
//   recsys                                   # simulation: 2 PS, 2 workers, one pass over 1M clicks
//   recsys --mode=local                      # the single-thread baseline, same model and data
//   recsys --inject_worker_failures=5        # preempt 5 workers mid-closure; each comes back
//   recsys --partitioner=max_size:262144 --summary=run.json
//   recsys --cluster_spec=cluster.json --checkpoint_dir=/shared/ckpt   # networked coordinator
//   recsys --cluster_spec=cluster.json --role=worker --task=0           # a worker process
//   TF_CONFIG='{"cluster": {...}, "task": {"type": "worker", "index": 0}}' recsys  # the same
//   recsys --help                            # every flag, in groups
//
// Data: synthetic clicks from a planted model; the test AUC is reported next to the Bayes-optimal
// AUC of the planted logits (about 0.77, out of reach: cold ids are rare).
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
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"

ABSL_FLAG(int64_t, steps, 0, "training steps; 0: --epochs passes over the training set");
ABSL_FLAG(int64_t, epochs, 1, "passes over the training set (when --steps is 0)");
ABSL_FLAG(int64_t, batch_size, 512, "examples per step");
ABSL_FLAG(double, learning_rate, 0.1, "Adagrad learning rate");
ABSL_FLAG(double, initial_accumulator, 0.0,
          "Adagrad initial accumulator: 0 is PyTorch's default and learns much faster on rare "
          "ids; TF/Keras use 0.1");
ABSL_FLAG(int64_t, users, 100000, "users U (rows of the user embedding)");
ABSL_FLAG(int64_t, items, 10000, "items I (rows of the item embedding)");
ABSL_FLAG(int64_t, embedding_dim, 32, "embedding dimension D");
ABSL_FLAG(int64_t, hidden, 64, "hidden units");
ABSL_FLAG(int64_t, train_examples, 1000000, "training examples");
ABSL_FLAG(int64_t, test_examples, 100000, "test examples");
ABSL_FLAG(std::string, partitioner, "fixed:4",
          "how embeddings are sharded: none | fixed:N | min_size:BYTES[:MAX] | "
          "max_size:BYTES[:MAX]");

namespace tessera {
namespace {

absl::Status Run() {
  TESSERA_ASSIGN_OR_RETURN(const TrainingFlags flags, ReadTrainingFlags());
  TrainingJob job;
  job.name = "recsys";
  job.batch_size = absl::GetFlag(FLAGS_batch_size);
  TESSERA_ASSIGN_OR_RETURN(job.partitioner, ParsePartitioner(absl::GetFlag(FLAGS_partitioner)));

  // The data: clicks drawn from a planted model.
  RecsysConfig data_config;
  data_config.num_users = absl::GetFlag(FLAGS_users);
  data_config.num_items = absl::GetFlag(FLAGS_items);
  data_config.num_train = absl::GetFlag(FLAGS_train_examples);
  data_config.num_test = absl::GetFlag(FLAGS_test_examples);
  TESSERA_ASSIGN_OR_RETURN(const RecsysData data, GenerateRecsysData(data_config));
  job.train = data.train;
  job.test = data.test;

  // The model: user and item embeddings -> Dense(hidden, relu) -> Dense(1), trained by Adagrad.
  RecsysModelOptions model_options;
  model_options.num_users = data_config.num_users;
  model_options.num_items = data_config.num_items;
  model_options.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  model_options.hidden_units = absl::GetFlag(FLAGS_hidden);
  model_options.seed = flags.seed;
  TESSERA_ASSIGN_OR_RETURN(job.model, RecsysModelSpec(model_options));
  job.optimizer = {"adagrad",
                   {{"learning_rate", absl::GetFlag(FLAGS_learning_rate)},
                    {"initial_accumulator_value", absl::GetFlag(FLAGS_initial_accumulator)}}};

  TESSERA_RETURN_IF_ERROR(
      ScheduleTraining(job, absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_epochs)));
  std::printf("recsys: U=%lld I=%lld D=%lld hidden=%lld, %lld train / %lld test examples, "
              "Bayes AUC %.4f\n",
              static_cast<long long>(data_config.num_users),
              static_cast<long long>(data_config.num_items),
              static_cast<long long>(model_options.embedding_dim),
              static_cast<long long>(model_options.hidden_units),
              static_cast<long long>(data.train.size()), static_cast<long long>(data.test.size()),
              data.bayes_auc);
  std::printf("recsys: adagrad lr %g, initial accumulator %g; %s\n",
              absl::GetFlag(FLAGS_learning_rate), absl::GetFlag(FLAGS_initial_accumulator),
              DescribeSchedule(job).c_str());

  const double bayes_auc = data.bayes_auc;
  job.report = [bayes_auc](const EvalResult& eval, nlohmann::json& summary) {
    std::printf("recsys: test loss %.4f, test AUC %.4f (Bayes-optimal %.4f), accuracy %.4f\n",
                eval.loss, eval.auc.value_or(0), bayes_auc, eval.accuracy.value_or(0));
    summary["test_loss"] = eval.loss;
    summary["test_auc"] = eval.auc.value_or(0);
    summary["bayes_auc"] = bayes_auc;
  };
  return RunTrainingJob(job, flags);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::ProgramHelp help;
  help.name = "recsys";
  help.usage = "recsys [flags]";
  help.about =
      "Trains the recsys reference model (user and item embeddings -> Dense(hidden, relu) -> "
      "Dense(1), Adagrad) on synthetic clicks from a planted model, asynchronously on parameter "
      "servers: in this process by default (--mode=sim), as the single-thread baseline "
      "(--mode=local), or as the coordinator or a worker of a networked cluster (--cluster_spec "
      "or TF_CONFIG; README, \"Deploy on several machines\").\n";
  help.groups.push_back({"Model, data and schedule", {}, __FILE__});  // the flags above
  for (const tessera::FlagGroup& group : tessera::TrainingFlagGroups()) {
    help.groups.push_back(group);
  }
  return tessera::RunProgram(argc, argv, help, tessera::Run);
}
