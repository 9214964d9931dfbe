// ExportedModel: a trained model as plain data — its ModelSpec (tessera/model.h), its
// serving signatures, and every variable merged into one unsharded tensor — loadable and servable
// without the training code (TF's SavedModel). schema/serving/model_io.h reads and writes it; the
// `tessera` CLI serves it.
//
// Two ways in and out, so that a model larger than the memory at hand still exports and serves:
//   - an export is written from a VariableRowSource, which hands the writer each variable's rows
//     in order, a range at a time (ExportedModelRows over an in-memory model; the coordinator's
//     source reads the parameter-server shards);
//   - a Predictor serves from ServedVariables: views of every variable's value (the tensors of an
//     ExportedModel, or a memory-mapped file) and a check, made before a prediction reads them,
//     that the rows it is about to read are sound (a mapped file verifies their checksums then).
//
// Example:
//   ExportedModel model = ...;                       // spec, signatures, step, variables
//   ExportedModelRows rows(model);
//   TESSERA_RETURN_IF_ERROR(WriteExportedModel(dir, model, rows));           //
//   schema/serving/model_io.h TESSERA_ASSIGN_OR_RETURN(OpenedModel opened, OpenExportedModel(dir));
//   // mapped, not read TESSERA_ASSIGN_OR_RETURN(auto predictor,
//   Predictor::Create(opened.description, opened.variables)); TESSERA_ASSIGN_OR_RETURN(auto
//   outputs, predictor->Predict(batch));
//
// Thread-safety: plain values; ServedVariables implementations and a Predictor are safe to share
// between threads (a Predictor is immutable after Create). A VariableRowSource is used by one
// thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/model/model.h"
#include "tessera/data.h"
#include "tessera/model.h"
#include "tessera/tensor.h"

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

// An exported model without its values: what describes it, and what a model file holds ahead of
// its data. Its variables are the spec's parameters, of their shapes.
struct ModelDescription {
  ModelSpec spec;
  std::vector<Signature> signatures;
  int64_t step = 0;  // training steps when exported
  // Read from a file: the Tessera version that wrote it (tessera/version.h); empty for a file
  // written before versions were recorded. A writer records its own Version(), not this.
  std::string writer_version;
  // The hashed id inputs whose values are texts (the training data's ExampleSchema::text_features,
  // TextInputs): serving takes such a value as text, an integer as its decimal digits, as the
  // files did. Sorted; empty for raw ids, and in files written before it was recorded.
  std::vector<std::string> text_inputs;
};

struct ExportedModel : ModelDescription {
  std::map<std::string, Tensor> variables;  // every parameter, unsharded
};

// The inputs of `spec` hashed from texts in `train` (its text features that are hashed id or
// id-list inputs), sorted: a model description's text_inputs.
std::vector<std::string> TextInputs(const ModelSpec& spec, const Dataset& train);

// "serving_default": the spec's inputs (ids: int64 [-1]; dense: float32 [-1, width]) and outputs
// (float32 [-1, width]).
absl::StatusOr<Signature> ServingSignature(const ModelSpec& spec);

// InvalidArgument unless the spec is valid (Model::Create), signature names are unique and the
// step is >= 0.
absl::Status ValidateModelDescription(const ModelDescription& description);
// InvalidArgument unless `shapes` holds exactly the spec's parameters, each of its shape.
absl::Status CheckVariableShapes(const ModelSpec& spec, const std::map<std::string, Shape>& shapes);
// Both, for an in-memory model.
absl::Status ValidateExportedModel(const ExportedModel& model);

// The index of the first value of `values` that is NaN or infinite, if any.
std::optional<int64_t> FirstNonFinite(absl::Span<const float> values);

// The rows of each variable of an export, handed to a writer in order: for every parameter of
// the description, rows [0, r1), [r1, r2), ... up to its row count, in ranges the writer chooses.
class VariableRowSource {
 public:
  virtual ~VariableRowSource() = default;
  // Rows [begin, end) of variable `name` as a [end - begin, ...] view (a rank-0 variable: its
  // value, asked as rows [0, 1)), valid until the next call. The writer checks the view's shape.
  virtual absl::StatusOr<ConstTensorView> Rows(const std::string& name, int64_t begin,
                                               int64_t end) = 0;
};

// The rows of an in-memory model's tensors, in place (no copy).
class ExportedModelRows final : public VariableRowSource {
 public:
  // `model` must outlive this source.
  explicit ExportedModelRows(const ExportedModel& model) : model_(model) {}
  absl::StatusOr<ConstTensorView> Rows(const std::string& name, int64_t begin,
                                       int64_t end) override;

 private:
  const ExportedModel& model_;
};

// The variables a Predictor serves. A value is sound when it can be trusted to be what was
// exported: finite, and (from a file) matching its checksums.
class ServedVariables {
 public:
  virtual ~ServedVariables() = default;
  // Every variable's whole value by name; the views live as long as this object. Reading a part
  // of a view that CheckRows / CheckAll did not pass is reading unchecked data.
  virtual const std::map<std::string, ConstTensorView>& views() const = 0;
  // OK when rows `rows` (ascending, in range) of variable `name` are sound; DataLoss naming the
  // variable and the row otherwise — again on every later call that reads them. NotFound for an
  // unknown variable. Thread-safe; cheap once rows were checked.
  virtual absl::Status CheckRows(const std::string& name, absl::Span<const int64_t> rows) const = 0;
  // The same for the whole value.
  virtual absl::Status CheckAll(const std::string& name) const = 0;
};

// The tensors of an in-memory model, checked for finite values when asked (no checksums: they
// never left memory).
class InMemoryVariables final : public ServedVariables {
 public:
  explicit InMemoryVariables(std::map<std::string, Tensor> variables);
  const std::map<std::string, ConstTensorView>& views() const override { return views_; }
  absl::Status CheckRows(const std::string& name, absl::Span<const int64_t> rows) const override;
  absl::Status CheckAll(const std::string& name) const override;

 private:
  std::map<std::string, Tensor> variables_;
  std::map<std::string, ConstTensorView> views_;
};

// Runs an exported model's forward pass.
class Predictor {
 public:
  // Validates (as ValidateExportedModel) and builds the runtime; the variables are then served
  // from memory.
  static absl::StatusOr<std::unique_ptr<Predictor>> Create(ExportedModel model);
  // Validates `description` and the shapes of `variables`, checks every variable that is not an
  // embedding table whole (its error, e.g. DataLoss, when one is unsound), and builds the
  // runtime. Embedding tables are checked row by row as predictions look them up.
  static absl::StatusOr<std::unique_ptr<Predictor>> Create(
      ModelDescription description, std::shared_ptr<const ServedVariables> variables);

  const ModelDescription& model() const { return description_; }
  const ServedVariables& variables() const { return *variables_; }
  // The outputs of `batch` (which needs no labels), by output name, each [B, width].
  // InvalidArgument for a missing or mis-shaped feature or an id out of range, and when an output
  // is not finite (naming the output and the example: the input drove the model out of float
  // range); the variables' DataLoss when a row the batch looks up is unsound.
  absl::StatusOr<std::map<std::string, Tensor>> Predict(const Batch& batch) const;

 private:
  Predictor(ModelDescription description, std::shared_ptr<const ServedVariables> variables,
            Model runtime)
      : description_(std::move(description)),
        variables_(std::move(variables)),
        runtime_(std::move(runtime)) {}
  ModelDescription description_;
  std::shared_ptr<const ServedVariables> variables_;
  Model runtime_;
};

}  // namespace tessera
