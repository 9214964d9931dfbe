// Whole-file reads and atomic writes for schema/'s files, over POSIX.
//
// Thread-safety: pure functions over files; concurrent calls on different paths are safe.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {
namespace schema_internal {

// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one, never
// a part: writes a temporary file in the same directory, fsyncs it, renames it over `path`, and
// with `sync_directory` also fsyncs the directory so the rename itself is durable. On failure the
// temporary file is removed and the error (from errno: e.g. NotFound for a missing directory) is
// returned naming the path.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes,
                                 bool sync_directory);

// The whole content of `path`. NotFound when it does not exist; DataLoss when it is larger than
// `max_bytes` (checked before reading) or not a regular file; other errors from errno.
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, int64_t max_bytes);

}  // namespace schema_internal
}  // namespace tessera
