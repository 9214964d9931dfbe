#include "serving/served_version.h"

#include <functional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "serving/classify_signatures.h"
#include "serving/example_request.h"
#include "tessera/status.h"

namespace tessera::serving {
namespace {

// The index of output `name` of `format`; Internal without one.
absl::StatusOr<size_t> OutputIndex(const InstanceFormat& format, absl::string_view name) {
  for (size_t o = 0; o < format.outputs.size(); ++o) {
    if (format.outputs[o].name == name) return o;
  }
  return absl::InternalError(
      absl::StrCat("signature '", format.signature, "' has no output '", name, "'"));
}

// {"results": [...]}: the model run on every batch of `request`, `result(predictions, b)` for each
// example b in order, the batch dropped once answered.
absl::StatusOr<std::string> Results(
    const Predictor& predictor, ExampleRequest& request,
    const std::function<absl::StatusOr<Json>(const Predictions&, int64_t)>& result) {
  std::string reply = "{\"results\":[";
  bool first = true;
  for (Batch& batch : request.batches) {
    const int64_t size = batch.size;
    TESSERA_ASSIGN_OR_RETURN(auto outputs, predictor.Predict(batch));
    batch = Batch();
    TESSERA_ASSIGN_OR_RETURN(const Predictions predictions,
                             Predictions::Of(outputs, *request.format, size));
    for (int64_t b = 0; b < size; ++b) {
      TESSERA_ASSIGN_OR_RETURN(const Json value, result(predictions, b));
      if (!first) reply += ',';
      reply += DumpJson(value);
      first = false;
    }
  }
  reply += "]}";
  return reply;
}

}  // namespace

absl::StatusOr<std::shared_ptr<const ServedVersion>> ServedVersion::Create(
    std::unique_ptr<Predictor> predictor, int64_t version) {
  TESSERA_ASSIGN_OR_RETURN(auto formats, ModelInstanceFormats(predictor->model()));
  return std::shared_ptr<const ServedVersion>(
      new ServedVersion(std::move(predictor), version, std::move(formats)));
}

absl::StatusOr<std::string> ServedVersion::Predict(absl::string_view body,
                                                   const PredictLimits& limits) const {
  TESSERA_ASSIGN_OR_RETURN(PredictRequest request, ReadPredictRequest(body, formats_, limits));
  const InstanceFormat& format = *request.format;
  if (!request.columnar) {
    // {"predictions": [...]}, written a batch at a time (Note [Bounded predict requests]).
    std::string reply = "{\"predictions\":[";
    bool first = true;
    for (Batch& batch : request.batches) {
      const int64_t size = batch.size;
      TESSERA_ASSIGN_OR_RETURN(auto outputs, predictor_->Predict(batch));
      batch = Batch();
      TESSERA_ASSIGN_OR_RETURN(Json rows, PredictionRows(outputs, format, size,
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
  // {"outputs": {"name": [values of each instance], ...}}, or {"outputs": [...]} for one output.
  std::vector<std::string> columns(format.outputs.size());
  for (Batch& batch : request.batches) {
    const int64_t size = batch.size;
    TESSERA_ASSIGN_OR_RETURN(auto outputs, predictor_->Predict(batch));
    batch = Batch();
    TESSERA_ASSIGN_OR_RETURN(const Predictions predictions, Predictions::Of(outputs, format, size));
    for (size_t o = 0; o < columns.size(); ++o) {
      for (int64_t b = 0; b < size; ++b) {
        TESSERA_ASSIGN_OR_RETURN(const Json value, predictions.Value(o, b));
        if (!columns[o].empty()) columns[o] += ',';
        columns[o] += DumpJson(value);
      }
    }
  }
  if (columns.size() == 1) return absl::StrCat("{\"outputs\":[", columns[0], "]}");
  std::string reply = "{\"outputs\":{";
  for (size_t o = 0; o < columns.size(); ++o) {
    absl::StrAppend(&reply, o == 0 ? "" : ",", DumpJson(Json(format.outputs[o].name)), ":[",
                    columns[o], "]");
    columns[o] = std::string();
  }
  reply += "}}";
  return reply;
}

absl::StatusOr<std::string> ServedVersion::Classify(absl::string_view body,
                                                    const PredictLimits& limits) const {
  TESSERA_ASSIGN_OR_RETURN(
      ExampleRequest request,
      ReadExampleRequest(body, formats_, InstanceFormat::Method::kClassify, limits));
  TESSERA_ASSIGN_OR_RETURN(const size_t classes, OutputIndex(*request.format, kClassesOutput));
  TESSERA_ASSIGN_OR_RETURN(const size_t scores, OutputIndex(*request.format, kScoresOutput));
  // {"results": [[[label, score], ...] per example]}
  return Results(*predictor_, request,
                 [&](const Predictions& predictions, int64_t b) -> absl::StatusOr<Json> {
                   TESSERA_ASSIGN_OR_RETURN(const Json labels, predictions.Value(classes, b));
                   TESSERA_ASSIGN_OR_RETURN(const Json values, predictions.Value(scores, b));
                   Json pairs = Json::array();
                   for (size_t c = 0; c < labels.size() && c < values.size(); ++c) {
                     pairs.push_back(Json::array({labels[c], values[c]}));
                   }
                   return pairs;
                 });
}

absl::StatusOr<std::string> ServedVersion::Regress(absl::string_view body,
                                                   const PredictLimits& limits) const {
  TESSERA_ASSIGN_OR_RETURN(
      ExampleRequest request,
      ReadExampleRequest(body, formats_, InstanceFormat::Method::kRegress, limits));
  TESSERA_ASSIGN_OR_RETURN(const size_t output, OutputIndex(*request.format, kRegressionOutput));
  // {"results": [value per example]}
  return Results(*predictor_, request,
                 [&](const Predictions& predictions, int64_t b) -> absl::StatusOr<Json> {
                   TESSERA_ASSIGN_OR_RETURN(const float value, predictions.Number(output, b));
                   return Json(value);
                 });
}

}  // namespace tessera::serving
