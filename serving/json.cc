#include "serving/json.h"

#include "absl/strings/str_cat.h"

namespace tessera::serving {

absl::StatusOr<Json> ParseJson(absl::string_view text) {
  // nlohmann reports bad text only by throwing (parse_error, or out_of_range for a number too
  // large for a float); this is the one place that catches it.
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return MalformedJsonError(e);
  }
}

absl::Status MalformedJsonError(const std::exception& error) {
  // what() is "[json.exception.parse_error.101] parse error at line 1, column 2: ...".
  absl::string_view what = error.what();
  const size_t close = what.find("] ");
  if (close != absl::string_view::npos) what.remove_prefix(close + 2);
  return absl::InvalidArgumentError(absl::StrCat("malformed JSON: ", what));
}

std::string DumpJson(const Json& value) {
  return value.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string JsonTypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "an integer";
    case Json::value_t::number_float:
      return "a number";
    default:
      return "an unsupported value";
  }
}

}  // namespace tessera::serving
