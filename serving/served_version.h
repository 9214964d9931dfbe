// ServedVersion: one loaded version of a served model — its Predictor and signatures — and the
// bodies of TF Serving's REST answers it gives (model_service.h routes requests to it):
//
//   Predict   {"instances": [...]} -> {"predictions": [...]}   row format (instances.h)
//             {"inputs": {...}}    -> {"outputs": {...}}       columnar: each output's values,
//                                                              or the one output's values bare
//   Classify  {"examples": [...]}  -> {"results": [[["0", 0.43], ["1", 0.57]], ...]}
//   Regress   {"examples": [...]}  -> {"results": [0.57, ...]}
//
//   TESSERA_ASSIGN_OR_RETURN(auto version, ServedVersion::Create(std::move(predictor), 3));
//   TESSERA_ASSIGN_OR_RETURN(std::string reply, version->Predict(body, limits));
//
// A reply is written a batch of kInstancesPerBatch at a time and never held as a JSON tree of
// the whole (Note [Bounded predict requests], Note [Out of memory] in http/internal/server_loop.h).
//
// Thread-safety: immutable after Create; any number of threads may use one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/serving/exported_model.h"
#include "serving/instances.h"
#include "serving/predict_request.h"

namespace tessera::serving {

class ServedVersion {
 public:
  // `version` is the number requests name it by. ModelInstanceFormats' errors.
  static absl::StatusOr<std::shared_ptr<const ServedVersion>> Create(
      std::unique_ptr<Predictor> predictor, int64_t version);

  int64_t version() const { return version_; }
  const Predictor& predictor() const { return *predictor_; }
  // By signature name (ModelInstanceFormats).
  const std::map<std::string, InstanceFormat>& formats() const { return formats_; }

  // The reply bodies. The request readers' errors (predict_request.h, example_request.h) and the
  // Predictor's pass through.
  absl::StatusOr<std::string> Predict(absl::string_view body, const PredictLimits& limits) const;
  absl::StatusOr<std::string> Classify(absl::string_view body, const PredictLimits& limits) const;
  absl::StatusOr<std::string> Regress(absl::string_view body, const PredictLimits& limits) const;

 private:
  ServedVersion(std::unique_ptr<Predictor> predictor, int64_t version,
                std::map<std::string, InstanceFormat> formats)
      : predictor_(std::move(predictor)), version_(version), formats_(std::move(formats)) {}

  std::unique_ptr<Predictor> predictor_;
  int64_t version_;
  std::map<std::string, InstanceFormat> formats_;
};

}  // namespace tessera::serving
