#include "tessera/workloads/reference_models.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "tessera/model.h"
#include "tessera/status.h"
#include "tessera/workloads/fashion_mnist.h"
#include "tessera/workloads/recsys_data.h"

namespace tessera {
namespace {

absl::Status CheckSize(int64_t value, int64_t min, absl::string_view what) {
  if (value < min) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be >= ", min, ", got ", value));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelSpec> RecsysModelSpec(const RecsysModelOptions& options) {
  TESSERA_RETURN_IF_ERROR(CheckSize(options.num_users, 1, "recsys num_users"));
  TESSERA_RETURN_IF_ERROR(CheckSize(options.num_items, 1, "recsys num_items"));
  TESSERA_RETURN_IF_ERROR(CheckSize(options.embedding_dim, 1, "recsys embedding_dim"));
  TESSERA_RETURN_IF_ERROR(CheckSize(options.hidden_units, 1, "recsys hidden_units"));
  const int64_t d = options.embedding_dim;
  ModelBuilder b("recsys", options.seed);
  const ModelBuilder::Value user = b.IdInput(kRecsysUserFeature);
  const ModelBuilder::Value item = b.IdInput(kRecsysItemFeature);
  const ModelBuilder::Table users = b.EmbeddingTable("user_embedding", options.num_users, d);
  const ModelBuilder::Table items = b.EmbeddingTable("item_embedding", options.num_items, d);
  const ModelBuilder::Value features = b.Concat(
      {b.Embedding(user, users, "", "user_vector"), b.Embedding(item, items, "", "item_vector")},
      "features");
  const ModelBuilder::Value hidden = b.Dense(features, options.hidden_units, "relu", "hidden");
  const ModelBuilder::Value logits = b.Dense(hidden, 1, "linear", "logits");
  b.Output("logits", logits);
  b.Output("probability", b.Sigmoid(logits, "probability"));
  b.Loss("sigmoid_cross_entropy", logits);
  return b.Build();
}

absl::StatusOr<ModelSpec> MlpModelSpec(const MlpModelOptions& options) {
  TESSERA_RETURN_IF_ERROR(CheckSize(options.input_dim, 1, "mlp input_dim"));
  TESSERA_RETURN_IF_ERROR(CheckSize(options.num_classes, 2, "mlp num_classes"));
  for (size_t i = 0; i < options.hidden_units.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(
        CheckSize(options.hidden_units[i], 1, absl::StrCat("mlp hidden_units[", i, "]")));
  }
  ModelBuilder b("mlp", options.seed);
  ModelBuilder::Value x = b.DenseInput(kFashionMnistPixels, options.input_dim);
  for (size_t i = 0; i < options.hidden_units.size(); ++i) {
    x = b.Dense(x, options.hidden_units[i], "relu", absl::StrCat("dense_", i + 1));
  }
  const ModelBuilder::Value logits = b.Dense(x, options.num_classes, "linear", "logits");
  b.Output("logits", logits);
  b.Output("probabilities", b.Softmax(logits, "probabilities"));
  b.Loss("softmax_cross_entropy", logits);
  return b.Build();
}

}  // namespace tessera
