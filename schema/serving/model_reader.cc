// Reading exported model files (model_io.h): either format's message (Note [Model file layout]
// in internal/model_format.h), the checks that a format-2 message describes exactly the layout
// its shapes give, and the file opened in place (format 2 mapped) or decoded (format 1).
#include <capnp/message.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schema/base/internal/envelope.h"
#include "schema/base/internal/field_codec.h"
#include "schema/base/internal/message.h"
#include "schema/serving/internal/model_data.h"
#include "schema/serving/internal/model_format.h"
#include "schema/serving/model.capnp.h"
#include "schema/serving/model_io.h"
#include "tessera/env.h"
#include "tessera/status.h"

namespace tessera {
namespace {

using schema_internal::DecodeShape;
using schema_internal::DecodeText;
using schema_internal::FileKind;
using schema_internal::kInlineModelFormatVersion;
using schema_internal::kModelFormatVersion;
using schema_internal::ModelLayout;
using schema_internal::ParseDescription;
using schema_internal::VariableExtent;

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

absl::StatusOr<ExportedModel> DecodeExportedModel(const std::string& bytes) {
  TESSERA_ASSIGN_OR_RETURN(
      OpenedFile opened,
      OpenModelRegion(std::make_unique<BorrowedRegion>(bytes), "exported model"));
  return Materialize(std::move(opened));
}

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
