#include "cli/predict_command.h"

#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "schema/serving/model_io.h"
#include "serving/json.h"
#include "tests/cli/cli_test_util.h"

namespace tessera::cli {

using serving::ParseJson;
namespace {

using testing::TempDir;
using testing::TinyRecsysModel;
using testing::TinyRecsysPredictor;

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

bool Contains(const absl::Status& status, const std::string& part) {
  return std::string(status.message()).find(part) != std::string::npos;
}

TEST_CASE("JSON lines in give one prediction object per instance out") {
  const auto predictor = TinyRecsysPredictor();
  std::istringstream in(
      "{\"user\": 0, \"item\": 3}\n"
      "\n"
      "  {\"item\": 1, \"user\": 4}  \r\n"
      "{\"user\": 0, \"item\": 3}");  // no final newline
  std::ostringstream out;
  REQUIRE(PredictJsonLines(*predictor, in, out).ok());
  const std::vector<std::string> lines = Lines(out.str());
  REQUIRE(lines.size() == 3);

  Batch batch;
  batch.size = 3;
  batch.ids["user"] = {0, 4, 0};
  batch.ids["item"] = {3, 1, 3};
  auto want = predictor->Predict(batch);
  REQUIRE(want.ok());
  for (int b = 0; b < 3; ++b) {
    CAPTURE(lines[b]);
    auto row = ParseJson(lines[b]);
    REQUIRE(row.ok());
    REQUIRE(row->is_object());
    CHECK(row->size() == 2);
    for (const char* output : {"logits", "probability"}) {
      CHECK((*row)[output][0].get<float>() == want->at(output).row(b)[0]);
    }
  }
  CHECK(lines[0] == lines[2]);
}

TEST_CASE("many instances are predicted in chunks, in order") {
  const auto predictor = TinyRecsysPredictor();
  std::string text;
  Batch batch;
  const int n = 2500;  // more than one chunk
  for (int k = 0; k < n; ++k) {
    absl::StrAppend(&text, "{\"user\": ", k % 5, ", \"item\": ", (k / 5) % 4, "}\n");
    batch.ids["user"].push_back(k % 5);
    batch.ids["item"].push_back((k / 5) % 4);
  }
  batch.size = n;
  std::istringstream in(text);
  std::ostringstream out;
  REQUIRE(PredictJsonLines(*predictor, in, out).ok());
  const std::vector<std::string> lines = Lines(out.str());
  REQUIRE(lines.size() == n);
  auto want = predictor->Predict(batch);
  REQUIRE(want.ok());
  int mismatches = 0;
  for (int k = 0; k < n; ++k) {
    auto row = ParseJson(lines[k]);
    if (!row.ok() || (*row)["probability"][0].get<float>() != want->at("probability").row(k)[0]) {
      ++mismatches;
    }
  }
  CHECK(mismatches == 0);
}

TEST_CASE("a bad line fails the whole run naming the line, and writes nothing") {
  struct Case {
    const char* input;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"{\"user\": 0, \"item\": 0}\n{\"user\": 0\n", "line 2: malformed JSON"},
      {"{\"user\": 0, \"item\": 0}\n\n{\"user\": 0}\n", "line 3: missing input 'item'"},
      {"{\"user\": 7, \"item\": 0}\n", "line 1: input 'user': id 7 is out of range [0, 5)"},
      {"[0, 1]\n", "line 1: an instance must be an object"},
      {"{\"user\": 0, \"item\": 0, \"age\": 1}\n", "line 1: unknown input 'age'"},
      {"{\"user\": 0, \"item\": 0}\n{\"user\": 0, \"item\": 0} {}\n", "line 2: malformed JSON"},
  };
  const auto predictor = TinyRecsysPredictor();
  for (const Case& c : cases) {
    CAPTURE(c.input);
    std::istringstream in(c.input);
    std::ostringstream out;
    const absl::Status status = PredictJsonLines(*predictor, in, out);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(status, c.message), status.message());
    CHECK(out.str().empty());
  }
}

TEST_CASE("empty input predicts nothing") {
  const auto predictor = TinyRecsysPredictor();
  std::istringstream in("\n  \n");
  std::ostringstream out;
  CHECK(PredictJsonLines(*predictor, in, out).ok());
  CHECK(out.str().empty());
}

TEST_CASE("the predict command reads an exported model and a JSON lines file") {
  TempDir dir;
  const std::string model_dir = dir.MakeSub("export");
  REQUIRE(WriteExportedModel(model_dir, TinyRecsysModel()).ok());
  const std::string input = dir.Sub("requests.jsonl");
  std::ofstream(input) << "{\"user\": 1, \"item\": 2}\n{\"user\": 3, \"item\": 0}\n";

  std::ostringstream out;
  const absl::Status status = RunPredict(model_dir, input, out);
  REQUIRE_MESSAGE(status.ok(), status.message());
  const std::vector<std::string> lines = Lines(out.str());
  REQUIRE(lines.size() == 2);
  std::istringstream again("{\"user\": 1, \"item\": 2}\n{\"user\": 3, \"item\": 0}\n");
  std::ostringstream want;
  REQUIRE(PredictJsonLines(*TinyRecsysPredictor(), again, want).ok());
  CHECK(out.str() == want.str());

  SUBCASE("a bad line names the file and the line") {
    std::ofstream(input) << "{\"user\": 1, \"item\": 2}\n{\"user\": 1, \"item\": \"2\"}\n";
    std::ostringstream bad_out;
    const absl::Status bad = RunPredict(model_dir, input, bad_out);
    CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(bad, absl::StrCat(input, ": line 2: input 'item' must be an integer")),
                  bad.message());
    CHECK(bad_out.str().empty());
  }
  SUBCASE("a missing input file is NotFound") {
    std::ostringstream none;
    const absl::Status missing = RunPredict(model_dir, dir.Sub("nope.jsonl"), none);
    CHECK(missing.code() == absl::StatusCode::kNotFound);
    CHECK(Contains(missing, "nope.jsonl"));
  }
  SUBCASE("a directory without a model is NotFound naming it") {
    std::ostringstream none;
    const absl::Status missing = RunPredict(dir.Sub("no_model"), input, none);
    CHECK(missing.code() == absl::StatusCode::kNotFound);
    CHECK(Contains(missing, "no_model"));
  }
}

}  // namespace
}  // namespace tessera::cli
