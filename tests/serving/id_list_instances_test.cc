// Serving requests for multi-hot and hashed inputs: instances, columns and their errors.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/base/hash.h"
#include "serving/instances.h"
#include "serving/json.h"
#include "serving/predict_request.h"

namespace tessera::serving {
namespace {

Json J(const std::string& text) {
  auto json = ParseJson(text);
  REQUIRE_MESSAGE(json.ok(), json.status().message());
  return *json;
}

bool Contains(const absl::Status& status, const std::string& part) {
  return std::string(status.message()).find(part) != std::string::npos;
}

// "history": an id list of rows [0, 10); "c": one hashed id; "x": 2 dense values.
InstanceFormat MultiHotFormat() {
  InstanceFormat format;
  format.signature = "serving_default";
  format.inputs = {{"history", InputKind::kIdList, 1, 10, 0},
                   {"c", InputKind::kIds, 1, std::numeric_limits<int64_t>::max(), 1000},
                   {"x", InputKind::kDense, 2, 0, 0}};
  format.outputs = {{"y", 1}};
  return format;
}

TEST_CASE("id-list instances become an IdList: plain, weighted and empty lists") {
  const InstanceFormat format = MultiHotFormat();
  BatchBuilder builder(format);
  REQUIRE(builder.Add(J(R"({"history": [3, 7, 3], "c": 5, "x": [1, 2]})")).ok());
  REQUIRE(builder.Add(J(R"({"history": [], "c": "68fd1e64", "x": [3, 4]})")).ok());
  REQUIRE(builder.Add(
      J(R"({"history": {"ids": [9], "weights": [0.5]}, "c": -4, "x": [5, 6]})")).ok());
  const Batch batch = builder.Take();
  CHECK(batch.size == 3);
  const IdList& history = batch.id_lists.at("history");
  CHECK(history.row_splits == std::vector<int64_t>{0, 3, 3, 4});
  CHECK(history.ids == Ids{3, 7, 3, 9});
  // One weighted instance gives every id of the batch a weight, 1 where none was given.
  CHECK(history.weights == std::vector<float>{1, 1, 1, 0.5f});
  CHECK(batch.ids.at("c") == Ids{5, StringId("68fd1e64"), -4});
  CHECK(batch.dense.at("x").shape() == Shape{3, 2});
  CHECK(builder.size() == 0);
}

TEST_CASE("a bad id-list or hashed value is InvalidArgument naming the input, adding nothing") {
  const InstanceFormat format = MultiHotFormat();
  BatchBuilder builder(format);
  REQUIRE(builder.Add(J(R"({"history": [1], "c": 1, "x": [0, 0]})")).ok());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"history": [1, 10], "c": 1, "x": [0, 0]})", "out of range [0, 10)"},
      {R"({"history": 4, "c": 1, "x": [0, 0]})", "must be an array of ids"},
      {R"({"history": ["a"], "c": 1, "x": [0, 0]})", "must be an integer id"},
      {R"({"history": {"ids": [1], "weights": [1, 2]}, "c": 1, "x": [0, 0]})",
       "one number per id"},
      {R"({"history": {"ids": [1], "weights": ["w"]}, "c": 1, "x": [0, 0]})",
       "must be a finite number"},
      {R"({"history": {"weights": []}, "c": 1, "x": [0, 0]})", "no \"ids\""},
      {R"({"history": {"ids": [], "extra": 1}, "c": 1, "x": [0, 0]})", "unknown field 'extra'"},
      {R"({"history": [1], "c": 1.5, "x": [0, 0]})", "must be an int64 id or a string"},
      {R"({"history": [1], "c": 18446744073709551615, "x": [0, 0]})",
       "must be an int64 id or a string"},
      {R"({"history": [1, 2], "c": 1, "x": [0]})", "input 'x'"},
  };
  for (const auto& [text, part] : cases) {
    CAPTURE(text);
    const absl::Status status = builder.Add(J(text));
    CHECK(absl::IsInvalidArgument(status));
    CHECK_MESSAGE(Contains(status, part), status.message());
  }
  std::string many = R"({"history": [)";
  for (int64_t i = 0; i <= kMaxIdsPerList; ++i) many += i == 0 ? "1" : ",1";
  many += R"(], "c": 1, "x": [0, 0]})";
  CHECK(Contains(builder.Add(J(many)), "at most 4096"));
  // Only the first, good instance is in the batch, its list intact.
  const Batch batch = builder.Take();
  CHECK(batch.size == 1);
  CHECK(batch.id_lists.at("history").row_splits == std::vector<int64_t>{0, 1});
  CHECK(batch.id_lists.at("history").ids == Ids{1});
  CHECK(batch.id_lists.at("history").weights.empty());
}

TEST_CASE("columnar requests carry id lists, and a bad column value is refused") {
  std::map<std::string, InstanceFormat> formats = {{"serving_default", MultiHotFormat()}};
  auto request = ReadPredictRequest(
      R"({"inputs": {"history": [[1, 2], [], [4]], "c": ["a", 2, 3], "x": [[0, 1], [2, 3], [4, 5]]}})",
      formats, PredictLimits());
  REQUIRE_MESSAGE(request.ok(), request.status().message());
  REQUIRE(request->batches.size() == 1);
  const Batch& batch = request->batches[0];
  CHECK(batch.size == 3);
  CHECK(batch.id_lists.at("history").row_splits == std::vector<int64_t>{0, 2, 2, 3});
  CHECK(batch.id_lists.at("history").ids == Ids{1, 2, 4});
  CHECK(batch.ids.at("c") == Ids{StringId("a"), 2, 3});

  auto bad = ReadPredictRequest(
      R"({"inputs": {"history": [[1], [11]], "c": [1, 2], "x": [[0, 1], [2, 3]]}})", formats,
      PredictLimits());
  CHECK(absl::IsInvalidArgument(bad.status()));
  CHECK_MESSAGE(Contains(bad.status(), "instance 1"), bad.status().message());
}

}  // namespace
}  // namespace tessera::serving
