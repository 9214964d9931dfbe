// Writing exported model files (model_io.h): a format-2 file (Note [Model file layout] in
// internal/model_format.h) in one sequential pass, after the checks that everything written can
// be read back.
#include <capnp/message.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "schema/base/internal/envelope.h"
#include "schema/base/internal/file_io.h"
#include "schema/base/internal/message.h"
#include "schema/serving/internal/model_data.h"
#include "schema/serving/internal/model_format.h"
#include "schema/serving/model.capnp.h"
#include "schema/serving/model_io.h"
#include "tessera/env.h"
#include "tessera/status.h"

namespace tessera {
namespace {

using schema_internal::BuildModel;
using schema_internal::FileKind;
using schema_internal::ModelLayout;
using schema_internal::VariableExtent;

// Rows asked from a source at a time: a few MiB, at least one row.
constexpr uint64_t kRowReadBytes = uint64_t{4} << 20;

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

}  // namespace tessera
