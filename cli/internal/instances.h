// Instances and predictions: the JSON a client sends and receives (TF Serving's row format) and
// the Batch / output tensors a Predictor (core/exported_model.h) takes and gives.
//
//   instance   {"user": 3, "item": 7}        an object mapping every signature input to its value:
//                                            an integer for an ids input, an array of `width`
//              {"pixels": [0.1, 0.0, ...]}   numbers for a dense input; with exactly one input
//              [0.1, 0.0, ...]               the bare value is accepted too.
//   prediction {"logits": [0.3], "probability": [0.57]}   output name -> its row of floats, or
//              [0.57]                        the bare row when the signature has one output.
//
// Example:
//   ASSIGN_OR_RETURN(InstanceFormat format, MakeInstanceFormat(signature, model.spec));
//   BatchBuilder builder(format);
//   for (const Json& instance : instances) RETURN_IF_ERROR(builder.Add(instance));
//   ASSIGN_OR_RETURN(auto outputs, predictor.Predict(builder.Take()));
//   ASSIGN_OR_RETURN(Json rows, PredictionRows(outputs, format, n, /*bare_single_output=*/true));
//
// Thread-safety: InstanceFormat is a plain value; a BatchBuilder is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cli/internal/json.h"
#include "core/batch.h"
#include "core/exported_model.h"
#include "core/model_spec.h"
#include "core/tensor.h"

namespace tessera::cli {

// One signature resolved against its model: what an instance must hold and what a prediction
// holds.
struct InstanceFormat {
  struct Input {
    std::string name;
    InputKind kind = InputKind::kDense;
    int64_t width = 1;  // dense: numbers per instance
    // ids: valid ids are [0, id_limit), the rows of the smallest table the input is looked up in.
    int64_t id_limit = 0;
  };
  struct Output {
    std::string name;
    int64_t width = 1;
  };
  std::string signature;        // the signature's name
  std::vector<Input> inputs;    // in the signature's order
  std::vector<Output> outputs;  // in the signature's order
};

// Resolves `signature` against `spec` (a valid spec, e.g. a Predictor's). InvalidArgument naming
// the signature and the tensor unless its inputs are exactly the spec's inputs (ids: int64 [-1];
// dense: float32 [-1, width]) and its outputs are outputs of the spec (float32 [-1, width]).
absl::StatusOr<InstanceFormat> MakeInstanceFormat(const Signature& signature,
                                                  const ModelSpec& spec);

// The formats of every signature of `model` (a valid one, e.g. a Predictor's) by name, with
// "serving_default" derived from the spec (ServingSignature) when the model has no signature of
// that name, so every model can be served. MakeInstanceFormat's errors.
absl::StatusOr<std::map<std::string, InstanceFormat>> ModelInstanceFormats(
    const ModelDescription& model);

// Collects instances into a Batch (no labels).
class BatchBuilder {
 public:
  // `format` must outlive the builder.
  explicit BatchBuilder(const InstanceFormat& format);

  // Appends one instance. InvalidArgument naming the input (an unknown or missing input, an id
  // that is not an integer or is outside [0, id_limit), a dense value that is not `width`
  // numbers), appending nothing.
  absl::Status Add(const Json& instance);
  // Makes room for `instances` more instances, so that adding them allocates nothing more.
  void Reserve(int64_t instances);
  int64_t size() const { return size_; }
  // The batch of every instance added since the last Take; the builder is empty afterwards.
  Batch Take();

 private:
  absl::Status ParseIds(const InstanceFormat::Input& input, const Json& value, int64_t& id) const;
  absl::Status ParseDense(const InstanceFormat::Input& input, const Json& value,
                          std::vector<float>& row) const;

  const InstanceFormat& format_;
  int64_t size_ = 0;
  std::vector<Ids> ids_;                   // per input (ids inputs only)
  std::vector<std::vector<float>> dense_;  // per input (dense inputs only), row-major
};

// The predictions of `outputs` (a Predictor's, each [batch_size, width]) as a JSON array of
// batch_size rows: each an object mapping every output of `format` to its row of floats or, with
// `bare_single_output` and exactly one output, that row alone (TF Serving's format).
// Internal when an output is missing or mis-shaped; InvalidArgument naming the output and the
// instance when a value is NaN or infinite (JSON has neither).
absl::StatusOr<Json> PredictionRows(const std::map<std::string, Tensor>& outputs,
                                    const InstanceFormat& format, int64_t batch_size,
                                    bool bare_single_output);

}  // namespace tessera::cli
