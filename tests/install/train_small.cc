// train_small: a program built outside the Tessera tree against an installed Tessera
// (tests/install/run.sh builds it with find_package and with pkg-config). It defines a model,
// trains it on parameter servers in the in-process simulation through the public tree alone
// (tessera/*.h), checks that it learned, exports it, and serves the export; then counts with
// TF's lower layer (a cluster, a strategy, a sharded variable and a coordinator whose replica
// function updates it through its context), and trains the model under the mirrored strategy.
//
//   train_small EXPORT_DIR       # exit 0 when it learned and the export serves
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "tessera/cluster.h"
#include "tessera/coordinator.h"
#include "tessera/data.h"
#include "tessera/mirrored.h"
#include "tessera/model.h"
#include "tessera/serving.h"
#include "tessera/status.h"
#include "tessera/strategy.h"
#include "tessera/training.h"
#include "tessera/variables.h"
#include "tessera/version.h"

namespace {

constexpr int64_t kUsers = 50, kWidth = 4, kExamples = 8192, kBatch = 64, kSteps = 120;

// Clicks with a planted rule: clicked when the user's bias plus w . x is positive.
// The users' biases are the same in every set; `seed` draws the examples.
absl::StatusOr<tessera::Dataset> Clicks(uint32_t seed) {
  std::normal_distribution<float> normal;
  std::mt19937 planted(7);
  std::vector<float> bias(kUsers);
  for (float& b : bias) b = normal(planted);
  std::mt19937 rng(seed);
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
  TrainingJob job;
  job.name = "train_small";
  job.model = ClickModel();
  job.optimizer = {"adagrad", {{"learning_rate", 0.1}}};
  TESSERA_ASSIGN_OR_RETURN(job.train, Clicks(/*seed=*/7));
  TESSERA_ASSIGN_OR_RETURN(job.test, Clicks(/*seed=*/8));
  job.batch_size = kBatch;
  job.steps = kSteps;
  TESSERA_ASSIGN_OR_RETURN(job.partitioner, FixedShardsPartitioner(2));
  std::optional<EvalResult> eval;
  job.report = [&eval](const EvalResult& result, nlohmann::json&) { eval = result; };

  TrainingFlags flags;  // the simulation, as a program's flags default to
  flags.parameter_servers.ps = 2;
  flags.parameter_servers.workers = 2;
  flags.parameter_servers.export_dir = export_dir;
  TESSERA_RETURN_IF_ERROR(RunTrainingJob(job, flags));
  if (!eval.has_value()) return absl::InternalError("the job did not report its evaluation");
  // A model that predicts nothing scores ln 2 = 0.693.
  std::printf("%s: test loss %.4f after %lld steps\n", VersionLine().c_str(), eval->loss,
              static_cast<long long>(kSteps));
  if (!(eval->loss < 0.8 * 0.693)) return absl::InternalError("the model did not learn");

  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Servable> served, Servable::Load(export_dir));
  if (served->writer_version() != Version()) {
    return absl::InternalError("the export does not record the version that wrote it");
  }
  if (served->step() != kSteps) return absl::InternalError("the export is not of the last step");
  // One user twice: with features the planted rule favours, and with their opposite.
  Batch batch;
  batch.size = 2;
  batch.ids["user"] = {0, 0};
  batch.dense["x"] = Tensor(Shape{2, kWidth});
  const float favoured[kWidth] = {1, -1, 1, 1};
  for (int64_t k = 0; k < kWidth; ++k) {
    batch.dense["x"].data()[k] = favoured[k];
    batch.dense["x"].data()[kWidth + k] = -favoured[k];
  }
  TESSERA_ASSIGN_OR_RETURN(auto outputs, served->Predict(batch));
  const float* logits = outputs.at("logits").data();
  if (!(logits[0] > logits[1])) return absl::InternalError("the served model ranks wrongly");
  std::printf("exported to %s, written by tessera %s; served logits %.3f > %.3f\n",
              export_dir.c_str(), served->writer_version().c_str(), logits[0], logits[1]);
  return absl::OkStatus();
}

// Closure k adds 1 to row k % 4 of a table sharded in two, from the workers; the driver reads
// every row's count back.
absl::Status CountOnWorkers() {
  using namespace tessera;  // NOLINT: a short program
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Cluster> cluster, Cluster::StartInProcess({2, 2}));
  TESSERA_ASSIGN_OR_RETURN(Partitioner two, FixedShardsPartitioner(2));
  auto strategy = std::make_unique<ParameterServerStrategy>(*cluster, two);
  VariableOptions options;
  options.name = "counts";
  options.shape = Shape{4, 1};
  TESSERA_ASSIGN_OR_RETURN(ShardedVariable counts, strategy->CreateVariable(options));
  auto registry = std::make_shared<FunctionRegistry>();
  TESSERA_RETURN_IF_ERROR(registry->AddReplicaFunction(
      "count", [counts](ReplicaContext& ctx, const ClosureValues&, Done<ClosureValues> done) {
        ctx.Scatter(counts, ScatterOp::kAdd, {ctx.step() % 4}, Tensor(Shape{1, 1}, 1.0f),
                    [done](absl::Status s) {
                      if (!s.ok()) return done(s);
                      done(ClosureValues());
                    });
      }));
  TESSERA_ASSIGN_OR_RETURN(auto coordinator, ClusterCoordinator::Create(*strategy, registry));
  for (int64_t k = 0; k < 10; ++k) {
    TESSERA_RETURN_IF_ERROR(coordinator->Schedule("count", {}, k).status());
  }
  TESSERA_RETURN_IF_ERROR(coordinator->Join());
  TESSERA_ASSIGN_OR_RETURN(Tensor read, counts.Read());
  const std::vector<float> got(read.values().begin(), read.values().end());
  if (got != std::vector<float>{3, 3, 2, 2}) {
    return absl::InternalError("the workers' counts are not 3, 3, 2, 2");
  }
  std::printf("counted on %d workers into %lld shards: 3, 3, 2, 2\n", cluster->num_workers(),
              static_cast<long long>(counts.num_shards()));
  return absl::OkStatus();
}

// The same model under the mirrored strategy, a replica in each of two worker slots: the
// replicas' copies stay the same bits, and the model learns.
absl::Status TrainMirrored() {
  using namespace tessera;  // NOLINT: a short program
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Cluster> cluster, Cluster::StartInProcess({1, 2}));
  MirroredOptions options;
  options.model = ClickModel();
  options.optimizer = {"adagrad", {{"learning_rate", 0.1}}};
  TESSERA_ASSIGN_OR_RETURN(options.train, Clicks(/*seed=*/7));
  TESSERA_ASSIGN_OR_RETURN(options.test, Clicks(/*seed=*/8));
  options.batch_size = kBatch / 2;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<MirroredStrategy> strategy,
                           MirroredStrategy::Create(*cluster, options));
  for (int64_t step = 0; step < kSteps; ++step) {
    TESSERA_RETURN_IF_ERROR(strategy->TrainStep(step).status());
  }
  for (const ParamSpec& param : options.model.params) {
    TESSERA_ASSIGN_OR_RETURN(PerReplica<Tensor> copies, strategy->ReadPerReplica(param.name));
    const std::vector<Tensor>& local = LocalResults(copies);
    if (local.size() != 2 || !std::equal(local[0].values().begin(), local[0].values().end(),
                                         local[1].values().begin(), local[1].values().end())) {
      return absl::InternalError("the replicas' copies of " + param.name + " differ");
    }
  }
  TESSERA_ASSIGN_OR_RETURN(EvalResult eval, strategy->Evaluate());
  if (!(eval.loss < 0.8 * 0.693)) return absl::InternalError("the mirrored model did not learn");
  std::printf("mirrored on %d replicas: test loss %.4f after %lld steps\n",
              strategy->num_replicas_in_sync(), eval.loss, static_cast<long long>(kSteps));
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
  if (absl::Status status = CountOnWorkers(); !status.ok()) {
    std::fprintf(stderr, "train_small: %s\n", status.ToString().c_str());
    return 1;
  }
  if (absl::Status status = TrainMirrored(); !status.ok()) {
    std::fprintf(stderr, "train_small: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
