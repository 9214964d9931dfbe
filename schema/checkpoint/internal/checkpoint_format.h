// What the two checkpoint files of schema/checkpoint/checkpoint.capnp share: their format
// versions, the run id they both carry, and the check of a file's version. slice_file.cc reads
// and writes slice files, manifest_file.cc manifests.
//
// Thread-safety: constants and pure functions.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "core/checkpoint/checkpoint.h"
#include "schema/base/internal/envelope.h"
#include "schema/checkpoint/checkpoint.capnp.h"

namespace tessera {
namespace schema_internal {

// The versions this build writes and reads. Bump one when the meaning of its schema changes in a
// way an older reader would misread; readers refuse any other version. A field an older reader
// may ignore is added without a bump, and reads as absent in an older file: the run id and
// checkpoint step (Note [Checkpoint identity], core/checkpoint/checkpoint.h) came that way, so
// files written before them still read (as files of no run), and older builds still read newer
// files.
inline constexpr uint32_t kSliceFormatVersion = 2;
inline constexpr uint32_t kManifestFormatVersion = 1;

// A run id is written only when there is one, so a file of no run reads exactly as one written
// before run ids.
void EncodeRunId(const RunId& id, wire::RunId::Builder out);
RunId DecodeRunId(bool present, wire::RunId::Reader in);

// InvalidArgument, naming the kind of file and both versions, unless `got` is `want`.
absl::Status CheckFormatVersion(FileKind kind, uint32_t got, uint32_t want);

}  // namespace schema_internal
}  // namespace tessera
