// core/base/logging.h: what a log line carries (role, level, message), levels, and level names.
#include "core/base/logging.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "tests/captured_log.h"

namespace tessera {
namespace {

using testing::CapturedLog;

TEST_CASE("every log line names the process's role, its level and the message") {
  CapturedLog log;
  SetLogRole("worker 3");  // after the sink is added: the role's pattern reaches every sink
  Log().warn("lost the coordinator ({}); waiting", absl::string_view("disconnected"));
  const std::string line = log.text();
  CHECK_MESSAGE(absl::StrContains(line, "] [worker 3] [warning] lost the coordinator "
                                        "(disconnected); waiting\n"),
                line);
  CHECK_MESSAGE(line.front() == '[', line);  // the timestamp comes first
}

TEST_CASE("a status formats as its text in a log line") {
  CapturedLog log;
  SetLogRole("coordinator");
  Log().error("cannot restore ps {}: {}", 1, absl::NotFoundError("no checkpoint"));
  CHECK_MESSAGE(absl::StrContains(log.text(), "cannot restore ps 1: NOT_FOUND: no checkpoint"),
                log.text());
}

TEST_CASE("lines below the log level are dropped") {
  CapturedLog log;
  SetLogRole("ps 0");
  SetLogLevel(LogLevel::kWarning);
  Log().info("hidden");
  Log().warn("shown");
  CHECK_FALSE(absl::StrContains(log.text(), "hidden"));
  CHECK(absl::StrContains(log.text(), "shown"));
}

TEST_CASE("log levels parse by name, and an unknown name is InvalidArgument") {
  CHECK(*ParseLogLevel("debug") == LogLevel::kDebug);
  CHECK(*ParseLogLevel("INFO") == LogLevel::kInfo);
  CHECK(*ParseLogLevel("warn") == LogLevel::kWarning);
  CHECK(*ParseLogLevel("warning") == LogLevel::kWarning);
  CHECK(*ParseLogLevel("error") == LogLevel::kError);
  CHECK(*ParseLogLevel("off") == LogLevel::kOff);
  CHECK(absl::IsInvalidArgument(ParseLogLevel("loud").status()));
}

}  // namespace
}  // namespace tessera
