// One Cap'n Proto message in a sealed file (envelope.h): building it into bytes, and reading it
// back under limits with every Cap'n Proto exception turned into a Status.
//
// Cap'n Proto readers check bounds lazily and throw kj::Exception from any accessor, so the whole
// decode of a root, not just the parse, runs inside ReadSealedMessage's callback.
//
// Thread-safety: pure functions.
#pragma once

#include <capnp/message.h>

#include <cstddef>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "schema/base/internal/envelope.h"

namespace tessera {
namespace schema_internal {

// Builds a message with `build` (its first segment sized for about `estimated_bytes`, so large
// tensors land in one segment) and returns it sealed as a `kind` file. InvalidArgument when Cap'n
// Proto refuses a value (e.g. a text longer than its 512 MiB limit).
absl::StatusOr<std::string> BuildSealedMessage(
    FileKind kind, size_t estimated_bytes, absl::FunctionRef<void(capnp::MessageBuilder&)> build);

// Opens the envelope of `bytes`, parses its message with a traversal limit sized from the input
// and a nesting limit of 64, rejects trailing bytes, and runs `read` on it. Returns read's status,
// or DataLoss for a bad envelope, a malformed message, or any exception `read` raises while
// walking it.
// Files whose kind has a tail (slice files) are read with ReadMessage instead.
absl::Status ReadSealedMessage(FileKind kind, absl::string_view bytes,
                               absl::FunctionRef<absl::Status(capnp::MessageReader&)> read);

// The same for a message already out of its envelope (its checksum checked): parses `message`
// (copied when it is not word-aligned) and runs `read` on it.
absl::Status ReadMessage(FileKind kind, absl::string_view message,
                         absl::FunctionRef<absl::Status(capnp::MessageReader&)> read);

// The message `message` holds, serialized after kEnvelopeHeaderBytes of space for the header.
// InvalidArgument when Cap'n Proto refuses it.
absl::StatusOr<std::string> SerializeAfterHeaderSpace(FileKind kind,
                                                      capnp::MessageBuilder& message);

}  // namespace schema_internal
}  // namespace tessera
