#include "schema/serving/model_io.h"

#include <capnp/message.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/env.h"
#include "core/base/status.h"
#include "core/base/version.h"
#include "schema/base/internal/envelope.h"
#include "schema/base/internal/field_codec.h"
#include "schema/base/internal/file_io.h"
#include "schema/base/internal/message.h"
#include "schema/serving/internal/model_data.h"
#include "schema/serving/model.capnp.h"

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
using schema_internal::ModelLayout;
using schema_internal::TextOf;
using schema_internal::VariableExtent;

// Builders and parsers, one per struct of schema/serving/model.capnp. A parser rebuilds exactly what its
// builder wrote, so a loaded model exports to the same bytes.

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

// Note [Model file layout]
// An exported model file of format 2 is
//
//   header     schema/base/internal/envelope.h's 24 bytes; its tail is everything after the message
//   message    an ExportedModel: spec, signatures, step, the piece size, where the checksum table
//              starts, and per variable its name, shape, dtype (float32) and data offset — sizes,
//              never values, so it is complete before the first value is read
//   data       each variable's float32s, raw little-endian, in name order, each followed by zeros
//              to a multiple of 8 bytes (so every variable starts 8-byte aligned in the file, and
//              in a page-aligned mapping of it)
//   checksums  the CRC-32C of every piece of every variable, in order, as uint32s, then zeros to
//              a multiple of 8: a piece is kModelPieceBytes (64 KiB) of one variable's data, its
//              last piece shorter and including the variable's padding
//   seal       the CRC-32C of the checksums (padding included) and the number of pieces
//
// Offsets in the message count from the start of the data; a reader recomputes the whole layout
// from the shapes and the piece size (LayOutModel) and refuses a file whose offsets, table or size
// differ, so variables can neither overlap nor leave gaps, and every byte is covered by exactly
// one check: the header's CRC-32 the message, a piece's CRC-32C its data and padding, the seal
// the table, the piece count itself.
//
// A writer streams: the header and message go first (their sizes follow from the shapes), then
// each variable's rows as the source yields them, each piece checksummed as it passes, then the
// table — one sequential pass in buffers of a few MiB, whatever the model's size. A reader maps
// the file, checks the header, the message and the table (kilobytes), and serves the variables in
// place, verifying a piece the first time a prediction reads a row in it: opening a 2.6 GB model
// reads a few hundred KiB, and a prediction touches the pages of the rows it looks up.
//
// Format 1 kept the values inside the message as 1 MiB checksummed chunks (field_codec.cc): a
// reader had to read and decode all of it, a writer to hold it all. It is still read.

constexpr uint32_t kModelFormatVersion = 2;
constexpr uint32_t kInlineModelFormatVersion = 1;

// Rows asked from a source at a time: a few MiB, at least one row.
constexpr uint64_t kRowReadBytes = uint64_t{4} << 20;

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
}

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
  TESSERA_ASSIGN_OR_RETURN(model.writer_version,
                           schema_internal::DecodeWriterVersion(
                               in.hasWriterVersion(), in.getWriterVersion(), "exported model"));
  return model;
}

// Format 1: the values inside the message.
absl::StatusOr<ExportedModel> ParseInlineModel(wire::ExportedModel::Reader in) {
  ExportedModel model;
  TESSERA_ASSIGN_OR_RETURN(static_cast<ModelDescription&>(model), ParseDescription(in));
  for (wire::Variable::Reader variable : in.getVariables()) {
    std::string name = DecodeText(variable.getName());
    if (!model.variables.empty() && !(model.variables.rbegin()->first < name)) {
      return absl::DataLossError(
          absl::StrCat("model variable '", name, "' is out of order or repeated"));
    }
    TESSERA_ASSIGN_OR_RETURN(
        Tensor value,
        schema_internal::DecodeTensor(variable.getValue(), absl::StrCat("variable ", name)));
    model.variables.emplace_hint(model.variables.end(), std::move(name), std::move(value));
  }
  TESSERA_RETURN_IF_ERROR(ValidateExportedModel(model));
  return model;
}

// Format 2: the description, and the layout of the data the message describes, checked to be
// exactly the one LayOutModel gives for its shapes and piece size.
struct MappedModelHead {
  ModelDescription description;
  ModelLayout layout;
};

absl::StatusOr<MappedModelHead> ParseMappedModel(wire::ExportedModel::Reader in,
                                                 uint64_t data_bytes) {
  MappedModelHead head;
  TESSERA_ASSIGN_OR_RETURN(head.description, ParseDescription(in));
  TESSERA_RETURN_IF_ERROR(ValidateModelDescription(head.description));
  std::vector<std::pair<std::string, Shape>> shapes;
  std::vector<uint64_t> offsets;
  std::map<std::string, Shape> by_name;
  for (wire::Variable::Reader variable : in.getVariables()) {
    std::string name = DecodeText(variable.getName());
    const std::string what = absl::StrCat("model variable '", name, "'");
    if (!shapes.empty() && !(shapes.back().first < name)) {
      return absl::DataLossError(absl::StrCat(what, " is out of order or repeated"));
    }
    if (variable.getValue().getChunks().size() != 0) {
      return absl::DataLossError(
          absl::StrCat(what, ": values inside the message (format 2 keeps them after it)"));
    }
    TESSERA_ASSIGN_OR_RETURN(const DType dtype,
                             schema_internal::DecodeDType(variable.getDtype(), what));
    if (dtype != DType::kFloat32) {
      return absl::DataLossError(absl::StrCat(what, " has dtype ", DTypeName(dtype),
                                              "; an exported model holds float32 values"));
    }
    TESSERA_ASSIGN_OR_RETURN(Shape shape, DecodeShape(variable.getValue().getShape(), what));
    by_name.emplace(name, shape);
    shapes.emplace_back(std::move(name), std::move(shape));
    offsets.push_back(variable.getDataOffset());
  }
  TESSERA_RETURN_IF_ERROR(CheckVariableShapes(head.description.spec, by_name));
  absl::StatusOr<ModelLayout> layout = schema_internal::LayOutModel(shapes, in.getPieceBytes());
  if (!layout.ok()) return absl::DataLossError(layout.status().message());
  for (size_t i = 0; i < offsets.size(); ++i) {
    const VariableExtent& v = layout->variables[i];
    if (offsets[i] != v.offset) {
      return absl::DataLossError(absl::StrCat(
          "model variable '", v.name, "': its ", v.bytes, " bytes of data are said to start at ",
          offsets[i], "; after the variables before it they start at ", v.offset,
          " (overlapping, out of place, or outside the file)"));
    }
  }
  if (in.getChecksumsOffset() != layout->checksums_offset) {
    return absl::DataLossError(
        absl::StrCat("exported model: its checksums are said to start at ", in.getChecksumsOffset(),
                     "; after the variables they start at ", layout->checksums_offset));
  }
  if (layout->data_bytes != data_bytes) {
    return absl::DataLossError(absl::StrCat(
        "exported model: its variables and checksums take ", layout->data_bytes,
        " bytes after the message, the file has ", data_bytes, " (truncated or extended)"));
  }
  head.layout = *std::move(layout);
  return head;
}

// A model file opened in place: format 2 mapped, format 1 decoded.
struct OpenedFile {
  ModelDescription description;
  int format_version = 0;
  std::map<std::string, Tensor> decoded;                     // format 1
  std::unique_ptr<schema_internal::MappedVariables> mapped;  // format 2
};

// The format version a message claims, read before its checksum is (a forged size must not make
// a reader checksum gigabytes first). Zero when the message cannot say.
uint32_t PeekFormatVersion(absl::string_view message) {
  uint32_t version = 0;
  schema_internal::ReadMessage(FileKind::kModel, message, [&](capnp::MessageReader& reader) {
    version = reader.getRoot<wire::ExportedModel>().getFormatVersion();
    return absl::OkStatus();
  }).IgnoreError();
  return version;
}

absl::StatusOr<OpenedFile> OpenModelRegion(std::unique_ptr<ReadOnlyMemoryRegion> region,
                                           const std::string& file) {
  const absl::string_view bytes(region->data(), region->size());
  TESSERA_ASSIGN_OR_RETURN(
      const schema_internal::EnvelopeHeader header,
      schema_internal::ParseEnvelopeHeader(FileKind::kModel, bytes, bytes.size()));
  const absl::string_view message =
      bytes.substr(schema_internal::kEnvelopeHeaderBytes, header.message_bytes());
  // Only format 1 has large messages; any other large one is refused before its checksum is
  // computed over what may be gigabytes of holes.
  if (message.size() > schema_internal::kMaxModelMessageBytes &&
      PeekFormatVersion(message) != kInlineModelFormatVersion) {
    return absl::DataLossError(absl::StrCat(
        "exported model: a message of ", message.size(), " bytes, more than format 2's ",
        schema_internal::kMaxModelMessageBytes, " (and not format 1)"));
  }
  TESSERA_RETURN_IF_ERROR(schema_internal::CheckMessageChecksum(FileKind::kModel, header, message));
  OpenedFile opened;
  absl::StatusOr<MappedModelHead> head = absl::DataLossError("exported model: not decoded");
  TESSERA_RETURN_IF_ERROR(schema_internal::ReadMessage(
      FileKind::kModel, message, [&](capnp::MessageReader& reader) -> absl::Status {
        wire::ExportedModel::Reader root = reader.getRoot<wire::ExportedModel>();
        opened.format_version = static_cast<int>(root.getFormatVersion());
        if (root.getFormatVersion() == kInlineModelFormatVersion) {
          if (header.tail_bytes != 0) {
            return absl::DataLossError("exported model: format 1 with data after its message");
          }
          TESSERA_ASSIGN_OR_RETURN(ExportedModel model, ParseInlineModel(root));
          opened.decoded = std::move(model.variables);
          opened.description = std::move(model);
          return absl::OkStatus();
        }
        if (root.getFormatVersion() != kModelFormatVersion) {
          return absl::InvalidArgumentError(
              absl::StrCat("exported model has format version ", root.getFormatVersion(),
                           "; this build reads format versions ", kInlineModelFormatVersion,
                           " and ", kModelFormatVersion));
        }
        head = ParseMappedModel(root, header.tail_bytes);
        return head.status();
      }));
  if (opened.format_version == kInlineModelFormatVersion) return opened;
  const uint64_t data_at = schema_internal::kEnvelopeHeaderBytes + header.message_bytes();
  TESSERA_ASSIGN_OR_RETURN(std::vector<uint32_t> crcs, schema_internal::ReadChecksumTable(
                                                           region->data() + data_at, head->layout));
  opened.description = std::move(head->description);
  opened.mapped = std::make_unique<schema_internal::MappedVariables>(
      std::move(region), data_at, std::move(head->layout), std::move(crcs), file);
  return opened;
}

// Every value of an opened file, in memory (format 2: each piece verified as it is copied).
absl::StatusOr<ExportedModel> Materialize(OpenedFile opened) {
  ExportedModel model;
  static_cast<ModelDescription&>(model) = std::move(opened.description);
  if (opened.mapped == nullptr) {
    model.variables = std::move(opened.decoded);
    return model;
  }
  for (const auto& [name, view] : opened.mapped->views()) {
    TESSERA_RETURN_IF_ERROR(opened.mapped->CheckAll(name));
    model.variables.emplace(name, Tensor::Copy(view));
  }
  return model;
}

// A region over bytes the caller holds (DecodeExportedModel).
class BorrowedRegion final : public ReadOnlyMemoryRegion {
 public:
  explicit BorrowedRegion(absl::string_view bytes) : bytes_(bytes) {}
  const char* data() const override { return bytes_.data(); }
  uint64_t size() const override { return bytes_.size(); }

 private:
  absl::string_view bytes_;
};

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

// Writes a format-2 model file (Note [Model file layout]) through `out`.
absl::Status WriteModel(const ModelDescription& model, VariableRowSource& source,
                        WritableFile& out) {
  TESSERA_RETURN_IF_ERROR(ValidateModelDescription(model));
  TESSERA_RETURN_IF_ERROR(CheckSignatures(model.signatures));
  std::map<std::string, Shape> by_name;
  for (const ParamSpec& param : model.spec.params) by_name.emplace(param.name, param.shape);
  const std::vector<std::pair<std::string, Shape>> shapes(by_name.begin(), by_name.end());
  TESSERA_ASSIGN_OR_RETURN(const ModelLayout layout,
                           schema_internal::LayOutModel(shapes, schema_internal::kModelPieceBytes));
  std::string head;
  try {
    capnp::MallocMessageBuilder message;
    BuildModel(model, layout, message.initRoot<wire::ExportedModel>());
    TESSERA_ASSIGN_OR_RETURN(head,
                             schema_internal::SerializeAfterHeaderSpace(FileKind::kModel, message));
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode the exported model: ", e.getDescription().cStr()));
  }
  const uint64_t message_bytes = head.size() - schema_internal::kEnvelopeHeaderBytes;
  if (message_bytes > schema_internal::kMaxModelMessageBytes ||
      head.size() + layout.data_bytes >
          static_cast<uint64_t>(schema_internal::MaxFileBytes(FileKind::kModel))) {
    return absl::InvalidArgumentError(
        absl::StrCat("exported model: ", head.size() + layout.data_bytes, " bytes (a message of ",
                     message_bytes, "), more than a model file may hold"));
  }
  schema_internal::SealInPlace(FileKind::kModel, head, layout.data_bytes);
  TESSERA_RETURN_IF_ERROR(out.WriteAt(0, head));
  schema_internal::ModelDataWriter data(out, head.size(), layout);
  for (const VariableExtent& v : layout.variables) {
    const int64_t rows = v.shape.rows();
    const uint64_t row_bytes = static_cast<uint64_t>(std::max<int64_t>(v.shape.row_size(), 1)) * 4;
    const int64_t step = static_cast<int64_t>(
        std::max<uint64_t>(1, kRowReadBytes / std::max<uint64_t>(row_bytes, 1)));
    for (int64_t begin = 0; begin < rows; begin += step) {
      const int64_t end = std::min(rows, begin + step);
      TESSERA_ASSIGN_OR_RETURN(const ConstTensorView block, source.Rows(v.name, begin, end));
      const Shape want = v.shape.rank() == 0 ? v.shape : v.shape.WithRows(end - begin);
      TESSERA_RETURN_IF_ERROR(CheckSameShape(
          block.shape(), want,
          absl::StrCat("rows [", begin, ", ", end, ") of variable '", v.name, "' for the export")));
      if (const auto bad = FirstNonFinite(block.values())) {
        const int64_t row = begin + *bad / std::max<int64_t>(v.shape.row_size(), 1);
        return absl::InvalidArgumentError(
            absl::StrCat("variable '", v.name, "' row ", row, " holds a non-finite value (",
                         block.values()[*bad],
                         "): a model with NaN or infinite values is not "
                         "exported"));
      }
      TESSERA_RETURN_IF_ERROR(data.Append(absl::string_view(
          reinterpret_cast<const char*>(block.data()), static_cast<size_t>(block.size()) * 4)));
    }
    TESSERA_RETURN_IF_ERROR(data.EndVariable());
  }
  return data.Finish();
}

}  // namespace

absl::StatusOr<std::string> EncodeExportedModel(const ExportedModel& model) {
  TESSERA_RETURN_IF_ERROR(ValidateExportedModel(model));
  ExportedModelRows rows(model);
  std::string bytes;
  schema_internal::StringWriter out(&bytes);
  TESSERA_RETURN_IF_ERROR(WriteModel(model, rows, out));
  return bytes;
}

absl::StatusOr<ExportedModel> DecodeExportedModel(const std::string& bytes) {
  TESSERA_ASSIGN_OR_RETURN(
      OpenedFile opened,
      OpenModelRegion(std::make_unique<BorrowedRegion>(bytes), "exported model"));
  return Materialize(std::move(opened));
}

absl::Status WriteExportedModel(const std::string& dir, const ModelDescription& model,
                                VariableRowSource& rows, Env* env) {
  TESSERA_RETURN_IF_ERROR(ValidateModelDescription(model));
  return WriteFileAtomically(
      *env, absl::StrCat(dir, "/", kModelFile),
      [&](WritableFile& out) { return WriteModel(model, rows, out); },
      /*sync_directory=*/true);
}

absl::Status WriteExportedModel(const std::string& dir, const ExportedModel& model, Env* env) {
  TESSERA_RETURN_IF_ERROR(ValidateExportedModel(model));
  ExportedModelRows rows(model);
  return WriteExportedModel(dir, model, rows, env);
}

namespace {

absl::StatusOr<OpenedFile> OpenModelFile(const std::string& dir, Env* env) {
  const std::string path = absl::StrCat(dir, "/", kModelFile);
  absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> region = env->NewReadOnlyMemoryRegion(path);
  if (absl::IsNotFound(region.status())) {
    return absl::NotFoundError(
        absl::StrCat("no exported model in ", dir, " (", path, " does not exist)"));
  }
  if (!region.ok()) return region.status();
  absl::StatusOr<OpenedFile> opened = OpenModelRegion(*std::move(region), path);
  if (!opened.ok()) return Annotate(opened.status(), path);
  return opened;
}

}  // namespace

absl::StatusOr<ExportedModel> ReadExportedModel(const std::string& dir, Env* env) {
  TESSERA_ASSIGN_OR_RETURN(OpenedFile opened, OpenModelFile(dir, env));
  return Materialize(std::move(opened));
}

absl::StatusOr<OpenedModel> OpenExportedModel(const std::string& dir, Env* env) {
  TESSERA_ASSIGN_OR_RETURN(OpenedFile opened, OpenModelFile(dir, env));
  OpenedModel model;
  model.description = std::move(opened.description);
  model.format_version = opened.format_version;
  if (opened.mapped != nullptr) {
    model.variables = std::move(opened.mapped);
  } else {
    model.variables = std::make_shared<InMemoryVariables>(std::move(opened.decoded));
  }
  return model;
}

}  // namespace tessera
