#include "serving/classify_signatures.h"

#include <string>

namespace tessera::serving {
namespace {

// The name of an output whose node is `op` applied to the node `logits` alone; empty if none.
std::string OutputOf(const ModelSpec& spec, const std::string& op, const std::string& logits) {
  for (const auto& [output, node_name] : spec.outputs) {
    for (const NodeSpec& node : spec.nodes) {
      if (node.name == node_name && node.op == op && node.inputs.size() == 1 &&
          node.inputs[0] == logits) {
        return output;
      }
    }
  }
  return "";
}

InstanceFormat Signature(const char* name, InstanceFormat::Method method,
                         const InstanceFormat& serving) {
  InstanceFormat format;
  format.signature = name;
  format.method = method;
  format.inputs = serving.inputs;
  return format;
}

}  // namespace

std::vector<InstanceFormat> ClassifySignatures(const ModelSpec& spec,
                                               const InstanceFormat& serving) {
  using Kind = InstanceFormat::Output::Kind;
  const absl::StatusOr<ResolvedGraph> graph = ResolveModelSpec(spec);
  if (!graph.ok()) return {};
  std::vector<InstanceFormat> signatures;
  if (graph->loss == LossKind::kSigmoidCrossEntropy) {
    const std::string probability = OutputOf(spec, kOpSigmoid, spec.loss.logits);
    if (probability.empty()) return {};
    InstanceFormat classify =
        Signature(kClassificationSignature, InstanceFormat::Method::kClassify, serving);
    classify.outputs = {{kClassesOutput, 2, Kind::kClassLabels, ""},
                        {kScoresOutput, 2, Kind::kBinaryScores, probability}};
    InstanceFormat regress =
        Signature(kRegressionSignature, InstanceFormat::Method::kRegress, serving);
    regress.outputs = {{kRegressionOutput, 1, Kind::kModel, probability}};
    signatures.push_back(std::move(classify));
    signatures.push_back(std::move(regress));
  } else if (graph->loss == LossKind::kSoftmaxCrossEntropy) {
    const std::string probabilities = OutputOf(spec, kOpSoftmax, spec.loss.logits);
    if (probabilities.empty()) return {};
    const int64_t classes = graph->value_widths[graph->loss_value];
    InstanceFormat classify =
        Signature(kClassificationSignature, InstanceFormat::Method::kClassify, serving);
    classify.outputs = {{kClassesOutput, classes, Kind::kClassLabels, ""},
                        {kScoresOutput, classes, Kind::kModel, probabilities}};
    signatures.push_back(std::move(classify));
  }
  return signatures;
}

}  // namespace tessera::serving
