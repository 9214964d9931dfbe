// ModelService: TensorFlow Serving's REST API for one exported model, as a function from a
// request (method, path, body) to a reply, apart from any HTTP transport (cli/internal/
// model_server.h puts it on a socket).
//
//   POST /v1/models/NAME[/versions/V]:predict   {"instances": [...], "signature_name": "..."}
//                                               -> {"predictions": [...]} (instances.h's format)
//   GET  /v1/models/NAME[/versions/V]           -> the model's status (metadata.h)
//   GET  /v1/models/NAME[/versions/V]/metadata  -> its signatures (metadata.h)
//
// V is the model's one version, its training step. Errors are JSON {"error": "..."}: 400 for a
// malformed body, a missing or empty "instances", an unknown signature, or a bad instance (naming
// the instance and the input); 404 for another model name, version or path; 405 for a wrong
// method (with the methods allowed); 413 for more instances than PredictLimits allow. A request
// body is read without a JSON tree of the whole (Note [Bounded predict requests]).
//
// Thread-safety: immutable after Create; Handle may be called from any number of threads.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/internal/instances.h"
#include "cli/internal/json.h"
#include "cli/internal/predict_request.h"
#include "core/exported_model.h"

namespace tessera::cli {

struct HttpReply {
  int status = 200;
  std::string body;   // JSON
  std::string allow;  // a 405's allowed methods ("POST"); empty otherwise
};

class ModelService {
 public:
  // Serves `predictor`'s model as `name` (a non-empty name without '/' or ':'; InvalidArgument
  // otherwise) with the signatures of ModelInstanceFormats (and its errors), taking requests within
  // `limits`.
  static absl::StatusOr<std::unique_ptr<ModelService>> Create(std::unique_ptr<Predictor> predictor,
                                                              std::string name,
                                                              PredictLimits limits = {});

  const std::string& name() const { return name_; }
  int64_t version() const { return predictor_->model().step; }

  // The reply to one request. `path` is URL-decoded, without the query string.
  HttpReply Handle(absl::string_view method, absl::string_view path, absl::string_view body) const;

  // The body of a predict reply ({"predictions": [...]}) for the body of a predict request.
  // ReadPredictRequest's errors; the Predictor's own pass through.
  absl::StatusOr<std::string> Predict(absl::string_view body) const;

 private:
  ModelService(std::unique_ptr<Predictor> predictor, std::string name,
               std::map<std::string, InstanceFormat> formats, PredictLimits limits)
      : predictor_(std::move(predictor)),
        name_(std::move(name)),
        formats_(std::move(formats)),
        limits_(limits) {}

  std::unique_ptr<Predictor> predictor_;
  std::string name_;
  std::map<std::string, InstanceFormat> formats_;  // by signature name
  PredictLimits limits_;
};

// The HTTP status of an error: InvalidArgument 400, NotFound 404, ResourceExhausted (a request
// over a limit) 413, others 500.
int HttpStatusOf(const absl::Status& status);

// {"error": message}.
std::string ErrorBody(absl::string_view message);

}  // namespace tessera::cli
