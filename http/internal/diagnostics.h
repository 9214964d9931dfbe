// The server's diagnostics: warnings and debug lines through core/'s logger that never throw, so
// that they may be written while memory is short (Note [Out of memory] in server_loop.h).
//
// Thread-safety: as the logger; called from the loop and the handler threads alike.
#pragma once

#include <utility>

#include "core/base/logging.h"

namespace tessera {
namespace http_internal {

// A diagnostic that never throws: it may be written while memory is short.
template <typename... Args>
void Warn(spdlog::format_string_t<Args...> format, Args&&... args) noexcept {
  try {
    Log().warn(format, std::forward<Args>(args)...);
  } catch (...) {
  }
}
template <typename... Args>
void Debug(spdlog::format_string_t<Args...> format, Args&&... args) noexcept {
  try {
    Log().debug(format, std::forward<Args>(args)...);
  } catch (...) {
  }
}

}  // namespace http_internal
}  // namespace tessera
