#include "schema/serving/internal/model_format.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schema/base/internal/field_codec.h"
#include "tessera/status.h"
#include "tessera/version.h"

namespace tessera {
namespace schema_internal {
namespace {

// Builders and parsers, one per struct of schema/serving/model.capnp. A parser rebuilds exactly
// what its builder wrote, so a loaded model exports to the same bytes.

void BuildInput(const InputSpec& input, wire::Input::Builder out) {
  out.setName(TextOf(input.name));
  switch (input.kind) {
    case InputKind::kIds:
      out.setKind(wire::InputKind::IDS);
      break;
    case InputKind::kDense:
      out.setKind(wire::InputKind::DENSE);
      break;
    case InputKind::kIdList:
      out.setKind(wire::InputKind::ID_LIST);
      break;
  }
  out.setWidth(input.width);
  out.setHashBuckets(input.hash_buckets);
}

absl::StatusOr<InputSpec> ParseInput(wire::Input::Reader in) {
  InputSpec input;
  input.name = DecodeText(in.getName());
  switch (in.getKind()) {
    case wire::InputKind::IDS:
      input.kind = InputKind::kIds;
      break;
    case wire::InputKind::DENSE:
      input.kind = InputKind::kDense;
      break;
    case wire::InputKind::ID_LIST:
      input.kind = InputKind::kIdList;
      break;
    default:
      return absl::DataLossError(absl::StrCat("model input ", input.name, ": invalid kind ",
                                              static_cast<int>(in.getKind())));
  }
  input.width = in.getWidth();
  input.hash_buckets = in.getHashBuckets();
  return input;
}

void BuildParam(const ParamSpec& param, wire::Param::Builder out) {
  out.setName(TextOf(param.name));
  out.setShape(DimsOf(param.shape.dims()));
  wire::Initializer::Builder init = out.initInitializer();
  init.setName(TextOf(param.initializer.name));
  EncodeNumberMap(param.initializer.params, init.initParams(param.initializer.params.size()));
  init.setSeed(param.initializer.seed);
  out.setTrainable(param.trainable);
  out.setPartitioned(param.partitioned);
}

absl::StatusOr<ParamSpec> ParseParam(wire::Param::Reader in) {
  ParamSpec param;
  param.name = DecodeText(in.getName());
  const std::string what = absl::StrCat("model parameter ", param.name);
  TESSERA_ASSIGN_OR_RETURN(param.shape, DecodeShape(in.getShape(), what));
  wire::Initializer::Reader init = in.getInitializer();
  param.initializer.name = DecodeText(init.getName());
  TESSERA_ASSIGN_OR_RETURN(param.initializer.params,
                           DecodeNumberMap(init.getParams(), absl::StrCat(what, " initializer")));
  param.initializer.seed = init.getSeed();
  param.trainable = in.getTrainable();
  param.partitioned = in.getPartitioned();
  return param;
}

void BuildNode(const NodeSpec& node, wire::Node::Builder out) {
  out.setName(TextOf(node.name));
  out.setOp(TextOf(node.op));
  EncodeTexts(node.inputs, out.initInputs(node.inputs.size()));
  EncodeTexts(node.params, out.initParams(node.params.size()));
  EncodeNumberMap(node.attrs, out.initAttrs(node.attrs.size()));
  schema_internal::EncodeTextMap(node.string_attrs, out.initStringAttrs(node.string_attrs.size()));
}

absl::StatusOr<NodeSpec> ParseNode(wire::Node::Reader in) {
  NodeSpec node;
  node.name = DecodeText(in.getName());
  const std::string what = absl::StrCat("model node ", node.name);
  node.op = DecodeText(in.getOp());
  node.inputs = DecodeTexts(in.getInputs());
  node.params = DecodeTexts(in.getParams());
  TESSERA_ASSIGN_OR_RETURN(node.attrs, DecodeNumberMap(in.getAttrs(), what));
  TESSERA_ASSIGN_OR_RETURN(node.string_attrs,
                           schema_internal::DecodeTextMap(in.getStringAttrs(), what));
  return node;
}

void BuildSpec(const ModelSpec& spec, wire::ModelSpec::Builder out) {
  out.setName(TextOf(spec.name));
  auto inputs = out.initInputs(spec.inputs.size());
  for (size_t i = 0; i < spec.inputs.size(); ++i) BuildInput(spec.inputs[i], inputs[i]);
  auto params = out.initParams(spec.params.size());
  for (size_t i = 0; i < spec.params.size(); ++i) BuildParam(spec.params[i], params[i]);
  auto nodes = out.initNodes(spec.nodes.size());
  for (size_t i = 0; i < spec.nodes.size(); ++i) BuildNode(spec.nodes[i], nodes[i]);
  auto outputs = out.initOutputs(spec.outputs.size());
  unsigned i = 0;
  for (const auto& [name, node] : spec.outputs) {
    outputs[i].setName(TextOf(name));
    outputs[i].setNode(TextOf(node));
    ++i;
  }
  wire::Loss::Builder loss = out.initLoss();
  loss.setKind(TextOf(spec.loss.kind));
  loss.setLogits(TextOf(spec.loss.logits));
}

absl::StatusOr<ModelSpec> ParseSpec(wire::ModelSpec::Reader in) {
  ModelSpec spec;
  spec.name = DecodeText(in.getName());
  for (wire::Input::Reader input : in.getInputs()) {
    TESSERA_ASSIGN_OR_RETURN(InputSpec parsed, ParseInput(input));
    spec.inputs.push_back(std::move(parsed));
  }
  for (wire::Param::Reader param : in.getParams()) {
    TESSERA_ASSIGN_OR_RETURN(ParamSpec parsed, ParseParam(param));
    spec.params.push_back(std::move(parsed));
  }
  for (wire::Node::Reader node : in.getNodes()) {
    TESSERA_ASSIGN_OR_RETURN(NodeSpec parsed, ParseNode(node));
    spec.nodes.push_back(std::move(parsed));
  }
  for (wire::Output::Reader output : in.getOutputs()) {
    std::string name = DecodeText(output.getName());
    if (!spec.outputs.empty() && !(spec.outputs.rbegin()->first < name)) {
      return absl::DataLossError(
          absl::StrCat("model output '", name, "' is out of order or repeated"));
    }
    spec.outputs.emplace_hint(spec.outputs.end(), std::move(name), DecodeText(output.getNode()));
  }
  spec.loss.kind = DecodeText(in.getLoss().getKind());
  spec.loss.logits = DecodeText(in.getLoss().getLogits());
  return spec;
}

void BuildTensorSignatures(const std::vector<TensorSignature>& signatures,
                           capnp::List<wire::TensorSignature>::Builder out) {
  for (size_t i = 0; i < signatures.size(); ++i) {
    out[i].setName(TextOf(signatures[i].name));
    out[i].setDtype(schema_internal::EncodeDType(signatures[i].dtype));
    out[i].setShape(DimsOf(signatures[i].shape));
  }
}

absl::StatusOr<std::vector<TensorSignature>> ParseTensorSignatures(
    capnp::List<wire::TensorSignature>::Reader in, absl::string_view what) {
  std::vector<TensorSignature> out;
  for (wire::TensorSignature::Reader t : in) {
    TensorSignature parsed;
    parsed.name = DecodeText(t.getName());
    const std::string t_what = absl::StrCat(what, " tensor ", parsed.name);
    TESSERA_ASSIGN_OR_RETURN(parsed.dtype, schema_internal::DecodeDType(t.getDtype(), t_what));
    TESSERA_ASSIGN_OR_RETURN(parsed.shape,
                             schema_internal::DecodeSignatureDims(t.getShape(), t_what));
    out.push_back(std::move(parsed));
  }
  return out;
}

void BuildDescription(const ModelDescription& model, wire::ExportedModel::Builder out) {
  BuildSpec(model.spec, out.initSpec());
  auto signatures = out.initSignatures(model.signatures.size());
  for (size_t i = 0; i < model.signatures.size(); ++i) {
    const Signature& signature = model.signatures[i];
    signatures[i].setName(TextOf(signature.name));
    BuildTensorSignatures(signature.inputs, signatures[i].initInputs(signature.inputs.size()));
    BuildTensorSignatures(signature.outputs, signatures[i].initOutputs(signature.outputs.size()));
  }
  out.setStep(model.step);
  out.setWriterVersion(TextOf(std::string(Version())));
  auto texts = out.initTextInputs(static_cast<unsigned>(model.text_inputs.size()));
  for (unsigned i = 0; i < texts.size(); ++i) texts.set(i, TextOf(model.text_inputs[i]));
}

}  // namespace

void BuildModel(const ModelDescription& model, const ModelLayout& layout,
                wire::ExportedModel::Builder out) {
  out.setFormatVersion(kModelFormatVersion);
  BuildDescription(model, out);
  out.setPieceBytes(static_cast<uint32_t>(layout.piece_bytes));
  out.setChecksumsOffset(layout.checksums_offset);
  auto variables = out.initVariables(static_cast<unsigned>(layout.variables.size()));
  for (unsigned i = 0; i < variables.size(); ++i) {
    const VariableExtent& v = layout.variables[i];
    variables[i].setName(TextOf(v.name));
    variables[i].initValue().setShape(DimsOf(v.shape.dims()));
    variables[i].setDtype(schema_internal::EncodeDType(DType::kFloat32));
    variables[i].setDataOffset(v.offset);
  }
}

absl::StatusOr<ModelDescription> ParseDescription(wire::ExportedModel::Reader in) {
  ModelDescription model;
  TESSERA_ASSIGN_OR_RETURN(model.spec, ParseSpec(in.getSpec()));
  for (wire::Signature::Reader signature : in.getSignatures()) {
    Signature parsed;
    parsed.name = DecodeText(signature.getName());
    const std::string what = absl::StrCat("signature ", parsed.name);
    TESSERA_ASSIGN_OR_RETURN(parsed.inputs, ParseTensorSignatures(signature.getInputs(), what));
    TESSERA_ASSIGN_OR_RETURN(parsed.outputs, ParseTensorSignatures(signature.getOutputs(), what));
    model.signatures.push_back(std::move(parsed));
  }
  model.step = in.getStep();
  for (capnp::Text::Reader text : in.getTextInputs()) model.text_inputs.push_back(DecodeText(text));
  TESSERA_ASSIGN_OR_RETURN(model.writer_version,
                           schema_internal::DecodeWriterVersion(
                               in.hasWriterVersion(), in.getWriterVersion(), "exported model"));
  return model;
}

}  // namespace schema_internal
}  // namespace tessera
