#include "serving/instances.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/hash.h"
#include "serving/classify_signatures.h"
#include "tessera/status.h"

namespace tessera::serving {
namespace {

// "int64 [-1]", "float32 [-1, 784]".
std::string Describe(DType dtype, const std::vector<int64_t>& shape) {
  return absl::StrCat(DTypeName(dtype), " [", absl::StrJoin(shape, ", "), "]");
}

absl::Status CheckTensor(const TensorSignature& got, DType dtype, std::vector<int64_t> shape,
                         absl::string_view role) {
  if (got.dtype == dtype && got.shape == shape) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(role, " '", got.name, "' is ",
                                                 Describe(got.dtype, got.shape), ", expected ",
                                                 Describe(dtype, shape)));
}

// The rows of the smallest table each ids or id-list input is looked up in.
std::map<std::string, int64_t> IdLimits(const ModelSpec& spec, const ResolvedGraph& graph) {
  std::map<std::string, int64_t> limits;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const ResolvedGraph::Node& node = graph.nodes[n];
    if (!node.is_embedding()) continue;
    const std::string& input = spec.inputs[node.inputs[0]].name;
    const int64_t rows = spec.params[node.params[0]].shape.dim(0);
    auto [it, inserted] = limits.emplace(input, rows);
    if (!inserted) it->second = std::min(it->second, rows);
  }
  return limits;
}

std::vector<std::string> InputNames(const InstanceFormat& format) {
  std::vector<std::string> names;
  for (const InstanceFormat::Input& input : format.inputs) names.push_back(input.name);
  return names;
}

}  // namespace

absl::StatusOr<InstanceFormat> MakeInstanceFormat(const Signature& signature, const ModelSpec& spec,
                                                  const std::vector<std::string>& text_inputs) {
  const std::string context = absl::StrCat("signature '", signature.name, "'");
  const absl::StatusOr<ResolvedGraph> resolved = ResolveModelSpec(spec);
  TESSERA_RETURN_IF_ERROR(Annotate(resolved.status(), context));
  const ResolvedGraph& graph = *resolved;
  const std::map<std::string, int64_t> id_limits = IdLimits(spec, graph);
  InstanceFormat format;
  format.signature = signature.name;
  std::set<std::string> seen;
  for (const TensorSignature& in : signature.inputs) {
    auto spec_input = std::find_if(spec.inputs.begin(), spec.inputs.end(),
                                   [&](const InputSpec& s) { return s.name == in.name; });
    if (spec_input == spec.inputs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": input '", in.name, "' is not an input of the model"));
    }
    if (!seen.insert(in.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": input '", in.name, "' appears twice"));
    }
    InstanceFormat::Input input{in.name, spec_input->kind, spec_input->width, 0,
                                spec_input->hash_buckets};
    input.text = std::find(text_inputs.begin(), text_inputs.end(), in.name) != text_inputs.end();
    if (input.is_id_input()) {
      const std::vector<int64_t> shape =
          input.kind == InputKind::kIds ? std::vector<int64_t>{-1} : std::vector<int64_t>{-1, -1};
      TESSERA_RETURN_IF_ERROR(Annotate(CheckTensor(in, DType::kInt64, shape, "input"), context));
      auto limit = id_limits.find(in.name);
      input.id_limit = limit == id_limits.end() || input.hash_buckets > 0
                           ? std::numeric_limits<int64_t>::max()
                           : limit->second;
    } else {
      TESSERA_RETURN_IF_ERROR(
          Annotate(CheckTensor(in, DType::kFloat32, {-1, input.width}, "input"), context));
    }
    format.inputs.push_back(std::move(input));
  }
  for (const InputSpec& in : spec.inputs) {
    if (seen.count(in.name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": the model's input '", in.name, "' is missing"));
    }
  }
  seen.clear();
  for (const TensorSignature& out : signature.outputs) {
    auto value = graph.output_values.find(out.name);
    if (value == graph.output_values.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": output '", out.name, "' is not an output of the model"));
    }
    if (!seen.insert(out.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, ": output '", out.name, "' appears twice"));
    }
    const int64_t width = graph.value_widths[value->second];
    TESSERA_RETURN_IF_ERROR(
        Annotate(CheckTensor(out, DType::kFloat32, {-1, width}, "output"), context));
    format.outputs.push_back({out.name, width, InstanceFormat::Output::Kind::kModel, out.name});
  }
  return format;
}

absl::StatusOr<std::map<std::string, InstanceFormat>> ModelInstanceFormats(
    const ModelDescription& model) {
  std::map<std::string, InstanceFormat> formats;
  for (const Signature& signature : model.signatures) {
    TESSERA_ASSIGN_OR_RETURN(InstanceFormat format,
                             MakeInstanceFormat(signature, model.spec, model.text_inputs));
    formats.emplace(signature.name, std::move(format));
  }
  if (formats.count(kServingDefault) == 0) {
    TESSERA_ASSIGN_OR_RETURN(const Signature signature, ServingSignature(model.spec));
    TESSERA_ASSIGN_OR_RETURN(InstanceFormat format,
                             MakeInstanceFormat(signature, model.spec, model.text_inputs));
    formats.emplace(kServingDefault, std::move(format));
  }
  for (InstanceFormat& format : ClassifySignatures(model.spec, formats.at(kServingDefault))) {
    formats.emplace(format.signature, std::move(format));  // a model's own name wins
  }
  return formats;
}

absl::Status ParseIdValue(const InstanceFormat::Input& input, const Json& value, int64_t& id) {
  if (input.text) {
    // A text, as the training files held it: an integer is its decimal digits.
    if (value.is_string()) {
      id = StringId(value.get_ref<const std::string&>());
      return absl::OkStatus();
    }
    if (value.is_number_unsigned()) {
      id = StringId(absl::StrCat(value.get<uint64_t>()));
      return absl::OkStatus();
    }
    if (value.is_number_integer()) {
      id = StringId(absl::StrCat(value.get<int64_t>()));
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", input.name, "' must be a string (or an integer, taken as its digits), got ",
        JsonTypeName(value)));
  }
  if (input.hash_buckets > 0) {
    // A raw id: any int64, or a categorical string by its StringId.
    if (value.is_string()) {
      id = StringId(value.get_ref<const std::string&>());
      return absl::OkStatus();
    }
    if (value.is_number_integer() &&
        (!value.is_number_unsigned() ||
         value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))) {
      id = value.get<int64_t>();
      return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("input '", input.name,
                                                   "' must be an int64 id or a string, got ",
                                                   JsonTypeName(value)));
  }
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    if (u > static_cast<uint64_t>(input.id_limit - 1)) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input.name, "': id ", u,
                                                     " is out of range [0, ", input.id_limit, ")"));
    }
    id = static_cast<int64_t>(u);
    return absl::OkStatus();
  }
  if (value.is_number_integer()) {
    id = value.get<int64_t>();
    if (id < 0 || id >= input.id_limit) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input.name, "': id ", id,
                                                     " is out of range [0, ", input.id_limit, ")"));
    }
    return absl::OkStatus();
  }
  std::string shown = value.is_number_float() ? absl::StrCat(" (", DumpJson(value), ")") : "";
  return absl::InvalidArgumentError(absl::StrCat(
      "input '", input.name, "' must be an integer id, got ", JsonTypeName(value), shown));
}

absl::Status ParseDenseValue(const InstanceFormat::Input& input, const Json& value,
                             std::vector<float>& row) {
  if (!value.is_array() || static_cast<int64_t>(value.size()) != input.width) {
    const std::string got =
        value.is_array() ? absl::StrCat("an array of ", value.size()) : JsonTypeName(value);
    return absl::InvalidArgumentError(absl::StrCat("input '", input.name, "' must be an array of ",
                                                   input.width, " numbers, got ", got));
  }
  row.clear();
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& element = value[i];
    if (!element.is_number()) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input.name, "': element ", i,
                                                     " must be a number, got ",
                                                     JsonTypeName(element)));
    }
    row.push_back(element.get<float>());
  }
  return absl::OkStatus();
}

InputColumn::InputColumn(const InstanceFormat::Input& input) : input_(&input) {}

absl::Status InputColumn::Append(const Json& value) {
  switch (input_->kind) {
    case InputKind::kIds: {
      int64_t id = 0;
      TESSERA_RETURN_IF_ERROR(ParseIdValue(*input_, value, id));
      ids_.push_back(id);
      break;
    }
    case InputKind::kIdList: {
      // [id, ...] or {"ids": [id, ...], "weights": [w, ...]}.
      const Json* ids = &value;
      const Json* weights = nullptr;
      if (value.is_object()) {
        for (const auto& [key, field] : value.items()) {
          if (key == "ids") {
            ids = &field;
          } else if (key == "weights") {
            weights = &field;
          } else {
            return absl::InvalidArgumentError(absl::StrCat(
                "input '", input_->name, "': unknown field '", key, "' (expected ids, weights)"));
          }
        }
        if (ids == &value) {
          return absl::InvalidArgumentError(
              absl::StrCat("input '", input_->name, "': the object has no \"ids\""));
        }
      }
      if (!ids->is_array()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", input_->name, "' must be an array of ids, got ", JsonTypeName(*ids)));
      }
      if (static_cast<int64_t>(ids->size()) > kMaxIdsPerList) {
        return absl::InvalidArgumentError(absl::StrCat("input '", input_->name, "' holds ",
                                                       ids->size(), " ids; at most ",
                                                       kMaxIdsPerList, " are taken"));
      }
      if (weights != nullptr && (!weights->is_array() || weights->size() != ids->size())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", input_->name, "': \"weights\" must be an array of one number per id (",
            ids->size(), ")"));
      }
      const size_t old_ids = list_.ids.size();
      const size_t old_weights = list_.weights.size();
      // Weights are all-or-nothing per batch: once one instance has them, every id has one.
      const bool weighted = weights != nullptr || !list_.weights.empty();
      if (weighted && list_.weights.empty()) list_.weights.assign(list_.ids.size(), 1.0f);
      for (size_t i = 0; i < ids->size(); ++i) {
        int64_t id = 0;
        absl::Status status = ParseIdValue(*input_, (*ids)[i], id);
        float weight = 1.0f;
        if (status.ok() && weights != nullptr) {
          const Json& w = (*weights)[i];
          if (!w.is_number() || !std::isfinite(w.get<double>())) {
            status = absl::InvalidArgumentError(absl::StrCat(
                "input '", input_->name, "': weight ", i, " must be a finite number"));
          } else {
            weight = w.get<float>();
          }
        }
        if (!status.ok()) {
          list_.ids.resize(old_ids);
          list_.weights.resize(old_weights);
          return status;
        }
        list_.ids.push_back(id);
        if (weighted) list_.weights.push_back(weight);
      }
      list_.row_splits.push_back(static_cast<int64_t>(list_.ids.size()));
      break;
    }
    case InputKind::kDense:
      TESSERA_RETURN_IF_ERROR(ParseDenseValue(*input_, value, row_));
      dense_.insert(dense_.end(), row_.begin(), row_.end());
      break;
  }
  ++size_;
  return absl::OkStatus();
}

void InputColumn::AppendPlaceholder() {
  switch (input_->kind) {
    case InputKind::kIds:
      ids_.push_back(0);
      break;
    case InputKind::kIdList:
      list_.row_splits.push_back(static_cast<int64_t>(list_.ids.size()));
      break;
    case InputKind::kDense:
      dense_.resize(dense_.size() + static_cast<size_t>(input_->width), 0.0f);
      break;
  }
  ++size_;
}

void InputColumn::Truncate(int64_t instances) {
  if (instances >= size_) return;
  switch (input_->kind) {
    case InputKind::kIds:
      ids_.resize(static_cast<size_t>(instances));
      break;
    case InputKind::kIdList:
      list_.row_splits.resize(static_cast<size_t>(instances) + 1);
      list_.ids.resize(static_cast<size_t>(list_.row_splits.back()));
      if (!list_.weights.empty()) list_.weights.resize(list_.ids.size());
      break;
    case InputKind::kDense:
      dense_.resize(static_cast<size_t>(instances * input_->width));
      break;
  }
  size_ = instances;
}

void InputColumn::Reserve(int64_t instances) {
  switch (input_->kind) {
    case InputKind::kIds:
      ids_.reserve(ids_.size() + instances);
      break;
    case InputKind::kIdList:
      list_.row_splits.reserve(list_.row_splits.size() + instances);
      break;
    case InputKind::kDense:
      dense_.reserve(dense_.size() + instances * input_->width);
      break;
  }
}

void InputColumn::MoveInto(Batch& batch) {
  switch (input_->kind) {
    case InputKind::kIds:
      batch.ids[input_->name] = std::move(ids_);
      break;
    case InputKind::kIdList:
      batch.id_lists[input_->name] = std::move(list_);
      break;
    case InputKind::kDense:
      // The row count and width match by construction.
      batch.dense[input_->name] =
          *Tensor::FromVector(Shape{size_, input_->width}, std::move(dense_));
      break;
  }
  ids_.clear();
  list_ = IdList();
  dense_.clear();
  size_ = 0;
}

BatchBuilder::BatchBuilder(const InstanceFormat& format) : format_(format) {
  columns_.reserve(format.inputs.size());
  for (const InstanceFormat::Input& input : format.inputs) columns_.emplace_back(input);
}

absl::Status BatchBuilder::Add(const Json& instance) {
  const size_t num_inputs = format_.inputs.size();
  std::vector<const Json*> values(num_inputs, nullptr);
  if (instance.is_object()) {
    for (const auto& [key, value] : instance.items()) {
      auto it =
          std::find_if(format_.inputs.begin(), format_.inputs.end(),
                       [&key = key](const InstanceFormat::Input& in) { return in.name == key; });
      if (it == format_.inputs.end()) {
        return absl::InvalidArgumentError(absl::StrCat("unknown input '", key,
                                                       "'; the signature's inputs are ",
                                                       absl::StrJoin(InputNames(format_), ", ")));
      }
      values[it - format_.inputs.begin()] = &value;
    }
    for (size_t i = 0; i < num_inputs; ++i) {
      if (values[i] == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("missing input '", format_.inputs[i].name, "'"));
      }
    }
  } else if (num_inputs == 1) {
    values[0] = &instance;  // the single-input shorthand
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "an instance must be an object mapping the inputs (",
        absl::StrJoin(InputNames(format_), ", "), ") to values, got ", JsonTypeName(instance)));
  }
  // A bad value takes back the instance's values appended before it: the builder is unchanged.
  for (size_t i = 0; i < num_inputs; ++i) {
    const absl::Status status = columns_[i].Append(*values[i]);
    if (!status.ok()) {
      for (size_t j = 0; j < i; ++j) columns_[j].Truncate(size_);
      return status;
    }
  }
  ++size_;
  return absl::OkStatus();
}

void BatchBuilder::Reserve(int64_t instances) {
  for (InputColumn& column : columns_) column.Reserve(instances);
}

Batch BatchBuilder::Take() {
  Batch batch;
  batch.size = size_;
  for (InputColumn& column : columns_) column.MoveInto(batch);
  size_ = 0;
  return batch;
}

absl::StatusOr<Predictions> Predictions::Of(const std::map<std::string, Tensor>& outputs,
                                            const InstanceFormat& format, int64_t batch_size) {
  std::vector<const Tensor*> tensors;
  for (const InstanceFormat::Output& out : format.outputs) {
    if (out.kind == InstanceFormat::Output::Kind::kClassLabels) {
      tensors.push_back(nullptr);
      continue;
    }
    const std::string& source = out.source_name();
    auto it = outputs.find(source);
    if (it == outputs.end()) {
      return absl::InternalError(absl::StrCat("the model gave no output '", source, "'"));
    }
    const int64_t width = out.kind == InstanceFormat::Output::Kind::kBinaryScores ? 1 : out.width;
    const Shape want{batch_size, width};
    if (it->second.shape() != want) {
      return absl::InternalError(absl::StrCat("output '", source, "' has shape ",
                                              it->second.shape().ToString(), ", expected ",
                                              want.ToString()));
    }
    tensors.push_back(&it->second);
  }
  return Predictions(format, std::move(tensors), batch_size);
}

absl::StatusOr<Json> Predictions::Value(size_t o, int64_t b) const {
  const InstanceFormat::Output& out = format_->outputs[o];
  Json values = Json::array();
  if (out.kind == InstanceFormat::Output::Kind::kClassLabels) {
    for (int64_t c = 0; c < out.width; ++c) values.push_back(std::to_string(c));
    return values;
  }
  const auto row = tensors_[o]->row(b);
  for (float v : row) {
    // JSON has no NaN or infinity (nlohmann would write null): never answer with one.
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", out.name, "' of instance ", b, " is not finite (", v, ")"));
    }
  }
  if (out.kind == InstanceFormat::Output::Kind::kBinaryScores) {
    values.push_back(1.0f - row[0]);
    values.push_back(row[0]);
    return values;
  }
  for (float v : row) values.push_back(v);
  return values;
}

absl::StatusOr<float> Predictions::Number(size_t o, int64_t b) const {
  TESSERA_ASSIGN_OR_RETURN(const Json values, Value(o, b));
  if (values.empty() || !values[0].is_number()) {
    return absl::InternalError(
        absl::StrCat("output '", format_->outputs[o].name, "' holds no number"));
  }
  return values[0].get<float>();
}

absl::StatusOr<Json> PredictionRows(const std::map<std::string, Tensor>& outputs,
                                    const InstanceFormat& format, int64_t batch_size,
                                    bool bare_single_output) {
  TESSERA_ASSIGN_OR_RETURN(const Predictions predictions,
                           Predictions::Of(outputs, format, batch_size));
  const bool bare = bare_single_output && format.outputs.size() == 1;
  Json rows = Json::array();
  for (int64_t b = 0; b < batch_size; ++b) {
    Json prediction = bare ? Json::array() : Json::object();
    for (size_t o = 0; o < format.outputs.size(); ++o) {
      TESSERA_ASSIGN_OR_RETURN(Json values, predictions.Value(o, b));
      if (bare) {
        prediction = std::move(values);
      } else {
        prediction[format.outputs[o].name] = std::move(values);
      }
    }
    rows.push_back(std::move(prediction));
  }
  return rows;
}

}  // namespace tessera::serving
