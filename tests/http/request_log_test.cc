#include "http/request_log.h"

#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "http/http_server.h"
#include "tests/raw_http.h"
#include "tests/temp_dir.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;
using testing::HttpPost;
using testing::RawConnection;
using testing::ReadFile;
using testing::TempDir;

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines = absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty());
  return lines;
}

// The fields of a line: time, method, target, status, request bytes, response bytes, latency.
std::vector<std::string> Fields(const std::string& line) {
  std::vector<std::string> fields = absl::StrSplit(line, ' ');
  REQUIRE_MESSAGE(fields.size() == 7, line);
  return fields;
}

TEST_CASE("a line per request: time, method, target, status, bytes and latency") {
  TempDir dir;
  const std::string path = dir.Sub("requests.log");
  {
    auto log = RequestLog::Open(path);
    REQUIRE(log.ok());
    (*log)->Record("POST", "/v1/models/m:predict", 200, 41, 58, std::chrono::microseconds(1234));
    (*log)->Record("GET", "/a b\\c\n\x01\xff", 404, 0, 12, std::chrono::nanoseconds(0));
    (*log)->Record("", "", 503, 0, 7, std::chrono::milliseconds(2));
  }  // written by the time the log is gone
  const std::vector<std::string> lines = Lines(path);
  REQUIRE(lines.size() == 3);
  const std::vector<std::string> first = Fields(lines[0]);
  CHECK(first[0].size() == std::string("2026-01-02T03:04:05.678Z").size());
  CHECK(first[0][10] == 'T');
  CHECK(first[0].back() == 'Z');
  CHECK(std::vector<std::string>(first.begin() + 1, first.end()) ==
        std::vector<std::string>{"POST", "/v1/models/m:predict", "200", "41", "58", "1.234"});
  // A target never breaks the line: spaces, backslashes and control bytes are escaped.
  CHECK(Fields(lines[1])[2] == "/a\\x20b\\x5Cc\\x0A\\x01\\xFF");
  CHECK(Fields(lines[2])[1] == "-");
  CHECK(Fields(lines[2])[2] == "-");

  // Appended, not truncated.
  {
    auto log = RequestLog::Open(path);
    REQUIRE(log.ok());
    (*log)->Record("GET", "/x", 200, 0, 1, std::chrono::nanoseconds(0));
  }
  CHECK(Lines(path).size() == 4);
  CHECK(RequestLog::Open(dir.Sub("no/such/dir/log")).status().code() ==
        absl::StatusCode::kUnavailable);
}

TEST_CASE("the server logs every answer it makes, its own errors too") {
  TempDir dir;
  const std::string path = dir.Sub("requests.log");
  auto log = RequestLog::Open(path);
  REQUIRE(log.ok());
  HttpServerOptions options;
  options.threads = 2;
  options.max_body_bytes = 100;
  options.request_log = log->get();
  HttpServer server(
      [](const HttpRequest& request) {
        HttpResponse response;
        response.status = request.path == "/missing" ? 404 : 200;
        response.body = std::string(request.body.size() + 1, 'x');
        return response;
      },
      [](int, absl::string_view message) { return absl::StrCat("{\"error\": \"", message, "\"}"); },
      options);
  auto port = server.Bind("127.0.0.1", 0);
  REQUIRE(port.ok());
  std::thread thread([&] { CHECK(server.Run().ok()); });
  {
    RawConnection c(*port);
    REQUIRE(c.Send(HttpPost("/ok?q=1", "12345") + HttpPost("/missing", "")));
    REQUIRE(c.Read(milliseconds(5000)));
    REQUIRE(c.Read(milliseconds(5000)));
    RawConnection big(*port);
    REQUIRE(big.Send(HttpPost("/big", std::string(101, 'b'))));
    auto refused = big.Read(milliseconds(5000));
    REQUIRE(refused);
    CHECK(refused->status == 413);
    RawConnection garbage(*port);
    REQUIRE(garbage.Send("NOT HTTP\r\n\r\n"));
    REQUIRE(garbage.Read(milliseconds(5000)));
  }
  // Each answer's line is written within the loop's turn that sent it: all of them once Run
  // has returned.
  server.Stop();
  thread.join();
  const std::vector<std::string> lines = Lines(path);
  REQUIRE(lines.size() == 4);
  const auto tail = [&](size_t i) {
    const std::vector<std::string> f = Fields(lines[i]);
    return std::vector<std::string>(f.begin() + 1, f.end() - 1);
  };
  CHECK(tail(0) == std::vector<std::string>{"POST", "/ok?q=1", "200", "5", "6"});
  CHECK(tail(1) == std::vector<std::string>{"POST", "/missing", "404", "0", "1"});
  CHECK(tail(2)[0] == "POST");
  CHECK(tail(2)[1] == "/big");
  CHECK(tail(2)[2] == "413");
  CHECK(tail(3)[2] == "400");
  for (size_t i = 0; i < lines.size(); ++i) {
    double latency = -1;
    REQUIRE(absl::SimpleAtod(Fields(lines[i])[6], &latency));
    CHECK(latency >= 0);
    CHECK(latency < 5000);
  }
}

}  // namespace
}  // namespace tessera
