// Logging: one logger per process, with levels and timestamps, that names on every line the role
// the process plays ("coordinator", "ps 1", "worker 0"). Lines go to stderr and each is flushed as
// it is written, so the log of a process killed with SIGKILL is complete. This is for diagnostics;
// output a command exists to print (a table, a "listening on" line) stays on stdout.
//
// Example:
//   SetLogRole("worker 0");
//   Log().info("joined the coordinator (directory generation {})", generation);
//   // [2026-11-23 12:15:49.123] [worker 0] [info] joined the coordinator (directory generation 3)
//
// Log() is an spdlog logger, so the format strings are fmt's ("{}"); absl::string_view and
// absl::Status format as text. The level is info unless the TESSERA_LOG_LEVEL environment
// variable (read once, at the first Log()) or SetLogLevel says otherwise.
//
// Thread-safety: every function here is safe to call from any thread.
#pragma once

#include <spdlog/logger.h>

#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tessera {

enum class LogLevel { kDebug, kInfo, kWarning, kError, kOff };

// The process's logger. The role starts as "tessera" until SetLogRole names it.
spdlog::logger& Log();

// Names the role this process plays; every later line carries it.
void SetLogRole(absl::string_view role);

// Lines below `level` are dropped.
void SetLogLevel(LogLevel level);

// "debug", "info", "warning" (or "warn"), "error" or "off"; InvalidArgument otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(absl::string_view name);

}  // namespace tessera

template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(absl::string_view text, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(std::string_view(text.data(), text.size()),
                                                    ctx);
  }
};

template <>
struct fmt::formatter<absl::Status> : fmt::formatter<std::string_view> {
  template <class FormatContext>
  auto format(const absl::Status& status, FormatContext& ctx) const {
    return fmt::formatter<std::string_view>::format(status.ToString(), ctx);
  }
};
