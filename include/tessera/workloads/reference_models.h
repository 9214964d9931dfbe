// ModelSpec builders for the two reference workloads (docs/design.md §5).
//
//   recsys:        ids "user" -> user_embedding [U, D] ┐
//                  ids "item" -> item_embedding [I, D] ┴ concat [B, 2D] -> hidden Dense(H, relu)
//                  -> logits Dense(1) -> sigmoid cross-entropy; outputs "logits", "probability".
//   fashion_mnist: dense "pixels" [B, 784] -> Dense(256, relu) -> Dense(128, relu) -> Dense(10)
//                  -> softmax cross-entropy; outputs "logits", "probabilities".
//
// Initialization is Keras-style: embeddings U(-0.05, 0.05), dense kernels glorot_uniform, biases
// zeros. Every initializer's seed is derived from the one model seed and the parameter's position
// (DeriveParamSeed, tessera/model.h), so one number reproduces the whole model. Both
// are written with tessera/model.h.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tessera/model.h"

namespace tessera {

struct RecsysModelOptions {
  int64_t num_users = 100000;  // U
  int64_t num_items = 10000;   // I
  int64_t embedding_dim = 32;  // D
  int64_t hidden_units = 64;   // H
  uint64_t seed = 0;
};

struct MlpModelOptions {
  int64_t input_dim = 784;
  std::vector<int64_t> hidden_units = {256, 128};  // one relu Dense per entry
  int64_t num_classes = 10;
  uint64_t seed = 0;
};

// The recsys model. Embedding tables are partitioned; dense layers are not.
// InvalidArgument naming the option when a size is < 1.
absl::StatusOr<ModelSpec> RecsysModelSpec(const RecsysModelOptions& options);

// The fashion_mnist MLP. InvalidArgument naming the option when a size is < 1 (num_classes < 2).
absl::StatusOr<ModelSpec> MlpModelSpec(const MlpModelOptions& options);

}  // namespace tessera
