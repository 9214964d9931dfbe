// Json: the JSON value type of the `tessera` CLI's predict and serve (nlohmann::json with float
// numbers), and the two boundary helpers every JSON reader and writer here uses.
//
// Numbers are float rather than nlohmann's default double because tensor values are float32:
// a float prints in its shortest round-trip form ("0.1", not "0.10000000149011612"). Integers keep
// their own int64 / uint64 types, so ids never pass through a float.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <exception>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera::serving {

using Json = nlohmann::basic_json<std::map, std::vector, std::string, bool, std::int64_t,
                                  std::uint64_t, float>;

// Parses one JSON text. InvalidArgument "malformed JSON: ..." with nlohmann's line and column
// when it is not JSON; never throws.
absl::StatusOr<Json> ParseJson(absl::string_view text);

// InvalidArgument "malformed JSON: ..." for one of nlohmann's exceptions, without its bracketed id
// ("[json.exception.parse_error.101]", which means nothing to a user).
absl::Status MalformedJsonError(const std::exception& error);

// Compact JSON; invalid UTF-8 in strings is replaced rather than thrown on.
std::string DumpJson(const Json& value);

// "a string", "an array", ... for error messages about a value's type.
std::string JsonTypeName(const Json& value);

}  // namespace tessera::serving
