// ModelService: TensorFlow Serving's REST API for the models of a ModelRegistry
// (model_registry.h), as a function from a request (method, path, body) to a reply, apart from
// any HTTP transport (serving/model_server.h puts it on a socket).
//
//   POST /v1/models/NAME[/versions/V]:predict   {"instances": [...]} -> {"predictions": [...]}
//                                               {"inputs": {...}}    -> {"outputs": {...}}
//   POST /v1/models/NAME[/versions/V]:classify  {"examples": [...]}  -> {"results": [...]}
//   POST /v1/models/NAME[/versions/V]:regress   {"examples": [...]}  -> {"results": [...]}
//   GET  /v1/models/NAME[/versions/V]           -> the status of its versions (metadata.h)
//   GET  /v1/models/NAME[/versions/V]/metadata  -> a version's signatures (metadata.h)
//
// (served_version.h shows the bodies.) Without /versions/V a request goes to the newest available
// version. Errors are JSON {"error": "..."} with TF Serving's status codes (HttpStatusOf): 400 for
// a malformed body, a missing or empty "instances" / "inputs" / "examples", an unknown signature
// or one of another method, or a bad instance (naming the instance and the input); 404 for
// another model name, a version not available, or another path; 405 for a wrong method (with
// the methods allowed); 413 for more instances than PredictLimits allow. A request body is read
// as JSON whatever its Content-Type, and without a JSON tree of the whole (Note [Bounded predict
// requests]).
//
// Thread-safety: Handle may be called from any number of threads, while the registry changes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/serving/exported_model.h"
#include "serving/model_registry.h"
#include "serving/predict_request.h"

namespace tessera::serving {

struct HttpReply {
  int status = 200;
  std::string body;   // JSON
  std::string allow;  // a 405's allowed methods ("POST"); empty otherwise
  // What the reply was, for metrics: its status as a code (a 405 is kUnimplemented), and the
  // served model it concerns and the API ("predict", "classify", "regress", "metadata",
  // "status"), both empty when the request named no model this server serves.
  absl::StatusCode code = absl::StatusCode::kOk;
  std::string model_name;
  absl::string_view api;

  static HttpReply Ok(std::string body);
  static HttpReply Error(const absl::Status& status);  // {"error": message}, HttpStatusOf
  // 405, naming the method used and the one `allow`ed.
  static HttpReply MethodNotAllowed(absl::string_view method, absl::string_view path,
                                    absl::string_view allow);
};

class ModelService {
 public:
  // Serves the models `registry` holds at the time of each request.
  explicit ModelService(std::shared_ptr<const ModelRegistry> registry, PredictLimits limits = {});

  // Serves one export, `predictor`'s model, as `name` (CheckModelName's errors), its one version
  // numbered by its training step — what `tessera serve --model DIR` serves. ModelInstanceFormats'
  // errors.
  static absl::StatusOr<std::unique_ptr<ModelService>> Create(std::unique_ptr<Predictor> predictor,
                                                              std::string name,
                                                              PredictLimits limits = {});

  // The reply to one request. `path` is URL-decoded, without the query string.
  HttpReply Handle(absl::string_view method, absl::string_view path, absl::string_view body) const;

  const std::shared_ptr<const ModelRegistry>& registry() const { return registry_; }

 private:
  std::shared_ptr<const ModelRegistry> registry_;
  PredictLimits limits_;
};

// TF Serving's HTTP status of an error: InvalidArgument, FailedPrecondition and OutOfRange 400,
// NotFound 404, ResourceExhausted (a request over a limit here) 413, Unimplemented 501,
// Unavailable 503, others 500.
int HttpStatusOf(const absl::Status& status);

// {"error": message}.
std::string ErrorBody(absl::string_view message);

}  // namespace tessera::serving
