#include "core/base/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace tessera {
namespace {

spdlog::level::level_enum ToSpdlog(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return spdlog::level::debug;
    case LogLevel::kInfo: return spdlog::level::info;
    case LogLevel::kWarning: return spdlog::level::warn;
    case LogLevel::kError: return spdlog::level::err;
    case LogLevel::kOff: return spdlog::level::off;
  }
  return spdlog::level::info;
}

// The role is part of the pattern rather than the logger's name: spdlog names are fixed at
// construction, and replacing the logger would leave callers holding a dangling reference.
std::string PatternFor(absl::string_view role) {
  return absl::StrCat("[%Y-%m-%d %H:%M:%S.%e] [", absl::StrReplaceAll(role, {{"%", "%%"}}),
                      "] [%l] %v");
}

}  // namespace

spdlog::logger& Log() {
  // Never destroyed: actor threads may still log while static destructors run at exit.
  static spdlog::logger* const logger = [] {
    auto* created =
        new spdlog::logger("tessera", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    created->set_pattern(PatternFor("tessera"));
    created->flush_on(spdlog::level::trace);  // every line
    LogLevel level = LogLevel::kInfo;
    if (const char* env = std::getenv("TESSERA_LOG_LEVEL"); env != nullptr && *env != '\0') {
      if (absl::StatusOr<LogLevel> parsed = ParseLogLevel(env); parsed.ok()) level = *parsed;
    }
    created->set_level(ToSpdlog(level));
    return created;
  }();
  return *logger;
}

void SetLogRole(absl::string_view role) { Log().set_pattern(PatternFor(role)); }

void SetLogLevel(LogLevel level) { Log().set_level(ToSpdlog(level)); }

absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name) {
  const std::string lower = absl::AsciiStrToLower(name);
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warning" || lower == "warn") return LogLevel::kWarning;
  if (lower == "error") return LogLevel::kError;
  if (lower == "off") return LogLevel::kOff;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown log level '", name, "' (expected debug, info, warning, error or off)"));
}

}  // namespace tessera
