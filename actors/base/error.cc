#include "actors/base/error.h"

#include <caf/exit_reason.hpp>
#include <caf/make_message.hpp>
#include <caf/sec.hpp>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

constexpr uint8_t kLastCode = static_cast<uint8_t>(ErrorCode::kUnauthenticated);

std::string ContextMessage(const caf::message& context) {
  if (context.size() == 1 && context.match_element<std::string>(0)) {
    return context.get_as<std::string>(0);
  }
  return caf::to_string(context);
}

absl::StatusCode SystemCode(caf::sec code) {
  switch (code) {
    case caf::sec::request_receiver_down:
      return absl::StatusCode::kUnavailable;
    case caf::sec::request_timeout:
      return absl::StatusCode::kDeadlineExceeded;
    case caf::sec::unexpected_message:
    case caf::sec::unexpected_response:
      return absl::StatusCode::kUnimplemented;
    case caf::sec::end_of_stream:
    case caf::sec::malformed_basp_message:
      return absl::StatusCode::kDataLoss;
    default:
      return absl::StatusCode::kUnknown;
  }
}

}  // namespace

caf::error make_error(ErrorCode code) { return make_error(code, std::string()); }

caf::error make_error(ErrorCode code, std::string message) {
  return caf::error(static_cast<uint8_t>(code), kErrorCategory,
                    caf::make_message(std::move(message)));
}

caf::error StatusToError(const absl::Status& status) {
  if (status.ok()) return caf::error();
  const int raw = static_cast<int>(status.code());
  const ErrorCode code =
      raw >= 1 && raw <= kLastCode ? static_cast<ErrorCode>(raw) : ErrorCode::kUnknown;
  return make_error(code, std::string(status.message()));
}

absl::Status ErrorToStatus(const caf::error& error) {
  if (!error) return absl::OkStatus();
  if (error.category() == kErrorCategory) {
    const uint8_t code = error.code();
    const std::string message = ContextMessage(error.context());
    if (code >= 1 && code <= kLastCode) {
      return absl::Status(static_cast<absl::StatusCode>(code), message);
    }
    return absl::UnknownError(
        absl::StrCat("tessera error with unknown code ", code, ": ", message));
  }
  const std::string rendered = caf::to_string(error);
  if (error.category() == caf::atom("system")) {
    return absl::Status(SystemCode(static_cast<caf::sec>(error.code())), rendered);
  }
  if (error.category() == caf::atom("exit")) {
    return absl::UnavailableError(rendered);
  }
  return absl::UnknownError(rendered);
}

std::string RenderError(uint8_t code, caf::atom_value category, const caf::message& context) {
  const absl::Status status = ErrorToStatus(caf::error(code, category, context));
  return absl::StrCat(caf::to_string(category), ": ", status.ToString());
}

bool OrderlyExit(const caf::error& reason) {
  return !reason || reason == caf::exit_reason::normal || reason == caf::exit_reason::user_shutdown;
}

}  // namespace tessera
