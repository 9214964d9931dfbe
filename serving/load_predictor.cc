#include "serving/load_predictor.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "schema/serving/model_io.h"
#include "tessera/status.h"

namespace tessera::serving {

absl::StatusOr<std::unique_ptr<Predictor>> LoadPredictor(const std::string& dir, Env* env) {
  const std::string context = absl::StrCat("model '", dir, "'");
  absl::StatusOr<OpenedModel> model = OpenExportedModel(dir, env);
  TESSERA_RETURN_IF_ERROR(Annotate(model.status(), context));
  absl::StatusOr<std::unique_ptr<Predictor>> predictor =
      Predictor::Create(std::move(model->description), std::move(model->variables));
  TESSERA_RETURN_IF_ERROR(Annotate(predictor.status(), context));
  return std::move(*predictor);
}

}  // namespace tessera::serving
