#include "cli/internal/model_service.h"

#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/internal/metadata.h"
#include "core/status.h"

namespace tessera::cli {
namespace {

constexpr absl::string_view kModelsPrefix = "/v1/models/";

enum class Resource { kStatus, kMetadata, kPredict };

HttpReply JsonReply(int status, const Json& body) { return {status, DumpJson(body), ""}; }

HttpReply ErrorReply(const absl::Status& status) {
  return {HttpStatusOf(status), ErrorBody(status.message()), ""};
}

}  // namespace

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    default:
      return 500;
  }
}

std::string ErrorBody(absl::string_view message) {
  return DumpJson(Json{{"error", std::string(message)}});
}

absl::StatusOr<std::unique_ptr<ModelService>> ModelService::Create(
    std::unique_ptr<Predictor> predictor, std::string name, PredictLimits limits) {
  if (name.empty() || name.find_first_of("/:") != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name '", name, "' must be non-empty and hold no '/' or ':'"));
  }
  ASSIGN_OR_RETURN(auto formats, ModelInstanceFormats(predictor->model()));
  return std::unique_ptr<ModelService>(
      new ModelService(std::move(predictor), std::move(name), std::move(formats), limits));
}

HttpReply ModelService::Handle(absl::string_view method, absl::string_view path,
                               absl::string_view body) const {
  if (!absl::StartsWith(path, kModelsPrefix)) {
    return ErrorReply(absl::NotFoundError(absl::StrCat(
        "no resource '", path, "'; this server answers under ", kModelsPrefix, name_)));
  }
  absl::string_view rest = path.substr(kModelsPrefix.size());
  // A ":verb" suffix belongs to the last path segment.
  absl::string_view verb;
  const size_t colon = rest.rfind(':');
  if (colon != absl::string_view::npos && rest.find('/', colon) == absl::string_view::npos) {
    verb = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
  }
  std::vector<absl::string_view> segments = absl::StrSplit(rest, '/');
  if (segments[0] != name_) {
    return ErrorReply(absl::NotFoundError(
        absl::StrCat("model '", segments[0], "' not found; this server serves '", name_, "'")));
  }
  size_t next = 1;
  if (segments.size() >= 3 && segments[1] == "versions") {
    if (segments[2] != std::to_string(version())) {
      return ErrorReply(
          absl::NotFoundError(absl::StrCat("model '", name_, "' has no version '", segments[2],
                                           "'; it serves version ", version())));
    }
    next = 3;
  }
  const size_t left = segments.size() - next;
  Resource resource;
  if (!verb.empty()) {
    if (left != 0 || verb != "predict") {
      return ErrorReply(absl::NotFoundError(absl::StrCat(
          "no resource '", path, "'; this server answers :predict, /metadata and the status")));
    }
    resource = Resource::kPredict;
  } else if (left == 0) {
    resource = Resource::kStatus;
  } else if (left == 1 && segments[next] == "metadata") {
    resource = Resource::kMetadata;
  } else {
    return ErrorReply(absl::NotFoundError(absl::StrCat(
        "no resource '", path, "'; this server answers :predict, /metadata and the status")));
  }

  const absl::string_view allowed = resource == Resource::kPredict ? "POST" : "GET";
  if (method != allowed && !(allowed == "GET" && method == "HEAD")) {
    HttpReply reply{
        405,
        ErrorBody(absl::StrCat("method ", method, " is not allowed on ", path, "; use ", allowed)),
        std::string(allowed)};
    return reply;
  }
  switch (resource) {
    case Resource::kStatus:
      return JsonReply(200, ModelStatusJson(version()));
    case Resource::kMetadata:
      return JsonReply(200, ModelMetadataJson(name_, version(), formats_));
    case Resource::kPredict:
      break;
  }
  absl::StatusOr<std::string> predictions = Predict(body);
  if (!predictions.ok()) return ErrorReply(predictions.status());
  return {200, *std::move(predictions), ""};
}

absl::StatusOr<std::string> ModelService::Predict(absl::string_view body) const {
  ASSIGN_OR_RETURN(PredictRequest request, ReadPredictRequest(body, formats_, limits_));
  const InstanceFormat& format = *request.format;
  // {"predictions": [...]}, written a batch at a time (Note [Bounded predict requests]).
  std::string reply = "{\"predictions\":[";
  bool first = true;
  for (Batch& batch : request.batches) {
    const int64_t size = batch.size;
    ASSIGN_OR_RETURN(auto outputs, predictor_->Predict(batch));
    batch = Batch();
    ASSIGN_OR_RETURN(Json rows, PredictionRows(outputs, format, size,
                                               /*bare_single_output=*/true));
    for (const Json& row : rows) {
      if (!first) reply += ',';
      reply += DumpJson(row);
      first = false;
    }
  }
  reply += "]}";
  return reply;
}

}  // namespace tessera::cli
