#include "workloads/reference_models.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "core/random.h"
#include "core/status.h"
#include "workloads/fashion_mnist.h"
#include "workloads/recsys_data.h"

namespace tessera {
namespace {

// The Philox stream of parameter seeds; part of what a model seed means, so never change it.
constexpr uint64_t kParamSeedStream = 0x6d6f64656c;  // "model"

absl::Status CheckSize(int64_t value, int64_t min, absl::string_view what) {
  if (value < min) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be >= ", min, ", got ", value));
  }
  return absl::OkStatus();
}

// Adds a parameter whose initializer seed derives from the model seed and its position.
void AddParam(ModelSpec& spec, uint64_t model_seed, std::string name, Shape shape,
              std::string initializer, bool partitioned) {
  const int64_t index = static_cast<int64_t>(spec.params.size());
  ParamSpec param;
  param.name = std::move(name);
  param.shape = std::move(shape);
  param.initializer.name = std::move(initializer);
  param.initializer.seed = DeriveParamSeed(model_seed, index);
  param.trainable = true;
  param.partitioned = partitioned;
  spec.params.push_back(std::move(param));
}

// Adds Dense `name` (params "<name>/kernel" glorot_uniform, "<name>/bias" zeros) on `input`.
void AddDense(ModelSpec& spec, uint64_t model_seed, const std::string& name,
              const std::string& input, int64_t in, int64_t units, const std::string& activation) {
  const std::string kernel = absl::StrCat(name, "/kernel");
  const std::string bias = absl::StrCat(name, "/bias");
  AddParam(spec, model_seed, kernel, Shape{in, units}, "glorot_uniform", false);
  AddParam(spec, model_seed, bias, Shape{units}, "zeros", false);
  NodeSpec node;
  node.name = name;
  node.op = kOpDense;
  node.inputs = {input};
  node.params = {kernel, bias};
  node.attrs["units"] = static_cast<double>(units);
  node.string_attrs["activation"] = activation;
  spec.nodes.push_back(std::move(node));
}

}  // namespace

uint64_t DeriveParamSeed(uint64_t model_seed, int64_t index) {
  const PhiloxCounter bits =
      CounterRandom(model_seed, kParamSeedStream).Bits(static_cast<uint64_t>(index));
  return static_cast<uint64_t>(bits[0]) << 32 | bits[1];
}

absl::StatusOr<ModelSpec> RecsysModelSpec(const RecsysModelOptions& options) {
  RETURN_IF_ERROR(CheckSize(options.num_users, 1, "recsys num_users"));
  RETURN_IF_ERROR(CheckSize(options.num_items, 1, "recsys num_items"));
  RETURN_IF_ERROR(CheckSize(options.embedding_dim, 1, "recsys embedding_dim"));
  RETURN_IF_ERROR(CheckSize(options.hidden_units, 1, "recsys hidden_units"));
  const int64_t d = options.embedding_dim;
  ModelSpec spec;
  spec.name = "recsys";
  spec.inputs = {{kRecsysUserFeature, InputKind::kIds, 1},
                 {kRecsysItemFeature, InputKind::kIds, 1}};
  AddParam(spec, options.seed, "user_embedding", Shape{options.num_users, d}, "random_uniform",
           true);
  AddParam(spec, options.seed, "item_embedding", Shape{options.num_items, d}, "random_uniform",
           true);
  spec.nodes.push_back(
      {"user_vector", kOpEmbedding, {kRecsysUserFeature}, {"user_embedding"}, {}, {}});
  spec.nodes.push_back(
      {"item_vector", kOpEmbedding, {kRecsysItemFeature}, {"item_embedding"}, {}, {}});
  spec.nodes.push_back({"features", kOpConcat, {"user_vector", "item_vector"}, {}, {}, {}});
  AddDense(spec, options.seed, "hidden", "features", 2 * d, options.hidden_units, "relu");
  AddDense(spec, options.seed, "logits", "hidden", options.hidden_units, 1, "linear");
  spec.nodes.push_back({"probability", kOpSigmoid, {"logits"}, {}, {}, {}});
  spec.outputs = {{"logits", "logits"}, {"probability", "probability"}};
  spec.loss = {"sigmoid_cross_entropy", "logits"};
  return spec;
}

absl::StatusOr<ModelSpec> MlpModelSpec(const MlpModelOptions& options) {
  RETURN_IF_ERROR(CheckSize(options.input_dim, 1, "mlp input_dim"));
  RETURN_IF_ERROR(CheckSize(options.num_classes, 2, "mlp num_classes"));
  for (size_t i = 0; i < options.hidden_units.size(); ++i) {
    RETURN_IF_ERROR(
        CheckSize(options.hidden_units[i], 1, absl::StrCat("mlp hidden_units[", i, "]")));
  }
  ModelSpec spec;
  spec.name = "mlp";
  spec.inputs = {{kFashionMnistPixels, InputKind::kDense, options.input_dim}};
  std::string previous = kFashionMnistPixels;
  int64_t width = options.input_dim;
  for (size_t i = 0; i < options.hidden_units.size(); ++i) {
    const std::string name = absl::StrCat("dense_", i + 1);
    AddDense(spec, options.seed, name, previous, width, options.hidden_units[i], "relu");
    previous = name;
    width = options.hidden_units[i];
  }
  AddDense(spec, options.seed, "logits", previous, width, options.num_classes, "linear");
  spec.nodes.push_back({"probabilities", kOpSoftmax, {"logits"}, {}, {}, {}});
  spec.outputs = {{"logits", "logits"}, {"probabilities", "probabilities"}};
  spec.loss = {"softmax_cross_entropy", "logits"};
  return spec;
}

}  // namespace tessera
