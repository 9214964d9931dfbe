// Checkpoint manifests (checkpoint_io.h): the one small sealed message per checkpoint that names
// its variables and their slice files, and whose rename makes the checkpoint visible.
#include <capnp/message.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "schema/base/internal/envelope.h"
#include "schema/base/internal/field_codec.h"
#include "schema/base/internal/file_io.h"
#include "schema/base/internal/message.h"
#include "schema/checkpoint/checkpoint.capnp.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/checkpoint/internal/checkpoint_format.h"
#include "tessera/status.h"
#include "tessera/version.h"

namespace tessera {
namespace {

using schema_internal::CheckFormatVersion;
using schema_internal::DecodeDType;
using schema_internal::DecodeNumberMap;
using schema_internal::DecodeRunId;
using schema_internal::DecodeShape;
using schema_internal::DecodeText;
using schema_internal::DecodeTexts;
using schema_internal::EncodeRunId;
using schema_internal::FileKind;
using schema_internal::kManifestFormatVersion;
using schema_internal::TextOf;

void BuildManifest(const CheckpointManifest& manifest, wire::Manifest::Builder out) {
  out.setFormatVersion(kManifestFormatVersion);
  out.setGlobalStep(manifest.global_step);
  if (!manifest.run_id.empty()) EncodeRunId(manifest.run_id, out.initRunId());
  out.setWriterVersion(TextOf(std::string(Version())));
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
  TESSERA_ASSIGN_OR_RETURN(v.shape, DecodeShape(in.getShape(), what));
  TESSERA_ASSIGN_OR_RETURN(v.dtype, DecodeDType(in.getDtype(), what));
  switch (in.getOptimizer().which()) {
    case wire::Manifest::Variable::Optimizer::NONE:
      break;
    case wire::Manifest::Variable::Optimizer::SPEC: {
      wire::Manifest::OptimizerSpec::Reader spec = in.getOptimizer().getSpec();
      OptimizerSpec optimizer;
      optimizer.name = DecodeText(spec.getName());
      TESSERA_ASSIGN_OR_RETURN(optimizer.params,
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
  TESSERA_RETURN_IF_ERROR(
      CheckFormatVersion(FileKind::kManifest, in.getFormatVersion(), kManifestFormatVersion));
  CheckpointManifest manifest;
  manifest.global_step = in.getGlobalStep();
  manifest.run_id = DecodeRunId(in.hasRunId(), in.getRunId());
  TESSERA_ASSIGN_OR_RETURN(manifest.writer_version,
                           schema_internal::DecodeWriterVersion(in.hasWriterVersion(),
                                                                in.getWriterVersion(), "manifest"));
  for (wire::Manifest::Variable::Reader variable : in.getVariables()) {
    TESSERA_ASSIGN_OR_RETURN(CheckpointVariable v, ParseVariable(variable));
    v.checkpoint = {manifest.run_id, manifest.global_step};
    manifest.variables.push_back(std::move(v));
  }
  TESSERA_RETURN_IF_ERROR(ValidateManifest(manifest));
  return manifest;
}

}  // namespace

absl::StatusOr<std::string> EncodeManifest(const CheckpointManifest& manifest) {
  TESSERA_RETURN_IF_ERROR(ValidateManifest(manifest));
  return schema_internal::BuildSealedMessage(
      FileKind::kManifest, 0, [&manifest](capnp::MessageBuilder& message) {
        BuildManifest(manifest, message.initRoot<wire::Manifest>());
      });
}

absl::StatusOr<CheckpointManifest> DecodeManifest(const std::string& bytes) {
  absl::StatusOr<CheckpointManifest> manifest =
      absl::DataLossError("checkpoint manifest: not decoded");
  TESSERA_RETURN_IF_ERROR(schema_internal::ReadSealedMessage(
      FileKind::kManifest, bytes, [&manifest](capnp::MessageReader& message) {
        manifest = ParseManifest(message.getRoot<wire::Manifest>());
        return manifest.status();
      }));
  return manifest;
}

absl::Status WriteManifest(const std::string& dir, const CheckpointManifest& manifest,
                           Env* env) {
  TESSERA_ASSIGN_OR_RETURN(const std::string bytes, EncodeManifest(manifest));
  // The manifest makes the checkpoint visible: its rename must survive a crash too.
  return WriteFileAtomically(*env, absl::StrCat(dir, "/", kManifestFile), bytes,
                             /*sync_directory=*/true);
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir, Env* env) {
  const std::string path = absl::StrCat(dir, "/", kManifestFile);
  absl::StatusOr<std::string> bytes =
      ReadFileBounded(*env, path, schema_internal::MaxFileBytes(FileKind::kManifest));
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
