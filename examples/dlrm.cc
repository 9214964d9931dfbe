// dlrm: Facebook's DLRM trained asynchronously on parameter servers, on click logs in Criteo's
// layout (a label, 13 integer features, 26 categorical features as hex strings, tab-separated,
// plain or gzip) — or any delimited layout described by --columns.
//
//   tessera generate criteo --train_examples=2000000 --test_examples=200000 --out=/tmp/criteo
//   dlrm --train_data=/tmp/criteo.train.tsv --test_data=/tmp/criteo.test.tsv
//   dlrm ... --mode=local                                    # the single-thread baseline
//   dlrm ... --checkpoint_dir=/tmp/ckpt --ps=4               # resume later on another --ps
//   dlrm ... --export_dir=/tmp/dlrm_model && tessera serve --model=/tmp/dlrm_model
//   dlrm --help                                              # every flag, in groups
//
// The model: the dense features through log(1 + x) and a bottom MLP whose last layer has the
// embedding width; each categorical feature hashed into its own table; DLRM's pairwise dot
// interaction of the bottom MLP's output and the embeddings, next to that output; a top MLP to one
// logit. Every width is inferred (tessera/model.h). Each process reads only the batches
// it trains (tessera/delimited_text.h), so the files may be far larger than memory.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tessera/command_line.h"
#include "tessera/delimited_text.h"
#include "tessera/model.h"
#include "tessera/partitioner.h"
#include "tessera/status.h"
#include "tessera/training.h"

ABSL_FLAG(std::string, train_data, "",
          "training files, comma-separated (plain or gzip); `tessera generate criteo` writes some");
ABSL_FLAG(std::string, test_data, "", "test files, comma-separated");
ABSL_FLAG(std::string, columns, "criteo",
          "the files' layout: criteo, or a column spec (tessera/delimited_text.h), e.g. "
          "\"label,dense:counts*13,cat:site,list:tags:|\"");
ABSL_FLAG(bool, skip_bad_lines, false,
          "count and skip malformed lines instead of stopping at the first");
ABSL_FLAG(std::string, delimiter, "tab",
          "the character between a line's fields: tab, comma, or any one character");
ABSL_FLAG(bool, header, false, "each file's first line names the columns: no example");
ABSL_FLAG(int64_t, steps, 0, "training steps; 0: --epochs passes over the training set");
ABSL_FLAG(int64_t, epochs, 1, "passes over the training set (when --steps is 0)");
ABSL_FLAG(int64_t, batch_size, 512, "examples per step");
ABSL_FLAG(double, learning_rate, 0.05, "Adagrad learning rate");
ABSL_FLAG(double, initial_accumulator, 0.0, "Adagrad initial accumulator (PyTorch's default 0)");
ABSL_FLAG(int64_t, buckets, 100000, "rows of each categorical feature's hashed table");
ABSL_FLAG(int64_t, embedding_dim, 16, "embedding width (the bottom MLP ends at it)");
ABSL_FLAG(std::string, bottom_mlp, "64", "the bottom MLP's hidden layers before its last");
ABSL_FLAG(std::string, top_mlp, "128,64", "the top MLP's hidden layers before the logit");
ABSL_FLAG(std::string, partitioner, "fixed:2",
          "how tables are sharded: none | fixed:N | min_size:BYTES[:MAX] | max_size:BYTES[:MAX]");

namespace tessera {
namespace {

absl::StatusOr<std::vector<int64_t>> ParseLayers(const std::string& flag, const std::string& text) {
  std::vector<int64_t> units;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    int64_t n = 0;
    if (!absl::SimpleAtoi(part, &n) || n < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", part, "' is not a positive layer width"));
    }
    units.push_back(n);
  }
  return units;
}

struct DlrmOptions {
  int64_t buckets = 100000;
  int64_t embedding_dim = 16;
  std::vector<int64_t> bottom_mlp;
  std::vector<int64_t> top_mlp;
  uint64_t seed = 0;
};

// DLRM over whatever features the data has: every dense feature into the bottom MLP, every
// categorical feature (and categorical list, summed) through its own hashed table.
absl::StatusOr<ModelSpec> DlrmModel(const ExampleSchema& schema, const DlrmOptions& options) {
  const int64_t d = options.embedding_dim;
  ModelBuilder b("dlrm", options.seed);
  std::vector<ModelBuilder::Value> dense;
  for (const auto& [name, shape] : schema.dense_features) {
    dense.push_back(b.DenseInput(name, shape.num_elements()));
  }
  std::vector<ModelBuilder::Value> vectors;
  if (!dense.empty()) {
    ModelBuilder::Value x = b.Log1p(dense.size() == 1 ? dense[0] : b.Concat(dense));
    for (int64_t units : options.bottom_mlp) x = b.Dense(x, units, "relu");
    vectors.push_back(b.Dense(x, d, "relu", "bottom_mlp"));
  }
  for (const std::string& name : schema.id_features) {
    vectors.push_back(b.Embedding(b.IdInput(name, options.buckets),
                                  b.EmbeddingTable(name + "_table", options.buckets, d)));
  }
  for (const std::string& name : schema.id_list_features) {
    vectors.push_back(b.Embedding(b.IdListInput(name, options.buckets),
                                  b.EmbeddingTable(name + "_table", options.buckets, d), "sum"));
  }
  if (vectors.size() < 2) {
    return absl::InvalidArgumentError(
        "--columns: DLRM needs at least two of dense features and categorical features");
  }
  ModelBuilder::Value x = b.DotInteraction(vectors, "interaction");
  for (int64_t units : options.top_mlp) x = b.Dense(x, units, "relu");
  const ModelBuilder::Value logits = b.Dense(x, 1, "linear", "logits");
  b.Output("logits", logits);
  b.Output("probability", b.Sigmoid(logits, "probability"));
  b.Loss("sigmoid_cross_entropy", logits);
  return b.Build();
}

absl::StatusOr<std::shared_ptr<const DelimitedTextSource>> OpenData(const std::string& flag,
                                                                    const std::string& files,
                                                                    const TextFormat& format) {
  const std::vector<std::string> paths = absl::StrSplit(files, ',', absl::SkipEmpty());
  if (paths.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag,
                     " is required: files in Criteo's layout; `tessera generate criteo "
                     "--out=/tmp/criteo` writes /tmp/criteo.train.tsv and /tmp/criteo.test.tsv"));
  }
  absl::StatusOr<std::shared_ptr<const DelimitedTextSource>> source =
      DelimitedTextSource::Open(paths, format);
  if (!source.ok()) return Annotate(source.status(), absl::StrCat("--", flag));
  if ((*source)->skipped_lines() > 0) {
    std::printf("dlrm: --%s: skipped %lld malformed lines, the first: %s\n", flag.c_str(),
                static_cast<long long>((*source)->skipped_lines()),
                absl::StrJoin((*source)->first_skipped(), "; ").c_str());
  }
  return source;
}

absl::Status Run() {
  TESSERA_ASSIGN_OR_RETURN(const TrainingFlags flags, ReadTrainingFlags());
  TrainingJob job;
  job.name = "dlrm";
  job.batch_size = absl::GetFlag(FLAGS_batch_size);
  TESSERA_ASSIGN_OR_RETURN(job.partitioner, ParsePartitioner(absl::GetFlag(FLAGS_partitioner)));

  const std::string columns = absl::GetFlag(FLAGS_columns);
  const std::string delimiter = absl::GetFlag(FLAGS_delimiter);
  if (delimiter != "tab" && delimiter != "comma" && delimiter.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--delimiter=", delimiter, ": tab, comma, or one character"));
  }
  const char between = delimiter == "tab" ? '\t' : delimiter == "comma" ? ',' : delimiter[0];
  TextFormat format;
  if (columns == "criteo") {
    format = CriteoFormat();
    format.delimiter = between;
  } else {
    absl::StatusOr<TextFormat> parsed = ParseTextFormat(columns, between);
    if (!parsed.ok()) return Annotate(parsed.status(), "--columns");
    format = *std::move(parsed);
  }
  format.skip_bad_lines = absl::GetFlag(FLAGS_skip_bad_lines);
  format.header = absl::GetFlag(FLAGS_header);
  if (absl::Status valid = ValidateTextFormat(format); !valid.ok()) {
    return Annotate(valid, "--delimiter");
  }
  TESSERA_ASSIGN_OR_RETURN(auto train,
                           OpenData("train_data", absl::GetFlag(FLAGS_train_data), format));
  TESSERA_ASSIGN_OR_RETURN(auto test,
                           OpenData("test_data", absl::GetFlag(FLAGS_test_data), format));
  const ExampleSchema schema = train->schema();
  TESSERA_ASSIGN_OR_RETURN(job.train, Dataset::FromSource(std::move(train)));
  TESSERA_ASSIGN_OR_RETURN(job.test, Dataset::FromSource(std::move(test)));

  DlrmOptions options;
  options.buckets = absl::GetFlag(FLAGS_buckets);
  options.embedding_dim = absl::GetFlag(FLAGS_embedding_dim);
  TESSERA_ASSIGN_OR_RETURN(options.bottom_mlp,
                           ParseLayers("bottom_mlp", absl::GetFlag(FLAGS_bottom_mlp)));
  TESSERA_ASSIGN_OR_RETURN(options.top_mlp, ParseLayers("top_mlp", absl::GetFlag(FLAGS_top_mlp)));
  options.seed = flags.seed;
  TESSERA_ASSIGN_OR_RETURN(job.model, DlrmModel(schema, options));
  job.optimizer = {"adagrad",
                   {{"learning_rate", absl::GetFlag(FLAGS_learning_rate)},
                    {"initial_accumulator_value", absl::GetFlag(FLAGS_initial_accumulator)}}};
  TESSERA_RETURN_IF_ERROR(
      ScheduleTraining(job, absl::GetFlag(FLAGS_steps), absl::GetFlag(FLAGS_epochs)));
  std::printf(
      "dlrm: %lld train / %lld test examples; %zu tables of %lld x %lld; %s, adagrad lr %g\n",
      static_cast<long long>(job.train.size()), static_cast<long long>(job.test.size()),
      schema.id_features.size() + schema.id_list_features.size(),
      static_cast<long long>(options.buckets), static_cast<long long>(options.embedding_dim),
      DescribeSchedule(job).c_str(), absl::GetFlag(FLAGS_learning_rate));
  job.report = [](const EvalResult& eval, nlohmann::json& summary) {
    std::printf("dlrm: test logloss %.4f, AUC %.4f, accuracy %.4f\n", eval.loss,
                eval.auc.value_or(0), eval.accuracy.value_or(0));
    summary["test_logloss"] = eval.loss;
    summary["test_auc"] = eval.auc.value_or(0);
  };
  return RunTrainingJob(job, flags);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  tessera::ProgramHelp help;
  help.name = "dlrm";
  help.usage = "dlrm --train_data=FILES --test_data=FILES [flags]";
  help.about =
      "Trains DLRM (bottom MLP on the dense features, a hashed embedding table per categorical "
      "feature, pairwise dot interaction, top MLP; Adagrad) on delimited click logs in Criteo's "
      "layout, asynchronously on parameter servers: in this process by default (--mode=sim), as "
      "the single-thread baseline (--mode=local), or as the coordinator or a worker of a "
      "networked cluster (--cluster_spec or TF_CONFIG).\n";
  help.groups.push_back({"Model, data and schedule", {}, __FILE__});
  for (const tessera::FlagGroup& group : tessera::TrainingFlagGroups()) {
    help.groups.push_back(group);
  }
  return tessera::RunProgram(argc, argv, help, tessera::Run);
}
