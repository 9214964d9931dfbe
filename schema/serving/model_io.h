// Reading and writing exported models (core/serving/exported_model.h) as Cap'n Proto files
// (schema/serving/model.capnp): the model graph, its signatures and its unsharded variables. The
// only code that touches the model schema's Readers and Builders. Same guarantees as
// checkpoint_io.h: versioned, checksums over every byte, limits, and errors as values for any bad
// bytes.
//
// Files are written in format 2 (Note [Model file layout] in internal/model_format.h): a small
// message, then the variables' raw values, checksummed in 64 KiB pieces. A writer streams the
// values from a VariableRowSource with a few MiB of buffers; OpenExportedModel maps the file and
// serves the values in place, verifying each piece the first time a prediction reads from it.
// Format 1 files (values inside the message) are still read, into memory. model_writer.cc
// writes, model_reader.cc reads.
//
// Files go through an Env (tessera/env.h): the real filesystem unless the caller passes another.
//
// Thread-safety: pure functions over files.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/serving/exported_model.h"
#include "tessera/env.h"

namespace tessera {

// The model's file name inside an export directory.
inline constexpr char kModelFile[] = "model.tsr";

// Writes dir/model.tsr atomically (temporary file, fsync, rename) through `env`, in one
// sequential pass: `model`'s variables are its spec's parameters, their rows read from `rows` in
// name order, a few MiB at a time. InvalidArgument (and no file) for an invalid description, rows
// of the wrong shape, or a NaN or infinite value (naming the variable and its row); `rows`' own
// errors pass through.
absl::Status WriteExportedModel(const std::string& dir, const ModelDescription& model,
                                VariableRowSource& rows, Env* env = Env::Default());
// The same from an in-memory model (validated first: InvalidArgument).
absl::Status WriteExportedModel(const std::string& dir, const ExportedModel& model,
                                Env* env = Env::Default());

// Every value of dir/model.tsr in memory (either format), each checksum verified. NotFound
// without dir/model.tsr; DataLoss / InvalidArgument for bad content, naming the file.
absl::StatusOr<ExportedModel> ReadExportedModel(const std::string& dir,
                                                Env* env = Env::Default());

// An exported model ready to serve: its description, and its values as a Predictor reads them.
struct OpenedModel {
  ModelDescription description;
  int format_version = 0;
  // Format 2: the file mapped (Env::NewReadOnlyMemoryRegion), pieces verified on first use.
  // Format 1: the values decoded into memory.
  std::shared_ptr<const ServedVariables> variables;
};

// Opens dir/model.tsr: maps it and checks its header, message, layout (every variable inside the
// file, none overlapping) and checksum table — not its values, which the returned variables
// verify as they are read. The file must not be rewritten in place while open (exports replace
// it by rename). Errors as ReadExportedModel; a directory or a FIFO named model.tsr is DataLoss
// (never waited on).
absl::StatusOr<OpenedModel> OpenExportedModel(const std::string& dir, Env* env = Env::Default());

absl::StatusOr<std::string> EncodeExportedModel(const ExportedModel& model);
absl::StatusOr<ExportedModel> DecodeExportedModel(const std::string& bytes);

}  // namespace tessera
