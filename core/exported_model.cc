#include "core/exported_model.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<Signature> ServingSignature(const ModelSpec& spec) {
  ASSIGN_OR_RETURN(const ResolvedGraph graph, ResolveModelSpec(spec));
  Signature signature;
  signature.name = kServingDefault;
  for (const InputSpec& in : spec.inputs) {
    if (in.kind == InputKind::kIds) {
      signature.inputs.push_back({in.name, DType::kInt64, {-1}});
    } else {
      signature.inputs.push_back({in.name, DType::kFloat32, {-1, in.width}});
    }
  }
  for (const auto& [name, value] : graph.output_values) {
    signature.outputs.push_back({name, DType::kFloat32, {-1, graph.value_widths[value]}});
  }
  return signature;
}

absl::Status ValidateExportedModel(const ExportedModel& model) {
  RETURN_IF_ERROR(Annotate(ResolveModelSpec(model.spec).status(), "exported model: spec"));
  for (const ParamSpec& param : model.spec.params) {
    auto it = model.variables.find(param.name);
    if (it == model.variables.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("exported model: no variable for parameter '", param.name, "'"));
    }
    RETURN_IF_ERROR(CheckSameShape(it->second.shape(), param.shape,
                                   absl::StrCat("exported model: variable '", param.name, "'")));
  }
  if (model.variables.size() != model.spec.params.size()) {
    std::set<std::string> params;
    for (const ParamSpec& param : model.spec.params) params.insert(param.name);
    for (const auto& [name, value] : model.variables) {
      if (params.count(name) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("exported model: variable '", name, "' is no parameter of the spec"));
      }
    }
  }
  std::set<std::string> names;
  for (const Signature& signature : model.signatures) {
    if (!names.insert(signature.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("exported model: duplicate signature '", signature.name, "'"));
    }
  }
  if (model.step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("exported model: step must be >= 0, got ", model.step));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Create(ExportedModel model) {
  RETURN_IF_ERROR(ValidateExportedModel(model));
  ASSIGN_OR_RETURN(Model runtime, Model::Create(model.spec));
  return std::unique_ptr<Predictor>(new Predictor(std::move(model), std::move(runtime)));
}

absl::StatusOr<std::map<std::string, Tensor>> Predictor::Predict(const Batch& batch) const {
  StepParams params;
  for (const auto& [name, value] : model_.variables) params.full.emplace(name, value.view());
  // Serving ignores labels: a copy without them keeps Forward from computing (and checking) a
  // loss. Only a batch that carries labels pays for the copy.
  Batch unlabeled;
  const Batch* input = &batch;
  if (batch.labels.size() > 0) {
    unlabeled.size = batch.size;
    unlabeled.ids = batch.ids;
    unlabeled.dense = batch.dense;
    input = &unlabeled;
  }
  ASSIGN_OR_RETURN(ForwardResult result, runtime_.Forward(*input, params));
  return std::move(result.outputs);
}

}  // namespace tessera
