#include <utility>

#include "core/serving/exported_model.h"
#include "serving/load_predictor.h"
#include "tessera/serving.h"
#include "tessera/status.h"

namespace tessera {

Servable::Servable(std::unique_ptr<Predictor> predictor) : predictor_(std::move(predictor)) {}

Servable::~Servable() = default;

absl::StatusOr<std::unique_ptr<Servable>> Servable::Load(const std::string& dir) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Predictor> predictor, serving::LoadPredictor(dir));
  return std::unique_ptr<Servable>(new Servable(std::move(predictor)));
}

const ModelSpec& Servable::spec() const { return predictor_->model().spec; }

int64_t Servable::step() const { return predictor_->model().step; }

const std::string& Servable::writer_version() const { return predictor_->model().writer_version; }

absl::StatusOr<std::map<std::string, Tensor>> Servable::Predict(const Batch& batch) const {
  return predictor_->Predict(batch);
}

}  // namespace tessera
