// CapturedLog: what Log() (core/base/logging.h) writes while one lives, for tests that check a
// warning or an info line; on destruction the process's logger is put back (its sinks, the role
// "tessera" and level info).
//
// Example:
//   testing::CapturedLog log;
//   ... code that warns ...
//   CHECK(log.text().find("refused") != std::string::npos);
//
// Thread-safety: the sink is thread-safe; create and destroy one from the test's thread.
#pragma once

#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

#include "core/base/logging.h"

namespace tessera::testing {

class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    Log().sinks().push_back(sink_);
  }
  ~CapturedLog() {
    auto& sinks = Log().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
    SetLogRole("tessera");
    SetLogLevel(LogLevel::kInfo);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

}  // namespace tessera::testing
