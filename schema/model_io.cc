#include "schema/model_io.h"

#include <cstdint>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/env.h"
#include "core/status.h"
#include "schema/internal/envelope.h"
#include "schema/internal/field_codec.h"
#include "schema/internal/message.h"
#include "schema/model.capnp.h"

namespace tessera {
namespace {

using schema_internal::DecodeNumberMap;
using schema_internal::DecodeShape;
using schema_internal::DecodeText;
using schema_internal::DecodeTexts;
using schema_internal::DimsOf;
using schema_internal::EncodeNumberMap;
using schema_internal::EncodeTexts;
using schema_internal::FileKind;
using schema_internal::TextOf;

// The version this build writes and reads; see checkpoint_io.cc.
constexpr uint32_t kModelFormatVersion = 1;

// Builders and parsers, one per struct of schema/model.capnp. A parser rebuilds exactly what its
// builder wrote, so a loaded model exports to the same bytes.

void BuildInput(const InputSpec& input, wire::Input::Builder out) {
  out.setName(TextOf(input.name));
  out.setKind(input.kind == InputKind::kIds ? wire::InputKind::IDS : wire::InputKind::DENSE);
  out.setWidth(input.width);
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
    default:
      return absl::DataLossError(absl::StrCat("model input ", input.name, ": invalid kind ",
                                              static_cast<int>(in.getKind())));
  }
  input.width = in.getWidth();
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
  ASSIGN_OR_RETURN(param.shape, DecodeShape(in.getShape(), what));
  wire::Initializer::Reader init = in.getInitializer();
  param.initializer.name = DecodeText(init.getName());
  ASSIGN_OR_RETURN(param.initializer.params,
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
  ASSIGN_OR_RETURN(node.attrs, DecodeNumberMap(in.getAttrs(), what));
  ASSIGN_OR_RETURN(node.string_attrs, schema_internal::DecodeTextMap(in.getStringAttrs(), what));
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
    ASSIGN_OR_RETURN(InputSpec parsed, ParseInput(input));
    spec.inputs.push_back(std::move(parsed));
  }
  for (wire::Param::Reader param : in.getParams()) {
    ASSIGN_OR_RETURN(ParamSpec parsed, ParseParam(param));
    spec.params.push_back(std::move(parsed));
  }
  for (wire::Node::Reader node : in.getNodes()) {
    ASSIGN_OR_RETURN(NodeSpec parsed, ParseNode(node));
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
    ASSIGN_OR_RETURN(parsed.dtype, schema_internal::DecodeDType(t.getDtype(), t_what));
    ASSIGN_OR_RETURN(parsed.shape, schema_internal::DecodeSignatureDims(t.getShape(), t_what));
    out.push_back(std::move(parsed));
  }
  return out;
}

void BuildModel(const ExportedModel& model, wire::ExportedModel::Builder out) {
  out.setFormatVersion(kModelFormatVersion);
  BuildSpec(model.spec, out.initSpec());
  auto signatures = out.initSignatures(model.signatures.size());
  for (size_t i = 0; i < model.signatures.size(); ++i) {
    const Signature& signature = model.signatures[i];
    signatures[i].setName(TextOf(signature.name));
    BuildTensorSignatures(signature.inputs, signatures[i].initInputs(signature.inputs.size()));
    BuildTensorSignatures(signature.outputs, signatures[i].initOutputs(signature.outputs.size()));
  }
  auto variables = out.initVariables(model.variables.size());
  unsigned i = 0;
  for (const auto& [name, value] : model.variables) {
    variables[i].setName(TextOf(name));
    schema_internal::EncodeTensor(value, variables[i].initValue());
    ++i;
  }
  out.setStep(model.step);
}

absl::StatusOr<ExportedModel> ParseModel(wire::ExportedModel::Reader in) {
  if (in.getFormatVersion() != kModelFormatVersion) {
    return absl::InvalidArgumentError(
        absl::StrCat("exported model has format version ", in.getFormatVersion(),
                     "; this build reads format version ", kModelFormatVersion));
  }
  ExportedModel model;
  ASSIGN_OR_RETURN(model.spec, ParseSpec(in.getSpec()));
  for (wire::Signature::Reader signature : in.getSignatures()) {
    Signature parsed;
    parsed.name = DecodeText(signature.getName());
    const std::string what = absl::StrCat("signature ", parsed.name);
    ASSIGN_OR_RETURN(parsed.inputs, ParseTensorSignatures(signature.getInputs(), what));
    ASSIGN_OR_RETURN(parsed.outputs, ParseTensorSignatures(signature.getOutputs(), what));
    model.signatures.push_back(std::move(parsed));
  }
  for (wire::Variable::Reader variable : in.getVariables()) {
    std::string name = DecodeText(variable.getName());
    if (!model.variables.empty() && !(model.variables.rbegin()->first < name)) {
      return absl::DataLossError(
          absl::StrCat("model variable '", name, "' is out of order or repeated"));
    }
    ASSIGN_OR_RETURN(Tensor value, schema_internal::DecodeTensor(variable.getValue(),
                                                                 absl::StrCat("variable ", name)));
    model.variables.emplace_hint(model.variables.end(), std::move(name), std::move(value));
  }
  model.step = in.getStep();
  RETURN_IF_ERROR(ValidateExportedModel(model));
  return model;
}

// ValidateExportedModel checks signature names only; what a reader would refuse is checked here,
// so that everything written can be read back.
absl::Status CheckSignatures(const std::vector<Signature>& signatures) {
  for (const Signature& signature : signatures) {
    for (const auto* list : {&signature.inputs, &signature.outputs}) {
      for (const TensorSignature& t : *list) {
        const bool valid_dtype =
            t.dtype == DType::kFloat32 || t.dtype == DType::kInt64 || t.dtype == DType::kString;
        bool valid_dims = t.shape.size() <= static_cast<size_t>(kMaxRank);
        for (int64_t d : t.shape) valid_dims = valid_dims && d >= -1;
        if (!valid_dtype || !valid_dims) {
          return absl::InvalidArgumentError(absl::StrCat(
              "signature ", signature.name, ": tensor ", t.name, " has dtype ",
              static_cast<int>(t.dtype), " and shape [", absl::StrJoin(t.shape, ", "), "]"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> EncodeExportedModel(const ExportedModel& model) {
  RETURN_IF_ERROR(ValidateExportedModel(model));
  RETURN_IF_ERROR(CheckSignatures(model.signatures));
  size_t data_bytes = 0;
  for (const auto& [name, value] : model.variables) data_bytes += value.size() * sizeof(float);
  return schema_internal::BuildSealedMessage(
      FileKind::kModel, data_bytes, [&model](capnp::MessageBuilder& message) {
        BuildModel(model, message.initRoot<wire::ExportedModel>());
      });
}

absl::StatusOr<ExportedModel> DecodeExportedModel(const std::string& bytes) {
  absl::StatusOr<ExportedModel> model = absl::DataLossError("exported model: not decoded");
  RETURN_IF_ERROR(schema_internal::ReadSealedMessage(
      FileKind::kModel, bytes, [&model](capnp::MessageReader& message) {
        model = ParseModel(message.getRoot<wire::ExportedModel>());
        return model.status();
      }));
  return model;
}

absl::Status WriteExportedModel(const std::string& dir, const ExportedModel& model, Env* env) {
  ASSIGN_OR_RETURN(const std::string bytes, EncodeExportedModel(model));
  return WriteFileAtomically(*env, absl::StrCat(dir, "/", kModelFile), bytes,
                             /*sync_directory=*/true);
}

absl::StatusOr<ExportedModel> ReadExportedModel(const std::string& dir, Env* env) {
  const std::string path = absl::StrCat(dir, "/", kModelFile);
  absl::StatusOr<std::string> bytes =
      ReadFileBounded(*env, path, schema_internal::MaxFileBytes(FileKind::kModel));
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(
        absl::StrCat("no exported model in ", dir, " (", path, " does not exist)"));
  }
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<ExportedModel> model = DecodeExportedModel(*bytes);
  if (!model.ok()) return Annotate(model.status(), path);
  return model;
}

}  // namespace tessera
