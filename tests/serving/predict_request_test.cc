#include "serving/predict_request.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "serving/json.h"
#include "tessera/status.h"
#include "tests/cli/cli_test_util.h"
#include "tests/mangle.h"

namespace tessera::serving {
namespace {

std::map<std::string, InstanceFormat> RecsysFormats() {
  auto formats = ModelInstanceFormats(testing::TinyRecsysModel());
  REQUIRE(formats.ok());
  return *formats;
}

// What a predict request means, read the simple way: the whole body as one JSON tree, read field
// by field. ReadPredictRequest must agree with it on every body (the batch, or the error).
absl::StatusOr<Batch> ReadWithTree(absl::string_view body,
                                   const std::map<std::string, InstanceFormat>& formats) {
  TESSERA_ASSIGN_OR_RETURN(const Json request, ParseJson(body));
  if (!request.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request must be a JSON object with \"instances\" or \"inputs\", got ",
                     JsonTypeName(request)));
  }
  const Json* instances = nullptr;
  const Json* inputs = nullptr;
  std::string signature = kServingDefault;
  for (const auto& [key, value] : request.items()) {
    if (key == "instances") {
      instances = &value;
    } else if (key == "inputs") {
      inputs = &value;
    } else if (key == "signature_name") {
      if (!value.is_string()) {
        return absl::InvalidArgumentError(
            absl::StrCat("\"signature_name\" must be a string, got ", JsonTypeName(value)));
      }
      signature = value.get<std::string>();
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown field \"", key,
                       "\"; a predict request has \"instances\" or \"inputs\", and optionally "
                       "\"signature_name\""));
    }
  }
  if (instances != nullptr && inputs != nullptr) {
    return absl::InvalidArgumentError(
        "a predict request has either \"instances\" (rows) or \"inputs\" (columns), not both");
  }
  if (instances == nullptr && inputs == nullptr) {
    return absl::InvalidArgumentError("the request has no \"instances\" (or \"inputs\")");
  }
  if (instances != nullptr && (!instances->is_array() || instances->empty())) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"instances\" must be a non-empty array, got ",
                     instances->is_array() ? "an empty array" : JsonTypeName(*instances)));
  }
  if (inputs != nullptr && !inputs->is_object() && !inputs->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"inputs\" must be an object mapping each input to its values (or, for a "
                     "signature of one input, the array of its values), got ",
                     JsonTypeName(*inputs)));
  }
  auto format = formats.find(signature);
  if (format == formats.end()) {
    std::vector<std::string> names;
    for (const auto& [name, f] : formats) names.push_back(name);
    return absl::InvalidArgumentError(absl::StrCat("unknown signature '", signature,
                                                   "'; the model's signatures are ",
                                                   absl::StrJoin(names, ", ")));
  }
  const InstanceFormat& f = format->second;
  BatchBuilder builder(f);
  if (instances != nullptr) {
    for (size_t i = 0; i < instances->size(); ++i) {
      TESSERA_RETURN_IF_ERROR(Annotate(builder.Add((*instances)[i]), absl::StrCat("instance ", i)));
    }
    return builder.Take();
  }
  // Columns: each input's values, checked as a whole, then made into instances in order.
  std::vector<std::string> names;
  for (const InstanceFormat::Input& in : f.inputs) names.push_back(in.name);
  std::vector<const Json*> columns;
  if (inputs->is_array()) {
    if (f.inputs.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"inputs\" is an array, but signature '", f.signature, "' has ",
                       f.inputs.size(), " inputs (", absl::StrJoin(names, ", "),
                       "): send an object mapping each input to its values"));
    }
    columns.push_back(inputs);
  } else {
    for (const auto& [key, value] : inputs->items()) {
      if (std::find(names.begin(), names.end(), key) == names.end()) {
        return absl::InvalidArgumentError(absl::StrCat("\"inputs\": unknown input '", key,
                                                       "'; the signature's inputs are ",
                                                       absl::StrJoin(names, ", ")));
      }
    }
    for (const std::string& name : names) {
      if (!inputs->contains(name)) {
        return absl::InvalidArgumentError(absl::StrCat("\"inputs\" has no input '", name, "'"));
      }
      columns.push_back(&(*inputs)[name]);
    }
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    if (!columns[c]->is_array() || columns[c]->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("\"inputs\": input '", names[c],
                       "' must be a non-empty array of values, one per "
                       "instance, got ",
                       columns[c]->is_array() ? "an empty array" : JsonTypeName(*columns[c])));
    }
  }
  for (size_t c = 0; c < columns.size(); ++c) {
    if (columns[c]->size() != columns[0]->size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "\"inputs\": input '", names[c], "' has ", columns[c]->size(), " values, input '",
          names[0], "' has ", columns[0]->size(), "; every input needs one value per instance"));
    }
  }
  for (size_t i = 0; i < columns[0]->size(); ++i) {
    Json instance = Json::object();
    for (size_t c = 0; c < columns.size(); ++c) instance[names[c]] = (*columns[c])[i];
    TESSERA_RETURN_IF_ERROR(Annotate(builder.Add(instance), absl::StrCat("instance ", i)));
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
  REQUIRE(got->batches[0].dense.size() == want->dense.size());
  for (const auto& [name, tensor] : want->dense) {
    CHECK(got->batches[0].dense.at(name).shape() == tensor.shape());
    const auto got_values = got->batches[0].dense.at(name).values();
    const auto want_values = tensor.values();
    CHECK(std::vector<float>(got_values.begin(), got_values.end()) ==
          std::vector<float>(want_values.begin(), want_values.end()));
  }
}

std::map<std::string, InstanceFormat> MlpFormats() {
  auto formats = ModelInstanceFormats(testing::OnesMlpModel());
  REQUIRE(formats.ok());
  return *formats;
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
      // Columns.
      R"({"inputs": {"user": [1, 2], "item": [3, 0]}})",
      R"({"inputs": {"user": [1, 2], "item": [3, 0]}, "instances": [{"user": 1, "item": 1}]})",
      R"({"inputs": 3})",
      R"({"inputs": "x", "zzz": 1})",
      R"({"inputs": [1, 2]})",
      R"({"inputs": {}})",
      R"({"inputs": {"user": [1], "item": [1], "age": [3], "aaa": [1]}})",
      R"({"inputs": {"user": [1]}})",
      R"({"inputs": {"user": 1, "item": [1]}})",
      R"({"inputs": {"user": [1], "item": []}})",
      R"({"inputs": {"user": [1, 2], "item": [1]}})",
      R"({"inputs": {"item": [1, 2, 2], "user": [0, 1]}})",
      R"({"inputs": {"user": [1, 9], "item": [1, 1]}})",
      R"({"inputs": {"user": [1, 9], "item": [1, 7]}})",
      R"({"inputs": {"user": [1, 2], "item": [7, 1]}})",
      R"({"inputs": {"item": [7, 1], "user": [1, 9]}})",
      R"({"inputs": {"item": [1, 1.5], "user": [[1], 2]}})",
      R"({"inputs": {"user": [1, 2], "item": [3, 0], "user": [4, 4]}})",
      R"({"inputs": {"user": [1, 2, 3], "item": [3, 0], "user": [4, 4]}})",
      R"({"inputs": {"user": [1, 2], "item": [3, 0]}, "inputs": {"user": [0], "item": [1]}})",
      R"({"inputs": 5, "inputs": {"user": [0], "item": [1]}})",
      R"({"inputs": {"user": [0], "item": [1]}, "signature_name": "nope"})",
  };
  for (const std::string& body : bodies) CheckSameAsTree(body, formats);
}

TEST_CASE("dense columns, and the bare array of a signature of one input") {
  const auto formats = MlpFormats();
  const std::vector<std::string> bodies = {
      R"({"inputs": {"pixels": [[1, 2, 3], [4, 5, 6]]}})",
      R"({"inputs": [[1, 2, 3], [4, 5, 6]]})",
      R"({"inputs": [[1, 2, 3], [4, 5]]})",
      R"({"inputs": [[1, 2, 3], [4, 5, "6"]]})",
      R"({"inputs": [[1, 2, 3], 4]})",
      R"({"inputs": []})",
      R"({"inputs": {"pixels": [[1, 2, 3]], "y": [[1]]}})",
      R"({"instances": [[1, 2, 3], {"pixels": [4, 5, 6]}]})",
  };
  for (const std::string& body : bodies) CheckSameAsTree(body, formats);
  auto request = ReadPredictRequest(R"({"inputs": [[1, 2, 3], [4, 5, 6]]})", formats, {});
  REQUIRE(request.ok());
  CHECK(request->columnar);
  CHECK(request->batches[0].dense.at("pixels").row(1)[2] == 6.0f);
}

TEST_CASE("mangled requests are read exactly as the whole tree reads them") {
  const auto formats = RecsysFormats();
  const std::vector<std::string> valid = {
      R"({"instances": [{"user": 1, "item": 2}, {"user": 4, "item": 0}, {"item": [3], "user": 0}],)"
      R"( "signature_name": "serving_default"})",
      R"({"inputs": {"user": [1, 4, 0], "item": [2, 0, 3]}, "signature_name": "serving_default"})",
  };
  std::mt19937 random(11);
  const std::string alphabet = "{}[]\":,0123456789-.eE truefalsnuser item instances inputs\\u";
  for (int trial = 0; trial < 10000; ++trial) {
    const std::string body =
        Mangle(valid[trial % 2], 1 + static_cast<int>(random() % 4), random, alphabet);
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
                     "...\"; a predict request has \"instances\" or \"inputs\", and optionally "
                     "\"signature_name\""));
}

TEST_CASE("columns of many instances come in batches of kInstancesPerBatch, in order") {
  const auto formats = RecsysFormats();
  const int64_t n = 2 * kInstancesPerBatch + 452;
  std::string users;
  std::string items;
  for (int64_t i = 0; i < n; ++i) {
    absl::StrAppend(&users, i == 0 ? "" : ",", i % 5);
    absl::StrAppend(&items, i == 0 ? "" : ",", (i * 7) % 4);
  }
  // Items first: the columns' order in the text does not matter.
  auto request = ReadPredictRequest(
      absl::StrCat(R"({"inputs": {"item": [)", items, R"(], "user": [)", users, "]}}"), formats,
      PredictLimits{});
  REQUIRE_MESSAGE(request.ok(), request.status().message());
  CHECK(request->columnar);
  CHECK(request->size == n);
  REQUIRE(request->batches.size() == 3);
  int64_t i = 0;
  for (const Batch& batch : request->batches) {
    CHECK(batch.size == (&batch == &request->batches.back() ? 452 : kInstancesPerBatch));
    for (int64_t b = 0; b < batch.size; ++b, ++i) {
      REQUIRE(batch.ids.at("user")[b] == i % 5);
      REQUIRE(batch.ids.at("item")[b] == (i * 7) % 4);
    }
  }
  CHECK(i == n);
}

TEST_CASE("a columnar request over the limit, or far larger than its signature, is refused early") {
  const auto formats = RecsysFormats();
  const std::string eleven = "[1,1,1,1,1,1,1,1,1,1,\"bad\"]";
  auto over = ReadPredictRequest(
      absl::StrCat(R"({"inputs": {"user": )", eleven, R"(, "item": )", eleven, "}}"), formats,
      PredictLimits{/*max_instances=*/10});
  CHECK(over.status().code() == absl::StatusCode::kResourceExhausted);
  CHECK(over.status().message() ==
        "the request has 11 instances; this server takes at most 10 per request");

  // One value of a million numbers: refused after a few, the error naming its instance.
  std::string values = "0";
  for (int i = 1; i < 1'000'000; ++i) values += ",0";
  auto huge = ReadPredictRequest(
      absl::StrCat(R"({"inputs": {"user": [1, [)", values, R"(]], "item": [1, 1]}})"), formats,
      PredictLimits{});
  CHECK(huge.status().message() ==
        "instance 1: more than 22 values; the signature's inputs are user, item");

  // Field names are kept while the signature is unknown, but not without limit.
  std::string fields;
  for (size_t f = 0; f <= kMaxColumnarFields; ++f) absl::StrAppend(&fields, "\"f", f, "\": [1],");
  auto many = ReadPredictRequest(absl::StrCat(R"({"inputs": {)", fields, R"("user": [1]}})"),
                                 formats, PredictLimits{});
  CHECK(many.status().message() ==
        absl::StrCat("\"inputs\" has more than ", kMaxColumnarFields, " fields"));
}

}  // namespace
}  // namespace tessera::serving
