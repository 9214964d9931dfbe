#include "core/serving/exported_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {

absl::StatusOr<Signature> ServingSignature(const ModelSpec& spec) {
  TESSERA_ASSIGN_OR_RETURN(const ResolvedGraph graph, ResolveModelSpec(spec));
  Signature signature;
  signature.name = kServingDefault;
  for (const InputSpec& in : spec.inputs) {
    if (in.kind == InputKind::kIds) {
      signature.inputs.push_back({in.name, DType::kInt64, {-1}});
    } else if (in.kind == InputKind::kIdList) {
      signature.inputs.push_back({in.name, DType::kInt64, {-1, -1}});  // ragged
    } else {
      signature.inputs.push_back({in.name, DType::kFloat32, {-1, in.width}});
    }
  }
  for (const auto& [name, value] : graph.output_values) {
    signature.outputs.push_back({name, DType::kFloat32, {-1, graph.value_widths[value]}});
  }
  return signature;
}

absl::Status ValidateModelDescription(const ModelDescription& description) {
  TESSERA_RETURN_IF_ERROR(
      Annotate(ResolveModelSpec(description.spec).status(), "exported model: spec"));
  std::set<std::string> names;
  for (const Signature& signature : description.signatures) {
    if (!names.insert(signature.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("exported model: duplicate signature '", signature.name, "'"));
    }
  }
  if (description.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("exported model: step must be >= 0, got ", description.step));
  }
  for (size_t k = 0; k < description.text_inputs.size(); ++k) {
    const std::string& name = description.text_inputs[k];
    auto input = std::find_if(description.spec.inputs.begin(), description.spec.inputs.end(),
                              [&](const InputSpec& in) { return in.name == name; });
    if (input == description.spec.inputs.end() || input->kind == InputKind::kDense ||
        input->hash_buckets < 1) {
      return absl::InvalidArgumentError(absl::StrCat("exported model: text input '", name,
                                                     "' is no hashed id input of the spec"));
    }
    if (k > 0 && description.text_inputs[k - 1] >= name) {
      return absl::InvalidArgumentError("exported model: text inputs not sorted and unique");
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> TextInputs(const ModelSpec& spec, const Dataset& train) {
  const std::vector<std::string> texts = train.TextFeatureNames();
  std::vector<std::string> out;
  for (const InputSpec& in : spec.inputs) {
    if (in.kind != InputKind::kDense && in.hash_buckets > 0 &&
        std::binary_search(texts.begin(), texts.end(), in.name)) {
      out.push_back(in.name);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

absl::Status CheckVariableShapes(const ModelSpec& spec,
                                 const std::map<std::string, Shape>& shapes) {
  for (const ParamSpec& param : spec.params) {
    auto it = shapes.find(param.name);
    if (it == shapes.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("exported model: no variable for parameter '", param.name, "'"));
    }
    TESSERA_RETURN_IF_ERROR(CheckSameShape(
        it->second, param.shape, absl::StrCat("exported model: variable '", param.name, "'")));
  }
  if (shapes.size() != spec.params.size()) {
    std::set<std::string> params;
    for (const ParamSpec& param : spec.params) params.insert(param.name);
    for (const auto& [name, shape] : shapes) {
      if (params.count(name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("exported model: variable '", name, "' is no parameter of the spec"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateExportedModel(const ExportedModel& model) {
  TESSERA_RETURN_IF_ERROR(ValidateModelDescription(model));
  std::map<std::string, Shape> shapes;
  for (const auto& [name, value] : model.variables) shapes.emplace(name, value.shape());
  return CheckVariableShapes(model.spec, shapes);
}

std::optional<int64_t> FirstNonFinite(absl::Span<const float> values) {
  // Exponent bits all set: infinity or NaN. On the bits, so the loop vectorizes and -ffast-math
  // could not fold it away.
  const size_t n = values.size();
  constexpr size_t kBlock = 256;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    bool bad = false;
    for (size_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, &values[i], sizeof(bits));
      bad |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    if (!bad) continue;
    for (size_t i = begin; i < end; ++i) {
      if (!std::isfinite(values[i])) return static_cast<int64_t>(i);
    }
  }
  return std::nullopt;
}

absl::StatusOr<ConstTensorView> ExportedModelRows::Rows(const std::string& name, int64_t begin,
                                                        int64_t end) {
  auto it = model_.variables.find(name);
  if (it == model_.variables.end()) {
    return absl::NotFoundError(absl::StrCat("exported model: no variable '", name, "'"));
  }
  const Tensor& value = it->second;
  if (begin < 0 || end < begin || end > value.rows()) {
    return absl::InvalidArgumentError(absl::StrCat("exported model: rows [", begin, ", ", end,
                                                   ") of variable '", name, "' with ", value.rows(),
                                                   " rows"));
  }
  if (value.shape().rank() == 0) return value.view();
  return value.RowBlock(begin, end - begin);
}

namespace {

absl::Status NonFiniteRow(const std::string& name, ConstTensorView value, int64_t first_row,
                          int64_t element) {
  const int64_t row_size = std::max<int64_t>(value.row_size(), 1);
  return absl::DataLossError(
      absl::StrCat("variable '", name, "' row ", first_row + element / row_size,
                   " holds a non-finite value (", value.data()[element], ")"));
}

}  // namespace

InMemoryVariables::InMemoryVariables(std::map<std::string, Tensor> variables)
    : variables_(std::move(variables)) {
  for (const auto& [name, value] : variables_) views_.emplace(name, value.view());
}

absl::Status InMemoryVariables::CheckRows(const std::string& name,
                                          absl::Span<const int64_t> rows) const {
  auto it = views_.find(name);
  if (it == views_.end()) return absl::NotFoundError(absl::StrCat("no variable '", name, "'"));
  const ConstTensorView& value = it->second;
  for (int64_t row : rows) {
    if (row < 0 || row >= value.rows()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable '", name, "' has no row ", row, " (it has ", value.rows(), ")"));
    }
    const ConstTensorView block = value.shape().rank() == 0 ? value : value.RowBlock(row, 1);
    if (const auto bad = FirstNonFinite(block.values())) {
      return NonFiniteRow(name, block, row, *bad);
    }
  }
  return absl::OkStatus();
}

absl::Status InMemoryVariables::CheckAll(const std::string& name) const {
  auto it = views_.find(name);
  if (it == views_.end()) return absl::NotFoundError(absl::StrCat("no variable '", name, "'"));
  if (const auto bad = FirstNonFinite(it->second.values())) {
    return NonFiniteRow(name, it->second, 0, *bad);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Create(ExportedModel model) {
  TESSERA_RETURN_IF_ERROR(ValidateExportedModel(model));
  auto variables = std::make_shared<InMemoryVariables>(std::move(model.variables));
  return Create(ModelDescription(std::move(model)), std::move(variables));
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Create(
    ModelDescription description, std::shared_ptr<const ServedVariables> variables) {
  TESSERA_RETURN_IF_ERROR(ValidateModelDescription(description));
  std::map<std::string, Shape> shapes;
  for (const auto& [name, view] : variables->views()) shapes.emplace(name, view.shape());
  TESSERA_RETURN_IF_ERROR(CheckVariableShapes(description.spec, shapes));
  TESSERA_ASSIGN_OR_RETURN(Model runtime, Model::Create(description.spec));
  // Dense variables are small and read whole by every prediction: checked once, here.
  for (size_t p = 0; p < description.spec.params.size(); ++p) {
    if (!runtime.IsEmbedding(static_cast<int>(p))) {
      TESSERA_RETURN_IF_ERROR(variables->CheckAll(description.spec.params[p].name));
    }
  }
  return std::unique_ptr<Predictor>(
      new Predictor(std::move(description), std::move(variables), std::move(runtime)));
}

absl::StatusOr<std::map<std::string, Tensor>> Predictor::Predict(const Batch& batch) const {
  // Serving ignores labels: a copy without them keeps Forward from computing (and checking) a
  // loss. Only a batch that carries labels pays for the copy.
  Batch unlabeled;
  const Batch* input = &batch;
  if (batch.labels.size() > 0) {
    unlabeled.size = batch.size;
    unlabeled.ids = batch.ids;
    unlabeled.id_lists = batch.id_lists;
    unlabeled.dense = batch.dense;
    input = &unlabeled;
  }
  // The rows the batch looks up are checked before anything reads them; the workspace keeps the
  // lookup plan, so Forward does not sort the ids again.
  StepWorkspace workspace;
  TESSERA_ASSIGN_OR_RETURN(const auto needed, runtime_.RowsNeeded(*input, workspace));
  for (const auto& [name, ids] : needed) TESSERA_RETURN_IF_ERROR(variables_->CheckRows(name, ids));
  StepParams params;
  params.full = variables_->views();
  ForwardResult result;
  TESSERA_RETURN_IF_ERROR(runtime_.Forward(*input, params, workspace, result));
  for (const auto& [name, output] : result.outputs) {
    if (const auto bad = FirstNonFinite(output.values())) {
      const int64_t width = std::max<int64_t>(output.row_size(), 1);
      return absl::InvalidArgumentError(absl::StrCat(
          "output '", name, "' of example ", *bad / width, " is not finite (",
          output.values()[*bad], "): the input drives the model outside float32's range"));
    }
  }
  return std::move(result.outputs);
}

}  // namespace tessera
