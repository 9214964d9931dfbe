#include "serving/classify_signatures.h"

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "tests/cli/cli_test_util.h"

namespace tessera::serving {
namespace {

using Kind = InstanceFormat::Output::Kind;

std::map<std::string, InstanceFormat> Formats(const ExportedModel& model) {
  auto formats = ModelInstanceFormats(model);
  REQUIRE_MESSAGE(formats.ok(), formats.status().message());
  return *formats;
}

TEST_CASE("a binary model gets a classification and a regression signature over its probability") {
  const auto formats = Formats(testing::TinyRecsysModel());
  REQUIRE(formats.count(kClassificationSignature) == 1);
  REQUIRE(formats.count(kRegressionSignature) == 1);
  const InstanceFormat& classify = formats.at(kClassificationSignature);
  CHECK(classify.method == InstanceFormat::Method::kClassify);
  REQUIRE(classify.inputs.size() == 2);
  CHECK(classify.inputs[0].name == "user");
  CHECK(classify.inputs[0].id_limit == 5);
  REQUIRE(classify.outputs.size() == 2);
  CHECK(classify.outputs[0].name == "classes");
  CHECK(classify.outputs[0].kind == Kind::kClassLabels);
  CHECK(classify.outputs[0].width == 2);
  CHECK(classify.outputs[1].name == "scores");
  CHECK(classify.outputs[1].kind == Kind::kBinaryScores);
  CHECK(classify.outputs[1].source == "probability");
  const InstanceFormat& regress = formats.at(kRegressionSignature);
  CHECK(regress.method == InstanceFormat::Method::kRegress);
  REQUIRE(regress.outputs.size() == 1);
  CHECK(regress.outputs[0].name == "outputs");
  CHECK(regress.outputs[0].source == "probability");
  CHECK(formats.at(kServingDefault).method == InstanceFormat::Method::kPredict);
}

TEST_CASE("a softmax model gets a classification signature, and no regression") {
  const auto formats = Formats(testing::OnesMlpModel());
  REQUIRE(formats.count(kClassificationSignature) == 1);
  CHECK(formats.count(kRegressionSignature) == 0);
  const InstanceFormat& classify = formats.at(kClassificationSignature);
  REQUIRE(classify.outputs.size() == 2);
  CHECK(classify.outputs[0].width == 2);  // two classes: "0", "1"
  CHECK(classify.outputs[1].kind == Kind::kModel);
  CHECK(classify.outputs[1].source == "probabilities");
}

TEST_CASE("a model without a probability output over its logits has neither") {
  ExportedModel model = testing::TinyRecsysModel();
  model.spec.outputs.erase("probability");
  model.signatures = {*ServingSignature(model.spec)};
  const auto formats = Formats(model);
  CHECK(formats.size() == 1);
  CHECK(ClassifySignatures(model.spec, formats.at(kServingDefault)).empty());
}

TEST_CASE("a model's own signature of a computed one's name takes its place") {
  ExportedModel model = testing::TinyRecsysModel();
  Signature own = model.signatures[0];
  own.name = kClassificationSignature;
  model.signatures.push_back(own);
  const auto formats = Formats(model);
  CHECK(formats.at(kClassificationSignature).method == InstanceFormat::Method::kPredict);
  CHECK(formats.at(kClassificationSignature).outputs.size() == 2);
  CHECK(formats.at(kClassificationSignature).outputs[0].name == "logits");
  CHECK(formats.count(kRegressionSignature) == 1);
}

}  // namespace
}  // namespace tessera::serving
