#include "cli/internal/instances.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/internal/classify_signatures.h"
#include "core/status.h"

namespace tessera::cli {
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

// The rows of the smallest table each ids input is looked up in.
std::map<std::string, int64_t> IdLimits(const ModelSpec& spec, const ResolvedGraph& graph) {
  std::map<std::string, int64_t> limits;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const ResolvedGraph::Node& node = graph.nodes[n];
    if (node.op != OpKind::kEmbedding) continue;
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

absl::StatusOr<InstanceFormat> MakeInstanceFormat(const Signature& signature,
                                                  const ModelSpec& spec) {
  const std::string context = absl::StrCat("signature '", signature.name, "'");
  const absl::StatusOr<ResolvedGraph> resolved = ResolveModelSpec(spec);
  RETURN_IF_ERROR(Annotate(resolved.status(), context));
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
    InstanceFormat::Input input{in.name, spec_input->kind, spec_input->width, 0};
    if (input.kind == InputKind::kIds) {
      RETURN_IF_ERROR(Annotate(CheckTensor(in, DType::kInt64, {-1}, "input"), context));
      auto limit = id_limits.find(in.name);
      input.id_limit =
          limit == id_limits.end() ? std::numeric_limits<int64_t>::max() : limit->second;
    } else {
      RETURN_IF_ERROR(
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
    RETURN_IF_ERROR(Annotate(CheckTensor(out, DType::kFloat32, {-1, width}, "output"), context));
    format.outputs.push_back({out.name, width, InstanceFormat::Output::Kind::kModel, out.name});
  }
  return format;
}

absl::StatusOr<std::map<std::string, InstanceFormat>> ModelInstanceFormats(
    const ModelDescription& model) {
  std::map<std::string, InstanceFormat> formats;
  for (const Signature& signature : model.signatures) {
    ASSIGN_OR_RETURN(InstanceFormat format, MakeInstanceFormat(signature, model.spec));
    formats.emplace(signature.name, std::move(format));
  }
  if (formats.count(kServingDefault) == 0) {
    ASSIGN_OR_RETURN(const Signature signature, ServingSignature(model.spec));
    ASSIGN_OR_RETURN(InstanceFormat format, MakeInstanceFormat(signature, model.spec));
    formats.emplace(kServingDefault, std::move(format));
  }
  for (InstanceFormat& format : ClassifySignatures(model.spec, formats.at(kServingDefault))) {
    formats.emplace(format.signature, std::move(format));  // a model's own name wins
  }
  return formats;
}

absl::Status ParseIdValue(const InstanceFormat::Input& input, const Json& value, int64_t& id) {
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

BatchBuilder::BatchBuilder(const InstanceFormat& format)
    : format_(format), ids_(format.inputs.size()), dense_(format.inputs.size()) {}

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

  // Parse everything before appending anything, so a bad instance leaves the builder unchanged.
  std::vector<int64_t> ids(num_inputs, 0);
  std::vector<std::vector<float>> rows(num_inputs);
  for (size_t i = 0; i < num_inputs; ++i) {
    const InstanceFormat::Input& input = format_.inputs[i];
    if (input.kind == InputKind::kIds) {
      RETURN_IF_ERROR(ParseIdValue(input, *values[i], ids[i]));
    } else {
      RETURN_IF_ERROR(ParseDenseValue(input, *values[i], rows[i]));
    }
  }
  for (size_t i = 0; i < num_inputs; ++i) {
    if (format_.inputs[i].kind == InputKind::kIds) {
      ids_[i].push_back(ids[i]);
    } else {
      dense_[i].insert(dense_[i].end(), rows[i].begin(), rows[i].end());
    }
  }
  ++size_;
  return absl::OkStatus();
}

void BatchBuilder::Reserve(int64_t instances) {
  for (size_t i = 0; i < format_.inputs.size(); ++i) {
    const InstanceFormat::Input& input = format_.inputs[i];
    if (input.kind == InputKind::kIds) {
      ids_[i].reserve(ids_[i].size() + instances);
    } else {
      dense_[i].reserve(dense_[i].size() + instances * input.width);
    }
  }
}

Batch BatchBuilder::Take() {
  Batch batch;
  batch.size = size_;
  for (size_t i = 0; i < format_.inputs.size(); ++i) {
    const InstanceFormat::Input& input = format_.inputs[i];
    if (input.kind == InputKind::kIds) {
      batch.ids[input.name] = std::move(ids_[i]);
    } else {
      // The row count and width match by construction.
      batch.dense[input.name] =
          *Tensor::FromVector(Shape{size_, input.width}, std::move(dense_[i]));
    }
    ids_[i].clear();
    dense_[i].clear();
  }
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
  ASSIGN_OR_RETURN(const Json values, Value(o, b));
  if (values.empty() || !values[0].is_number()) {
    return absl::InternalError(
        absl::StrCat("output '", format_->outputs[o].name, "' holds no number"));
  }
  return values[0].get<float>();
}

absl::StatusOr<Json> PredictionRows(const std::map<std::string, Tensor>& outputs,
                                    const InstanceFormat& format, int64_t batch_size,
                                    bool bare_single_output) {
  ASSIGN_OR_RETURN(const Predictions predictions, Predictions::Of(outputs, format, batch_size));
  const bool bare = bare_single_output && format.outputs.size() == 1;
  Json rows = Json::array();
  for (int64_t b = 0; b < batch_size; ++b) {
    Json prediction = bare ? Json::array() : Json::object();
    for (size_t o = 0; o < format.outputs.size(); ++o) {
      ASSIGN_OR_RETURN(Json values, predictions.Value(o, b));
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

}  // namespace tessera::cli
