// absl::Status <-> caf::error, in one place.
//
// Core code reports errors as absl::Status; actors reply with caf::error. A Tessera error travels
// as a caf::error of category "tessera" whose code is the absl canonical code and whose context
// is the status message, so an InvalidArgument raised in a shard arrives at the caller as an
// InvalidArgument absl::Status with the same message, in process or over the network.
// CAF's own errors (a dead receiver, a timeout, a malformed message) map to the nearest canonical
// code (see ErrorToStatus).
//
// Thread-safety: pure functions.
#pragma once

#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/message.hpp>
#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace tessera {

// The error category of Tessera errors (registered by RegisterTesseraTypes,
// actors/base/messages.h).
constexpr caf::atom_value kErrorCategory = caf::atom("tessera");

// Mirrors absl::StatusCode (same numbers). The numbers are part of the wire format.
enum class ErrorCode : uint8_t {
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// CAF's hook: lets `caf::error e = ErrorCode::kInternal;` and `caf::result<T>` take an ErrorCode.
caf::error make_error(ErrorCode code);
// A Tessera error carrying `message`.
caf::error make_error(ErrorCode code, std::string message);

// The caf::error for a non-OK status; an OK status gives the empty caf::error (no error).
caf::error StatusToError(const absl::Status& status);

// The status for a caf::error; the empty error gives OK.
// - category "tessera": the same code and message (an unknown code becomes Unknown).
// - CAF "system" errors: request_receiver_down -> Unavailable, request_timeout ->
//   DeadlineExceeded, unexpected_message / unexpected_response -> Unimplemented,
//   end_of_stream / malformed_basp_message -> DataLoss, anything else -> Unknown.
// - CAF "exit" reasons (an actor died): Unavailable.
// - any other category: Unknown.
// The message of a CAF error is its rendering, e.g. "error(system, request_receiver_down)".
absl::Status ErrorToStatus(const caf::error& error);

// Whether an actor's exit `reason` (a down message's) is an orderly stop — normal or
// user_shutdown, as a node that shuts down stops its actors — rather than a death: killed, or
// its node unreachable.
bool OrderlyExit(const caf::error& reason);

// Renders a Tessera error for CAF's logs ("tessera: INVALID_ARGUMENT: <message>"); the renderer
// registered for the category.
std::string RenderError(uint8_t code, caf::atom_value category, const caf::message& context);

}  // namespace tessera
