#include "serving/model_service.h"

#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "serving/json.h"
#include "serving/metadata.h"
#include "serving/model_config.h"
#include "tessera/status.h"

namespace tessera::serving {
namespace {

constexpr absl::string_view kModelsPrefix = "/v1/models/";
constexpr absl::string_view kResources =
    "this server answers :predict, :classify, :regress, /metadata and the status";

enum class Resource { kStatus, kMetadata, kPredict, kClassify, kRegress };

HttpReply JsonReply(const Json& body) { return HttpReply::Ok(DumpJson(body)); }

HttpReply ErrorReply(const absl::Status& status) { return HttpReply::Error(status); }

absl::string_view ApiName(Resource resource) {
  switch (resource) {
    case Resource::kStatus:
      return "status";
    case Resource::kMetadata:
      return "metadata";
    case Resource::kPredict:
      return "predict";
    case Resource::kClassify:
      return "classify";
    case Resource::kRegress:
      return "regress";
  }
  return "";
}

// "'a', 'b'": the models' names, for an error.
std::string Names(const ModelRegistry::Models& models) {
  if (models.empty()) return "no model";
  std::vector<std::string> names;
  for (const auto& [name, model] : models) names.push_back(name);
  return absl::StrCat("'", absl::StrJoin(names, "', '"), "'");
}

// "version 42", "versions 1, 2", "no version yet".
std::string Versions(const ServedModel& model) {
  if (model.available.empty()) return "no version yet";
  std::vector<int64_t> versions;
  for (const auto& [version, served] : model.available) versions.push_back(version);
  return absl::StrCat(versions.size() == 1 ? "version " : "versions ",
                      absl::StrJoin(versions, ", "));
}

// The reply of `resource` of `model` (a version of it, or the newest).
HttpReply Answer(absl::string_view method, absl::string_view path, absl::string_view body,
                 const ServedModel& model, std::optional<int64_t> version, Resource resource,
                 const PredictLimits& limits) {
  const bool post = resource != Resource::kStatus && resource != Resource::kMetadata;
  const absl::string_view allowed = post ? "POST" : "GET";
  if (method != allowed && !(allowed == "GET" && method == "HEAD")) {
    return HttpReply::MethodNotAllowed(method, path, allowed);
  }

  if (resource == Resource::kStatus) {
    if (!version.has_value()) return JsonReply(ModelStatusJson(model.statuses));
    for (const VersionStatus& status : model.statuses) {
      if (status.version == *version) return JsonReply(ModelStatusJson({status}));
    }
    return ErrorReply(absl::NotFoundError(absl::StrCat(
        "model '", model.name, "' has no version '", *version, "'; it serves ", Versions(model))));
  }
  // The version that answers.
  const ServedVersion* served = nullptr;
  if (version.has_value()) {
    auto it = model.available.find(*version);
    if (it == model.available.end()) {
      return ErrorReply(
          absl::NotFoundError(absl::StrCat("model '", model.name, "' has no version '", *version,
                                           "' available; it serves ", Versions(model))));
    }
    served = it->second.get();
  } else {
    served = model.Newest();
    if (served == nullptr) {
      return ErrorReply(absl::NotFoundError(
          absl::StrCat("model '", model.name, "' has no version available yet (its status: GET ",
                       kModelsPrefix, model.name, ")")));
    }
  }
  absl::StatusOr<std::string> reply;
  switch (resource) {
    case Resource::kMetadata:
      return JsonReply(ModelMetadataJson(model.name, served->version(), served->formats()));
    case Resource::kPredict:
      reply = served->Predict(body, limits);
      break;
    case Resource::kClassify:
      reply = served->Classify(body, limits);
      break;
    case Resource::kRegress:
      reply = served->Regress(body, limits);
      break;
    case Resource::kStatus:
      break;
  }
  if (!reply.ok()) return ErrorReply(reply.status());
  return HttpReply::Ok(*std::move(reply));
}

}  // namespace

HttpReply HttpReply::Ok(std::string body) {
  HttpReply reply;
  reply.body = std::move(body);
  return reply;
}

HttpReply HttpReply::Error(const absl::Status& status) {
  HttpReply reply;
  reply.status = HttpStatusOf(status);
  reply.body = ErrorBody(status.message());
  reply.code = status.code();
  return reply;
}

HttpReply HttpReply::MethodNotAllowed(absl::string_view method, absl::string_view path,
                                      absl::string_view allow) {
  HttpReply reply;
  reply.status = 405;
  reply.body =
      ErrorBody(absl::StrCat("method ", method, " is not allowed on ", path, "; use ", allow));
  reply.allow = std::string(allow);
  reply.code = absl::StatusCode::kUnimplemented;
  return reply;
}

int HttpStatusOf(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kResourceExhausted:
      return 413;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    default:
      return 500;
  }
}

std::string ErrorBody(absl::string_view message) {
  return DumpJson(Json{{"error", std::string(message)}});
}

ModelService::ModelService(std::shared_ptr<const ModelRegistry> registry, PredictLimits limits)
    : registry_(std::move(registry)), limits_(limits) {}

absl::StatusOr<std::unique_ptr<ModelService>> ModelService::Create(
    std::unique_ptr<Predictor> predictor, std::string name, PredictLimits limits) {
  TESSERA_RETURN_IF_ERROR(CheckModelName(name));
  const int64_t step = predictor->model().step;
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const ServedVersion> version,
                           ServedVersion::Create(std::move(predictor), step));
  auto registry = std::make_shared<ModelRegistry>();
  registry->Set(
      {name, {{step, std::move(version)}}, {{step, VersionState::kAvailable, absl::OkStatus()}}});
  return std::make_unique<ModelService>(std::move(registry), limits);
}

HttpReply ModelService::Handle(absl::string_view method, absl::string_view path,
                               absl::string_view body) const {
  const std::shared_ptr<const ModelRegistry::Models> models = registry_->Snapshot();
  if (!absl::StartsWith(path, kModelsPrefix)) {
    return ErrorReply(
        absl::NotFoundError(absl::StrCat("no resource '", path, "'; this server answers under ",
                                         kModelsPrefix, " (models ", Names(*models), ")")));
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
  auto found = models->find(std::string(segments[0]));
  if (found == models->end()) {
    return ErrorReply(absl::NotFoundError(
        absl::StrCat("model '", segments[0], "' not found; this server serves ", Names(*models))));
  }
  const ServedModel& model = found->second;
  size_t next = 1;
  std::optional<int64_t> version;
  if (segments.size() >= 2 && segments[1] == "labels") {
    return ErrorReply(
        absl::NotFoundError(absl::StrCat("model '", model.name,
                                         "': version labels are not supported; name a version with "
                                         "/versions/N (",
                                         Versions(model), ")")));
  }
  if (segments.size() >= 3 && segments[1] == "versions") {
    int64_t number = 0;
    if (!absl::SimpleAtoi(segments[2], &number)) {
      return ErrorReply(
          absl::NotFoundError(absl::StrCat("model '", model.name, "' has no version '", segments[2],
                                           "'; it serves ", Versions(model))));
    }
    version = number;
    next = 3;
  }
  const size_t left = segments.size() - next;
  Resource resource;
  if (!verb.empty()) {
    if (left != 0 || (verb != "predict" && verb != "classify" && verb != "regress")) {
      return ErrorReply(
          absl::NotFoundError(absl::StrCat("no resource '", path, "'; ", kResources)));
    }
    if (verb == "predict") {
      resource = Resource::kPredict;
    } else if (verb == "classify") {
      resource = Resource::kClassify;
    } else {
      resource = Resource::kRegress;
    }
  } else if (left == 0) {
    resource = Resource::kStatus;
  } else if (left == 1 && segments[next] == "metadata") {
    resource = Resource::kMetadata;
  } else {
    return ErrorReply(absl::NotFoundError(absl::StrCat("no resource '", path, "'; ", kResources)));
  }

  HttpReply reply = Answer(method, path, body, model, version, resource, limits_);
  reply.model_name = model.name;
  reply.api = ApiName(resource);
  return reply;
}

}  // namespace tessera::serving
