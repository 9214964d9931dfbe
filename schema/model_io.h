// Reading and writing exported models (core/exported_model.h) as Cap'n Proto files
// (schema/model.capnp): the model graph, its signatures and its unsharded variables. The only code
// that touches the model schema's Readers and Builders. Same guarantees as checkpoint_io.h:
// versioned, checksummed chunks, limits, and errors as values for any bad bytes.
//
// Files go through an Env (core/env.h): the real filesystem unless the caller passes another.
//
// Thread-safety: pure functions over files.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/env.h"
#include "core/exported_model.h"

namespace tessera {

// The model's file name inside an export directory.
inline constexpr char kModelFile[] = "model.tsr";

// Writes dir/model.tsr atomically (validated first: InvalidArgument) through `env`.
absl::Status WriteExportedModel(const std::string& dir, const ExportedModel& model,
                                Env* env = Env::Default());
// NotFound without dir/model.tsr; DataLoss / InvalidArgument for bad content.
absl::StatusOr<ExportedModel> ReadExportedModel(const std::string& dir,
                                                Env* env = Env::Default());

absl::StatusOr<std::string> EncodeExportedModel(const ExportedModel& model);
absl::StatusOr<ExportedModel> DecodeExportedModel(const std::string& bytes);

}  // namespace tessera
