// ExportedModel: a trained model as plain data — its ModelSpec (core/model_spec.h), its serving
// signatures, and every variable merged into one unsharded tensor — loadable and servable without
// the training code (TF's SavedModel). schema/model_io.h reads and writes it; the `tessera` CLI
// serves it.
//
// Thread-safety: plain values; a Predictor is immutable after Create and safe to share.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/batch.h"
#include "core/model.h"
#include "core/model_spec.h"
#include "core/tensor.h"

namespace tessera {

// A named input or output of a signature: dtype and shape, -1 for the batch dimension.
struct TensorSignature {
  std::string name;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;  // e.g. {-1} for one id per example, {-1, 784} for pixels
};

struct Signature {
  std::string name;  // "serving_default"
  std::vector<TensorSignature> inputs;
  std::vector<TensorSignature> outputs;
};

inline constexpr char kServingDefault[] = "serving_default";

struct ExportedModel {
  ModelSpec spec;
  std::vector<Signature> signatures;
  std::map<std::string, Tensor> variables;  // every parameter, unsharded
  int64_t step = 0;                         // training steps when exported
};

// "serving_default": the spec's inputs (ids: int64 [-1]; dense: float32 [-1, width]) and outputs
// (float32 [-1, width]).
absl::StatusOr<Signature> ServingSignature(const ModelSpec& spec);

// InvalidArgument unless the spec is valid (Model::Create), every parameter has a variable of its
// shape and no other variable is present, and signature names are unique.
absl::Status ValidateExportedModel(const ExportedModel& model);

// Runs an exported model's forward pass.
class Predictor {
 public:
  // Validates (as ValidateExportedModel) and builds the runtime.
  static absl::StatusOr<std::unique_ptr<Predictor>> Create(ExportedModel model);

  const ExportedModel& model() const { return model_; }
  // The outputs of `batch` (which needs no labels), by output name, each [B, width].
  // InvalidArgument for a missing or mis-shaped feature or an id out of range.
  absl::StatusOr<std::map<std::string, Tensor>> Predict(const Batch& batch) const;

 private:
  Predictor(ExportedModel model, Model runtime)
      : model_(std::move(model)), runtime_(std::move(runtime)) {}
  ExportedModel model_;
  Model runtime_;
};

}  // namespace tessera
