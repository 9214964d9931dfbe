#include "schema/checkpoint_io.h"

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "schema/checkpoint.capnp.h"
#include "schema/internal/envelope.h"
#include "schema/internal/field_codec.h"
#include "schema/internal/file_io.h"
#include "schema/internal/message.h"

namespace tessera {
namespace {

using schema_internal::DecodeDType;
using schema_internal::DecodeNumberMap;
using schema_internal::DecodeShape;
using schema_internal::DecodeText;
using schema_internal::DecodeTexts;
using schema_internal::DecodeValues;
using schema_internal::FileKind;
using schema_internal::TextOf;

// The versions this build writes and reads. Bump one when the meaning of its schema changes in a
// way an older reader would misread; readers refuse any other version.
constexpr uint32_t kSliceFormatVersion = 1;
constexpr uint32_t kManifestFormatVersion = 1;

absl::Status CheckFormatVersion(FileKind kind, uint32_t got, uint32_t want) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(schema_internal::FileKindName(kind),
                                                 " has format version ", got,
                                                 "; this build reads format version ", want));
}

void BuildSlice(const TensorSlice& slice, wire::TensorSlice::Builder out) {
  out.setFormatVersion(kSliceFormatVersion);
  out.setVariable(TextOf(slice.variable));
  out.setFullShape(schema_internal::DimsOf(slice.full_shape.dims()));
  out.setDtype(schema_internal::EncodeDType(slice.dtype));
  out.setRowOffset(slice.row_offset);
  schema_internal::EncodeTensor(slice.value, out.initValue());
  auto slots = out.initSlots(slice.slots.size());
  for (size_t i = 0; i < slice.slots.size(); ++i) {
    slots[i].setName(TextOf(slice.slot_names[i]));
    const Tensor& slot = slice.slots[i];
    schema_internal::FillChunks(slot.values(),
                                slots[i].initChunks(schema_internal::NumChunks(slot.size())));
  }
  out.setStep(slice.step);
}

absl::StatusOr<TensorSlice> ParseSlice(wire::TensorSlice::Reader in) {
  RETURN_IF_ERROR(CheckFormatVersion(FileKind::kSlice, in.getFormatVersion(), kSliceFormatVersion));
  TensorSlice slice;
  slice.variable = DecodeText(in.getVariable());
  const std::string what = absl::StrCat("slice of ", slice.variable);
  ASSIGN_OR_RETURN(slice.full_shape, DecodeShape(in.getFullShape(), what));
  ASSIGN_OR_RETURN(slice.dtype, DecodeDType(in.getDtype(), what));
  slice.row_offset = in.getRowOffset();
  ASSIGN_OR_RETURN(slice.value, schema_internal::DecodeTensor(in.getValue(), what));
  for (wire::TensorSlice::Slot::Reader slot : in.getSlots()) {
    slice.slot_names.push_back(DecodeText(slot.getName()));
    const std::string slot_what = absl::StrCat(what, " slot ", slice.slot_names.back());
    ASSIGN_OR_RETURN(std::vector<float> values,
                     DecodeValues(slot.getChunks(), slice.value.size(), slot_what));
    ASSIGN_OR_RETURN(Tensor tensor, Tensor::FromVector(slice.value.shape(), std::move(values)));
    slice.slots.push_back(std::move(tensor));
  }
  slice.step = in.getStep();
  RETURN_IF_ERROR(ValidateTensorSlice(slice));
  return slice;
}

void BuildManifest(const CheckpointManifest& manifest, wire::Manifest::Builder out) {
  out.setFormatVersion(kManifestFormatVersion);
  out.setGlobalStep(manifest.global_step);
  auto variables = out.initVariables(manifest.variables.size());
  for (size_t i = 0; i < manifest.variables.size(); ++i) {
    const CheckpointVariable& v = manifest.variables[i];
    wire::Manifest::Variable::Builder b = variables[i];
    b.setName(TextOf(v.name));
    b.setShape(schema_internal::DimsOf(v.shape.dims()));
    b.setDtype(schema_internal::EncodeDType(v.dtype));
    if (v.optimizer.has_value()) {
      wire::Manifest::OptimizerSpec::Builder spec = b.getOptimizer().initSpec();
      spec.setName(TextOf(v.optimizer->name));
      schema_internal::EncodeNumberMap(v.optimizer->params,
                                       spec.initParams(v.optimizer->params.size()));
    } else {
      b.getOptimizer().setNone();
    }
    schema_internal::EncodeTexts(v.slot_names, b.initSlotNames(v.slot_names.size()));
    b.setStep(v.step);
    auto slices = b.initSlices(v.slices.size());
    for (size_t k = 0; k < v.slices.size(); ++k) {
      slices[k].setFile(TextOf(v.slices[k].file));
      slices[k].setRowOffset(v.slices[k].row_offset);
      slices[k].setRows(v.slices[k].rows);
    }
  }
}

absl::StatusOr<CheckpointVariable> ParseVariable(wire::Manifest::Variable::Reader in) {
  CheckpointVariable v;
  v.name = DecodeText(in.getName());
  const std::string what = absl::StrCat("checkpoint variable ", v.name);
  ASSIGN_OR_RETURN(v.shape, DecodeShape(in.getShape(), what));
  ASSIGN_OR_RETURN(v.dtype, DecodeDType(in.getDtype(), what));
  switch (in.getOptimizer().which()) {
    case wire::Manifest::Variable::Optimizer::NONE:
      break;
    case wire::Manifest::Variable::Optimizer::SPEC: {
      wire::Manifest::OptimizerSpec::Reader spec = in.getOptimizer().getSpec();
      OptimizerSpec optimizer;
      optimizer.name = DecodeText(spec.getName());
      ASSIGN_OR_RETURN(optimizer.params,
                       DecodeNumberMap(spec.getParams(), absl::StrCat(what, " optimizer")));
      v.optimizer = std::move(optimizer);
      break;
    }
    default:
      return absl::DataLossError(absl::StrCat(what, ": unknown optimizer variant"));
  }
  v.slot_names = DecodeTexts(in.getSlotNames());
  v.step = in.getStep();
  for (wire::Manifest::SliceRef::Reader ref : in.getSlices()) {
    v.slices.push_back({DecodeText(ref.getFile()), ref.getRowOffset(), ref.getRows()});
  }
  return v;
}

absl::StatusOr<CheckpointManifest> ParseManifest(wire::Manifest::Reader in) {
  RETURN_IF_ERROR(
      CheckFormatVersion(FileKind::kManifest, in.getFormatVersion(), kManifestFormatVersion));
  CheckpointManifest manifest;
  manifest.global_step = in.getGlobalStep();
  for (wire::Manifest::Variable::Reader variable : in.getVariables()) {
    ASSIGN_OR_RETURN(CheckpointVariable v, ParseVariable(variable));
    manifest.variables.push_back(std::move(v));
  }
  RETURN_IF_ERROR(ValidateManifest(manifest));
  return manifest;
}

}  // namespace

absl::StatusOr<std::string> EncodeSlice(const TensorSlice& slice) {
  RETURN_IF_ERROR(ValidateTensorSlice(slice));
  const size_t data_bytes = (1 + slice.slots.size()) * slice.value.size() * sizeof(float);
  return schema_internal::BuildSealedMessage(
      FileKind::kSlice, data_bytes, [&slice](capnp::MessageBuilder& message) {
        BuildSlice(slice, message.initRoot<wire::TensorSlice>());
      });
}

absl::StatusOr<TensorSlice> DecodeSlice(const std::string& bytes) {
  absl::StatusOr<TensorSlice> slice = absl::DataLossError("slice file: not decoded");
  RETURN_IF_ERROR(schema_internal::ReadSealedMessage(
      FileKind::kSlice, bytes, [&slice](capnp::MessageReader& message) {
        slice = ParseSlice(message.getRoot<wire::TensorSlice>());
        return slice.status();
      }));
  return slice;
}

absl::StatusOr<std::string> EncodeManifest(const CheckpointManifest& manifest) {
  RETURN_IF_ERROR(ValidateManifest(manifest));
  return schema_internal::BuildSealedMessage(
      FileKind::kManifest, 0, [&manifest](capnp::MessageBuilder& message) {
        BuildManifest(manifest, message.initRoot<wire::Manifest>());
      });
}

absl::StatusOr<CheckpointManifest> DecodeManifest(const std::string& bytes) {
  absl::StatusOr<CheckpointManifest> manifest =
      absl::DataLossError("checkpoint manifest: not decoded");
  RETURN_IF_ERROR(schema_internal::ReadSealedMessage(
      FileKind::kManifest, bytes, [&manifest](capnp::MessageReader& message) {
        manifest = ParseManifest(message.getRoot<wire::Manifest>());
        return manifest.status();
      }));
  return manifest;
}

absl::Status WriteSliceFile(const std::string& path, const TensorSlice& slice) {
  ASSIGN_OR_RETURN(const std::string bytes, EncodeSlice(slice));
  return schema_internal::WriteFileAtomically(path, bytes, /*sync_directory=*/false);
}

absl::StatusOr<TensorSlice> ReadSliceFile(const std::string& path) {
  ASSIGN_OR_RETURN(
      const std::string bytes,
      schema_internal::ReadFileBounded(path, schema_internal::MaxFileBytes(FileKind::kSlice)));
  absl::StatusOr<TensorSlice> slice = DecodeSlice(bytes);
  if (!slice.ok()) return Annotate(slice.status(), path);
  return slice;
}

absl::Status WriteManifest(const std::string& dir, const CheckpointManifest& manifest) {
  ASSIGN_OR_RETURN(const std::string bytes, EncodeManifest(manifest));
  // The manifest makes the checkpoint visible: its rename must survive a crash too.
  return schema_internal::WriteFileAtomically(absl::StrCat(dir, "/", kManifestFile), bytes,
                                              /*sync_directory=*/true);
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kManifestFile);
  absl::StatusOr<std::string> bytes =
      schema_internal::ReadFileBounded(path, schema_internal::MaxFileBytes(FileKind::kManifest));
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint in ", dir, " (", path, " does not exist)"));
  }
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<CheckpointManifest> manifest = DecodeManifest(*bytes);
  if (!manifest.ok()) return Annotate(manifest.status(), path);
  return manifest;
}

}  // namespace tessera
