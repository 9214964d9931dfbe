#include "actors/base/error.h"

#include <doctest/doctest.h>

#include <caf/exit_reason.hpp>
#include <caf/sec.hpp>

namespace tessera {
namespace {

TEST_CASE("every canonical status code round-trips through caf::error with its message") {
  const absl::StatusCode codes[] = {
      absl::StatusCode::kCancelled,          absl::StatusCode::kUnknown,
      absl::StatusCode::kInvalidArgument,    absl::StatusCode::kDeadlineExceeded,
      absl::StatusCode::kNotFound,           absl::StatusCode::kAlreadyExists,
      absl::StatusCode::kPermissionDenied,   absl::StatusCode::kResourceExhausted,
      absl::StatusCode::kFailedPrecondition, absl::StatusCode::kAborted,
      absl::StatusCode::kOutOfRange,         absl::StatusCode::kUnimplemented,
      absl::StatusCode::kInternal,           absl::StatusCode::kUnavailable,
      absl::StatusCode::kDataLoss,           absl::StatusCode::kUnauthenticated,
  };
  for (absl::StatusCode code : codes) {
    CAPTURE(absl::StatusCodeToString(code));
    const absl::Status status(code, "emb/part_1: scatter_add: id 9 is out of range");
    const caf::error err = StatusToError(status);
    CHECK(err.category() == kErrorCategory);
    CHECK(err.code() == static_cast<uint8_t>(code));
    CHECK(ErrorToStatus(err) == status);
  }
}

TEST_CASE("OK and the empty caf::error map to each other") {
  CHECK(!StatusToError(absl::OkStatus()));
  CHECK(ErrorToStatus(caf::error()).ok());
}

TEST_CASE("CAF's own errors map to the nearest canonical code") {
  struct Case {
    caf::error error;
    absl::StatusCode code;
  };
  const Case cases[] = {
      {caf::make_error(caf::sec::request_receiver_down), absl::StatusCode::kUnavailable},
      {caf::make_error(caf::sec::request_timeout), absl::StatusCode::kDeadlineExceeded},
      {caf::make_error(caf::sec::unexpected_message), absl::StatusCode::kUnimplemented},
      {caf::make_error(caf::sec::end_of_stream), absl::StatusCode::kDataLoss},
      {caf::make_error(caf::sec::runtime_error), absl::StatusCode::kUnknown},
      {caf::make_error(caf::exit_reason::kill), absl::StatusCode::kUnavailable},
      {caf::error(3, caf::atom("elsewhere")), absl::StatusCode::kUnknown},
      {caf::error(99, kErrorCategory), absl::StatusCode::kUnknown},
  };
  for (const Case& c : cases) {
    CAPTURE(caf::to_string(c.error));
    const absl::Status status = ErrorToStatus(c.error);
    CHECK(status.code() == c.code);
    CHECK_FALSE(status.message().empty());
  }
}

TEST_CASE("an ErrorCode converts to a caf::error implicitly, as CAF expects") {
  const caf::error err = ErrorCode::kNotFound;
  CHECK(ErrorToStatus(err).code() == absl::StatusCode::kNotFound);
  CHECK(ErrorToStatus(make_error(ErrorCode::kAborted, "stop")) == absl::AbortedError("stop"));
}

TEST_CASE("the registered renderer shows the code and the message") {
  const caf::error err = StatusToError(absl::InvalidArgumentError("bad width"));
  CHECK(RenderError(err.code(), err.category(), err.context()) ==
        "tessera: INVALID_ARGUMENT: bad width");
}

}  // namespace
}  // namespace tessera
