#include "cli/internal/load_predictor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "schema/model_io.h"

namespace tessera::cli {

absl::StatusOr<std::unique_ptr<Predictor>> LoadPredictor(const std::string& dir, Env* env) {
  const std::string context = absl::StrCat("model '", dir, "'");
  absl::StatusOr<OpenedModel> model = OpenExportedModel(dir, env);
  RETURN_IF_ERROR(Annotate(model.status(), context));
  absl::StatusOr<std::unique_ptr<Predictor>> predictor =
      Predictor::Create(std::move(model->description), std::move(model->variables));
  RETURN_IF_ERROR(Annotate(predictor.status(), context));
  return std::move(*predictor);
}

}  // namespace tessera::cli
