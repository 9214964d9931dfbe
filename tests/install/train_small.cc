// train_small: a program built outside the Tessera tree against an installed Tessera
// (tests/install/run.sh builds it with find_package and with pkg-config). It defines a model,
// trains it on parameter servers in the in-process simulation, checks that the loss fell, and
// exports the model, which records the version that wrote it.
//
//   train_small EXPORT_DIR       # exit 0 and "loss fell from A to B" when it learned
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cluster/base/cluster.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/ps/strategy.h"
#include "coordinator/scheduling/cluster_coordinator.h"
#include "coordinator/serving/export.h"
#include "coordinator/training/train_step_closure.h"
#include "core/base/status.h"
#include "core/base/version.h"
#include "core/data/dataset.h"
#include "core/model/model.h"
#include "core/variables/partitioner.h"
#include "schema/serving/model_io.h"

namespace {

constexpr int64_t kUsers = 50, kWidth = 4, kExamples = 8192, kBatch = 64, kSteps = 120;

// Clicks with a planted rule: clicked when the user's bias plus w . x is positive.
absl::StatusOr<tessera::Dataset> Clicks() {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> bias(kUsers);
  for (float& b : bias) b = normal(rng);
  const float w[kWidth] = {1.5f, -1.0f, 0.5f, 2.0f};
  tessera::Batch all;
  all.size = kExamples;
  all.dense["x"] = tessera::Tensor(tessera::Shape{kExamples, kWidth});
  all.labels = tessera::Tensor(tessera::Shape{kExamples, 1});
  std::vector<int64_t>& users = all.ids["user"];
  for (int64_t i = 0; i < kExamples; ++i) {
    users.push_back(static_cast<int64_t>(rng() % kUsers));
    float logit = bias[users.back()];
    for (int64_t k = 0; k < kWidth; ++k) {
      const float x = normal(rng);
      all.dense["x"].data()[i * kWidth + k] = x;
      logit += w[k] * x;
    }
    all.labels.data()[i] = logit > 0 ? 1.0f : 0.0f;
  }
  return tessera::Dataset::Create(std::move(all));
}

// A user embedding next to the dense features, one hidden layer, a click logit.
tessera::ModelSpec ClickModel() {
  using tessera::InputKind;
  using tessera::Shape;
  tessera::ModelSpec spec;
  spec.name = "clicks";
  spec.inputs = {{"user", InputKind::kIds, 1}, {"x", InputKind::kDense, kWidth}};
  spec.params = {{"user_embedding",
                  Shape{kUsers, 4},
                  {"random_uniform", {{"minval", -0.05}, {"maxval", 0.05}}, 1},
                  true,
                  true},
                 {"hidden/kernel", Shape{4 + kWidth, 8}, {"glorot_uniform", {}, 2}},
                 {"hidden/bias", Shape{8}, {"zeros", {}, 0}},
                 {"logits/kernel", Shape{8, 1}, {"glorot_uniform", {}, 3}},
                 {"logits/bias", Shape{1}, {"zeros", {}, 0}}};
  spec.nodes = {
      {"user_vector", "embedding", {"user"}, {"user_embedding"}, {}, {}},
      {"features", "concat", {"user_vector", "x"}, {}, {}, {}},
      {"hidden",
       "dense",
       {"features"},
       {"hidden/kernel", "hidden/bias"},
       {{"units", 8}},
       {{"activation", "relu"}}},
      {"logits", "dense", {"hidden"}, {"logits/kernel", "logits/bias"}, {{"units", 1}}, {}}};
  spec.outputs = {{"logits", "logits"}};
  spec.loss = {"sigmoid_cross_entropy", "logits"};
  return spec;
}

absl::Status Run(const std::string& export_dir) {
  using namespace tessera;  // NOLINT: a short program
  TESSERA_ASSIGN_OR_RETURN(Dataset train, Clicks());
  TESSERA_ASSIGN_OR_RETURN(Model model, Model::Create(ClickModel()));
  auto shared_model = std::make_shared<const Model>(model);
  TESSERA_ASSIGN_OR_RETURN(auto cluster, Cluster::StartInProcess({.num_ps = 2, .num_workers = 2}));
  TESSERA_ASSIGN_OR_RETURN(Partitioner partitioner, FixedShardsPartitioner(2));
  ParameterServerStrategy strategy(*cluster, partitioner);
  TESSERA_ASSIGN_OR_RETURN(auto vars, strategy.CreateModelVariables(
                                          shared_model, {"adagrad", {{"learning_rate", 0.1}}}));
  auto registry = std::make_shared<FunctionRegistry>();
  TESSERA_RETURN_IF_ERROR(RegisterTrainStep(*registry, vars, train, kBatch, /*seed=*/1));
  std::vector<double> losses;
  {
    TESSERA_ASSIGN_OR_RETURN(auto coordinator, ClusterCoordinator::Create(strategy, registry));
    std::vector<RemoteValue> steps;
    for (int64_t i = 0; i < kSteps; ++i) {
      ClosureValues args;
      args.Set(kTrainStepBatch, i);
      TESSERA_ASSIGN_OR_RETURN(RemoteValue step, coordinator->Schedule(kTrainStep, args));
      steps.push_back(step);
    }
    TESSERA_RETURN_IF_ERROR(coordinator->Join());
    for (const RemoteValue& step : steps) {
      TESSERA_ASSIGN_OR_RETURN(double loss, step.Fetch<double>(kTrainStepLoss));
      losses.push_back(loss);
    }
  }
  double first = 0, last = 0;
  for (int i = 0; i < 20; ++i) {
    first += losses[i] / 20;
    last += losses[losses.size() - 1 - i] / 20;
  }
  std::printf("%s: loss fell from %.4f to %.4f over %lld steps\n", VersionLine().c_str(), first,
              last, static_cast<long long>(kSteps));
  if (!(last < 0.8 * first)) return absl::InternalError("the loss did not fall by 20%");

  TESSERA_RETURN_IF_ERROR(ExportModel(strategy, model, export_dir, kSteps));
  TESSERA_ASSIGN_OR_RETURN(ExportedModel exported, ReadExportedModel(export_dir));
  if (exported.writer_version != Version()) {
    return absl::InternalError("the export does not record the version that wrote it");
  }
  std::printf("exported to %s, written by tessera %s\n", export_dir.c_str(),
              exported.writer_version.c_str());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: train_small EXPORT_DIR\n");
    return 2;
  }
  if (absl::Status status = Run(argv[1]); !status.ok()) {
    std::fprintf(stderr, "train_small: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
