#include "actors/train_step.h"

#include "absl/strings/str_cat.h"

namespace tessera {

absl::Status ModelVariables::Validate() const {
  if (!model) return absl::InvalidArgumentError("ModelVariables: no model");
  for (const ParamSpec& param : model->spec().params) {
    auto it = by_param.find(param.name);
    if (it == by_param.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ModelVariables: parameter ", param.name, " has no variable"));
    }
    if (it->second.shape != param.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ModelVariables: variable ", it->second.name, " has shape ",
          it->second.shape.ToString(), " but parameter ", param.name, " needs ",
          param.shape.ToString()));
    }
  }
  if (by_param.size() != model->spec().params.size()) {
    return absl::InvalidArgumentError("ModelVariables: a variable for an unknown parameter");
  }
  return absl::OkStatus();
}

}  // namespace tessera
