#include "cli/internal/predict_request.h"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cli/internal/json.h"
#include "core/status.h"
#include "tests/cli/cli_test_util.h"

namespace tessera::cli {
namespace {

std::map<std::string, InstanceFormat> RecsysFormats() {
  auto formats = ModelInstanceFormats(testing::TinyRecsysModel());
  REQUIRE(formats.ok());
  return *formats;
}

// What a predict request meant before ReadPredictRequest: the whole body as one JSON tree, read
// field by field. ReadPredictRequest must agree with it on every body (the batch, or the error).
absl::StatusOr<Batch> ReadWithTree(absl::string_view body,
                                   const std::map<std::string, InstanceFormat>& formats) {
  ASSIGN_OR_RETURN(const Json request, ParseJson(body));
  if (!request.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the request must be a JSON object with \"instances\", got ", JsonTypeName(request)));
  }
  const Json* instances = nullptr;
  std::string signature = kServingDefault;
  for (const auto& [key, value] : request.items()) {
    if (key == "instances") {
      instances = &value;
    } else if (key == "signature_name") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"signature_name\" must be a string, got ", JsonTypeName(value)));
      }
      signature = value.get<std::string>();
    } else if (key == "inputs") {
      return absl::InvalidArgumentError(
          "the columnar \"inputs\" format is not supported; send \"instances\"");
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field \"", key,
                       "\"; a predict request has \"instances\" and optionally "
                       "\"signature_name\""));
    }
  }
  if (instances == nullptr) return absl::InvalidArgumentError("the request has no \"instances\"");
  if (!instances->is_array() || instances->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"instances\" must be a non-empty array, got ",
                     instances->is_array() ? "an empty array" : JsonTypeName(*instances)));
  }
  auto format = formats.find(signature);
  if (format == formats.end()) {
    std::vector<std::string> names;
    for (const auto& [name, f] : formats) names.push_back(name);
    return absl::InvalidArgumentError(absl::StrCat("unknown signature '", signature,
                                                   "'; the model's signatures are ",
                                                   absl::StrJoin(names, ", ")));
  }
  BatchBuilder builder(format->second);
  for (size_t i = 0; i < instances->size(); ++i) {
    RETURN_IF_ERROR(Annotate(builder.Add((*instances)[i]), absl::StrCat("instance ", i)));
  }
  return builder.Take();
}

void CheckSameAsTree(absl::string_view body, const std::map<std::string, InstanceFormat>& formats) {
  CAPTURE(body);
  const absl::StatusOr<Batch> want = ReadWithTree(body, formats);
  const absl::StatusOr<PredictRequest> got = ReadPredictRequest(body, formats, PredictLimits{});
  REQUIRE(want.ok() == got.ok());
  if (!want.ok()) {
    CHECK(got.status() == want.status());
    return;
  }
  CHECK(got->size == want->size);
  REQUIRE(got->batches.size() == 1);
  CHECK(got->batches[0].size == want->size);
  CHECK(got->batches[0].ids == want->ids);
  CHECK(got->batches[0].dense.size() == want->dense.size());
}

TEST_CASE("a predict request is read into the batch its instances make") {
  const auto formats = RecsysFormats();
  auto request = ReadPredictRequest(
      R"({"instances": [{"user": 0, "item": 3}, {"item": 1, "user": 4}], "signature_name": )"
      R"("serving_default"})",
      formats, PredictLimits{});
  REQUIRE_MESSAGE(request.ok(), request.status().message());
  CHECK(request->format == &formats.at(kServingDefault));
  CHECK(request->size == 2);
  REQUIRE(request->batches.size() == 1);
  CHECK(request->batches[0].size == 2);
  CHECK(request->batches[0].ids.at("user") == Ids{0, 4});
  CHECK(request->batches[0].ids.at("item") == Ids{3, 1});
}

TEST_CASE("many instances come in batches of kInstancesPerBatch, in order") {
  const auto formats = RecsysFormats();
  const int64_t n = 2 * kInstancesPerBatch + 452;
  std::string body = "{\"instances\": [";
  for (int64_t i = 0; i < n; ++i) {
    absl::StrAppend(&body, i == 0 ? "" : ",", "{\"user\": ", i % 5, ", \"item\": ", i % 4, "}");
  }
  body += "]}";
  auto request = ReadPredictRequest(body, formats, PredictLimits{});
  REQUIRE(request.ok());
  CHECK(request->size == n);
  REQUIRE(request->batches.size() == 3);
  int64_t i = 0;
  for (const Batch& batch : request->batches) {
    CHECK(batch.size == (&batch == &request->batches.back() ? 452 : kInstancesPerBatch));
    for (int64_t b = 0; b < batch.size; ++b, ++i) {
      REQUIRE(batch.ids.at("user")[b] == i % 5);
      REQUIRE(batch.ids.at("item")[b] == i % 4);
    }
  }
  CHECK(i == n);
}

TEST_CASE("errors are those of the whole-tree reading, in its order") {
  const auto formats = RecsysFormats();
  const std::vector<std::string> bodies = {
      "",
      "{",
      "[]",
      "3",
      "null",
      "{}",
      R"({"instances": []})",
      R"({"instances": 3})",
      R"({"instances": {"user": 1}})",
      R"({"zeta": 1, "inputs": {}, "instances": [1]})",
      R"({"instances": [1], "signature_name": 3, "zzz": 1})",
      R"({"instances": [1], "signature_name": 3, "abc": 1})",
      R"({"instances": [{"user": 1, "item": 1}], "signature_name": "x"})",
      R"({"instances": [{"user": 1, "item": 1}, {"user": 1}]})",
      R"({"instances": [{"user": 1, "item": 1, "age": 30}]})",
      R"({"instances": [{"user": 1.5, "item": 1}]})",
      R"({"instances": [{"user": -1, "item": 1}]})",
      R"({"instances": [{"user": 18446744073709551615, "item": 1}]})",
      R"({"instances": [{"user": 1e999, "item": 1}]})",
      R"({"instances": [[1, 2]]})",
      R"({"instances": [{"user": 1, "item": 2}], "instances": [{"user": 3, "item": 0}]})",
      R"({"instances": 5, "instances": [{"user": 3, "item": 0}]})",
      R"({"instances": [{"user": 3, "item": 0}], "instances": 5})",
      R"({"signature_name": 1, "signature_name": "serving_default",)"
      R"( "instances": [{"user": 3, "item": 0}]})",
      R"({"instances": [{"user": 1, "item": 2, "user": 3}]})",
      R"({"instances": [{"user": 1, "item": 2}]} trailing)",
  };
  for (const std::string& body : bodies) CheckSameAsTree(body, formats);
}

TEST_CASE("mangled requests are read exactly as the whole tree reads them") {
  const auto formats = RecsysFormats();
  const std::string valid =
      R"({"instances": [{"user": 1, "item": 2}, {"user": 4, "item": 0}, {"item": [3], "user": 0}],)"
      R"( "signature_name": "serving_default"})";
  std::mt19937 random(11);
  const std::string alphabet = "{}[]\":,0123456789-.eE truefalsnuser item instances\\u";
  for (int trial = 0; trial < 5000; ++trial) {
    std::string body = valid;
    const int edits = 1 + static_cast<int>(random() % 4);
    for (int e = 0; e < edits && !body.empty(); ++e) {
      const size_t at = random() % body.size();
      const char c = alphabet[random() % alphabet.size()];
      switch (random() % 3) {
        case 0:
          body[at] = c;
          break;
        case 1:
          body.insert(body.begin() + at, c);
          break;
        default:
          body.erase(at, 1);
      }
    }
    CheckSameAsTree(body, formats);
  }
}

TEST_CASE("more instances than the limit is ResourceExhausted, before any is read") {
  const auto formats = RecsysFormats();
  std::string body = R"({"instances": [)";
  for (int i = 0; i < 11; ++i)
    absl::StrAppend(&body, i == 0 ? "" : ",", R"({"user": 1, "item": 1})");
  body += "]}";
  auto request = ReadPredictRequest(body, formats, PredictLimits{/*max_instances=*/10});
  CHECK(request.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(request.status().message() ==
        "the request has 11 instances; this server takes at most 10 per request");
  CHECK(ReadPredictRequest(body, formats, PredictLimits{/*max_instances=*/11}).ok());
  // The count comes before the instances are read: a bad one past the limit is not reached.
  body.replace(body.rfind("1}"), 1, "\"x\"");
  CHECK(ReadPredictRequest(body, formats, PredictLimits{10}).status().code() ==
        absl::StatusCode::kResourceExhausted);
}

TEST_CASE("an instance far larger than its signature takes is refused as soon as it is") {
  const auto formats = RecsysFormats();
  // One million values in one instance: refused after a few, so never held.
  std::string values = "0";
  for (int i = 1; i < 1'000'000; ++i) values += ",0";
  auto request =
      ReadPredictRequest(absl::StrCat(R"({"instances": [{"user": [)", values, R"(], "item": 1}]})"),
                         formats, PredictLimits{});
  CHECK(request.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(request.status().message() ==
        "instance 0: more than 22 values; the signature's inputs are user, item");

  // Deep nesting, inside an instance or elsewhere, is no trouble either.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  CHECK(ReadPredictRequest(absl::StrCat(R"({"instances": [)", deep, "]}"), formats, PredictLimits{})
            .status()
            .message()
            .find("more than 22 values") != absl::string_view::npos);
  CHECK(ReadPredictRequest(absl::StrCat(R"({"x": )", deep, R"(, "instances": [1]})"), formats,
                           PredictLimits{})
            .status()
            .message()
            .find("unknown field \"x\"") != absl::string_view::npos);
}

TEST_CASE("a long unknown field name is shown cut") {
  const auto formats = RecsysFormats();
  const std::string name(10'000, 'k');
  auto request = ReadPredictRequest(absl::StrCat(R"({")", name, R"(": 1, "instances": [1]})"),
                                    formats, PredictLimits{});
  CHECK(request.status().message() ==
        absl::StrCat("unknown field \"", std::string(64, 'k'),
                     "...\"; a predict request has \"instances\" and optionally "
                     "\"signature_name\""));
}

}  // namespace
}  // namespace tessera::cli
