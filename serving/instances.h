// Instances and predictions: the JSON a client sends and receives (TF Serving's row format) and
// the Batch / output tensors a Predictor (core/serving/exported_model.h) takes and gives.
//
//   instance   {"user": 3, "item": 7}        an object mapping every signature input to its value:
//                                            an integer for an ids input, an array of `width`
//              {"pixels": [0.1, 0.0, ...]}   numbers for a dense input; with exactly one input
//              [0.1, 0.0, ...]               the bare value is accepted too.
//              {"history": [4, 9, 4]}        an id-list input: an array of ids (any length up to
//              {"history": {"ids": [4, 9],   kMaxIdsPerList, empty included), or an object of
//                           "weights": [1, .5]}}  ids and one weight per id.
//              {"C1": "68fd1e64"}            a hashed input (InputSpec::hash_buckets) takes any
//                                            int64 id or a string (its StringId, core/base/hash.h).
//   prediction {"logits": [0.3], "probability": [0.57]}   output name -> its row of floats (or
//              [0.57]                        strings), or the bare row when the signature has one
//              {"classes": ["0", "1"], "scores": [0.43, 0.57]}                       output.
//
// A value of a row (or of a column, predict_request.h) is read by ParseIdValue / ParseDenseValue;
// Predictions gives each output's row of one instance, computed outputs included
// (classify_signatures.h).
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(InstanceFormat format, MakeInstanceFormat(signature, model.spec));
//   BatchBuilder builder(format);
//   for (const Json& instance : instances) TESSERA_RETURN_IF_ERROR(builder.Add(instance));
//   TESSERA_ASSIGN_OR_RETURN(auto outputs, predictor.Predict(builder.Take()));
//   TESSERA_ASSIGN_OR_RETURN(Json rows, PredictionRows(outputs, format, n,
//   /*bare_single_output=*/true));
//
// Thread-safety: InstanceFormat is a plain value; a BatchBuilder is used by one thread.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/serving/exported_model.h"
#include "serving/json.h"
#include "tessera/data.h"
#include "tessera/model.h"
#include "tessera/tensor.h"

namespace tessera::serving {

// One signature resolved against its model: what an instance must hold and what a prediction
// holds.
struct InstanceFormat {
  // What a signature is for, as TF's method_name says (metadata.h): :predict takes any
  // signature, :classify and :regress only theirs.
  enum class Method { kPredict, kClassify, kRegress };
  struct Input {
    std::string name;
    InputKind kind = InputKind::kDense;
    int64_t width = 1;  // dense: numbers per instance
    // ids and id_list: valid ids are [0, id_limit), the rows of the smallest table the input is
    // looked up in; hashed inputs take any id (and strings).
    int64_t id_limit = 0;
    int64_t hash_buckets = 0;  // InputSpec::hash_buckets
    // A hashed input whose values are texts (ModelDescription::text_inputs): a string is its
    // StringId, an integer the StringId of its decimal digits, as in the training files.
    bool text = false;

    bool is_id_input() const { return kind == InputKind::kIds || kind == InputKind::kIdList; }
  };
  struct Output {
    // What an output's values are: the row of a model output (floats); the scores [1 - p, p] of
    // a binary model's probability output p (floats, width 2); the class labels "0", "1", ...
    // (strings, `width` of them).
    enum class Kind { kModel, kBinaryScores, kClassLabels };
    std::string name;
    int64_t width = 1;
    Kind kind = Kind::kModel;
    std::string source;  // the model output read (kModel, kBinaryScores); empty: `name`

    const std::string& source_name() const { return source.empty() ? name : source; }
    bool is_string() const { return kind == Kind::kClassLabels; }
  };
  std::string signature;  // the signature's name
  Method method = Method::kPredict;
  std::vector<Input> inputs;    // in the signature's order
  std::vector<Output> outputs;  // in the signature's order
};

// The most ids one instance's id-list value may hold.
inline constexpr int64_t kMaxIdsPerList = 4096;

// Resolves `signature` against `spec` (a valid spec, e.g. a Predictor's). InvalidArgument naming
// the signature and the tensor unless its inputs are exactly the spec's inputs (ids: int64 [-1];
// id_list: int64 [-1, -1]; dense: float32 [-1, width]) and its outputs are outputs of the spec
// (float32 [-1, width]). The inputs named in `text_inputs` (ModelDescription::text_inputs) take
// texts.
absl::StatusOr<InstanceFormat> MakeInstanceFormat(const Signature& signature, const ModelSpec& spec,
                                                  const std::vector<std::string>& text_inputs = {});

// The formats of every signature of `model` (a valid one, e.g. a Predictor's) by name, with
// "serving_default" derived from the spec (ServingSignature) when the model has no signature of
// that name, so every model can be served, and the classification and regression signatures of
// a classifier (ClassifySignatures) under names the model does not use. MakeInstanceFormat's
// errors.
absl::StatusOr<std::map<std::string, InstanceFormat>> ModelInstanceFormats(
    const ModelDescription& model);

// One id of an ids or id-list input: an integer in [0, id_limit); for a hashed input any int64
// or a string (its StringId). InvalidArgument naming the input.
absl::Status ParseIdValue(const InstanceFormat::Input& input, const Json& value, int64_t& id);
// One value of a dense input: an array of `width` numbers, into `row` (replaced).
// InvalidArgument naming the input (and the element).
absl::Status ParseDenseValue(const InstanceFormat::Input& input, const Json& value,
                             std::vector<float>& row);

// One input's values for a batch, appended instance by instance in the input's own form: ids,
// an id list (IdList), or dense rows.
class InputColumn {
 public:
  // `input` must outlive the column.
  explicit InputColumn(const InstanceFormat::Input& input);

  // Parses one instance's `value` and appends it. InvalidArgument naming the input (and the
  // element) for a value the input does not take, appending nothing.
  absl::Status Append(const Json& value);
  // Appends the input's neutral value (id 0 or the first hashed id, an empty list, zeros): keeps
  // the instances of a column aligned where a value was refused.
  void AppendPlaceholder();
  // Drops the instances from `instances` on (a partly appended instance taken back).
  void Truncate(int64_t instances);
  void Reserve(int64_t instances);
  int64_t size() const { return size_; }
  // Moves the values into `batch` under the input's name; the column is empty afterwards.
  void MoveInto(Batch& batch);

 private:
  const InstanceFormat::Input* input_;
  int64_t size_ = 0;
  Ids ids_;                   // ids inputs
  IdList list_;               // id-list inputs
  std::vector<float> dense_;  // dense inputs, row-major
  std::vector<float> row_;    // scratch
};

// Collects instances into a Batch (no labels).
class BatchBuilder {
 public:
  // `format` must outlive the builder.
  explicit BatchBuilder(const InstanceFormat& format);

  // Appends one instance. InvalidArgument naming the input (an unknown or missing input, a value
  // InputColumn::Append refuses), appending nothing.
  absl::Status Add(const Json& instance);
  // Makes room for `instances` more instances, so that adding them allocates nothing more.
  void Reserve(int64_t instances);
  int64_t size() const { return size_; }
  // The batch of every instance added since the last Take; the builder is empty afterwards.
  Batch Take();

 private:
  const InstanceFormat& format_;
  int64_t size_ = 0;
  std::vector<InputColumn> columns_;  // per input of the format
};

// The outputs of `format` for a batch, from a Predictor's outputs.
class Predictions {
 public:
  // `outputs` (each [batch_size, width]) must outlive the result. Internal when an output of
  // `format` is missing or mis-shaped.
  static absl::StatusOr<Predictions> Of(const std::map<std::string, Tensor>& outputs,
                                        const InstanceFormat& format, int64_t batch_size);

  int64_t size() const { return size_; }
  // Output `o` (of format.outputs) of instance `b`: an array of `width` numbers or strings.
  // InvalidArgument naming the output and the instance when a value is NaN or infinite (JSON
  // has neither).
  absl::StatusOr<Json> Value(size_t o, int64_t b) const;
  // Its first number (a regression's value), with the same check.
  absl::StatusOr<float> Number(size_t o, int64_t b) const;

 private:
  Predictions(const InstanceFormat& format, std::vector<const Tensor*> tensors, int64_t size)
      : format_(&format), tensors_(std::move(tensors)), size_(size) {}

  const InstanceFormat* format_;
  std::vector<const Tensor*> tensors_;  // per output; null for class labels
  int64_t size_;
};

// The predictions of `outputs` (a Predictor's, each [batch_size, width]) as a JSON array of
// batch_size rows: each an object mapping every output of `format` to its row of values or, with
// `bare_single_output` and exactly one output, that row alone (TF Serving's format).
// Predictions' errors.
absl::StatusOr<Json> PredictionRows(const std::map<std::string, Tensor>& outputs,
                                    const InstanceFormat& format, int64_t batch_size,
                                    bool bare_single_output);

}  // namespace tessera::serving
