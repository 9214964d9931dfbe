#include "http/http_request_parser.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tests/mangle.h"

namespace tessera {
namespace {

HttpRequestLimits Limits(size_t head = 1024, size_t body = 1024) { return {head, body}; }

// Feeds `text` one byte at a time, as a slow client sends it; returns the bytes used.
size_t FeedBytewise(HttpRequestParser& parser, const std::string& text) {
  size_t used = 0;
  for (char c : text) {
    const size_t n = parser.Feed(std::string(1, c));
    used += n;
    if (n == 0) break;
  }
  return used;
}

TEST_CASE("a request arrives whole, in pieces, or byte by byte, with the same result") {
  const std::string text =
      "POST /v1/models/m%3Ax:predict?debug=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n"
      "\r\nhello world";
  for (size_t piece : {text.size(), size_t{7}, size_t{1}}) {
    CAPTURE(piece);
    HttpRequestParser parser(Limits());
    for (size_t at = 0; at < text.size(); at += piece) {
      CHECK_FALSE(parser.complete());
      CHECK(parser.Feed(text.substr(at, piece)) == std::min(piece, text.size() - at));
    }
    REQUIRE(parser.complete());
    const HttpRequest request = parser.Take();
    CHECK(request.method == "POST");
    CHECK(request.target == "/v1/models/m%3Ax:predict?debug=1");
    CHECK(request.path == "/v1/models/m:x:predict");
    CHECK(request.minor_version == 1);
    CHECK(request.keep_alive);
    CHECK(request.body == "hello world");
    CHECK_FALSE(parser.started());  // ready for the next request
  }
}

TEST_CASE("pipelined requests are read one at a time, the rest left for the next") {
  const std::string first = "GET /a HTTP/1.1\r\n\r\n";
  const std::string second = "POST /b HTTP/1.1\r\ncontent-length: 2\r\n\r\nok";
  const std::string third = "GET /c HTTP/1.1\nConnection: close\n\n";  // bare LF line ends
  const std::string all = first + second + third;
  HttpRequestParser parser(Limits());
  std::vector<HttpRequest> requests;
  size_t at = 0;
  while (at < all.size()) {
    at += parser.Feed(absl::string_view(all).substr(at));
    REQUIRE(parser.complete());
    requests.push_back(parser.Take());
  }
  REQUIRE(requests.size() == 3);
  CHECK(requests[0].path == "/a");
  CHECK(requests[1].path == "/b");
  CHECK(requests[1].body == "ok");
  CHECK(requests[2].path == "/c");
  CHECK_FALSE(requests[2].keep_alive);
}

TEST_CASE("empty lines between requests are skipped and do not start a request") {
  HttpRequestParser parser(Limits());
  CHECK(parser.Feed("\r\n\r\n") == 4);
  CHECK_FALSE(parser.started());
  CHECK(parser.Feed("G") == 1);
  CHECK(parser.started());
  CHECK(parser.Feed("ET / HTTP/1.1\r\n\r\n") == 17);
  CHECK(parser.complete());
}

TEST_CASE("keep-alive: HTTP/1.1 unless Connection: close, HTTP/1.0 only when asked") {
  const auto keep_alive = [](const std::string& text) {
    HttpRequestParser parser(Limits());
    parser.Feed(text);
    REQUIRE(parser.complete());
    return parser.Take().keep_alive;
  };
  CHECK(keep_alive("GET / HTTP/1.1\r\n\r\n"));
  CHECK_FALSE(keep_alive("GET / HTTP/1.1\r\nConnection: Keep-Alive, CLOSE\r\n\r\n"));
  CHECK_FALSE(keep_alive("GET / HTTP/1.0\r\n\r\n"));
  CHECK(keep_alive("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"));
}

TEST_CASE("a chunked body is decoded, extensions and trailers dropped") {
  const std::string text =
      "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;name=value\r\nhello\r\n1\r\n \r\nA\r\n0123456789\r\n0\r\nX-Trailer: t\r\n\r\n"
      "GET /next HTTP/1.1\r\n\r\n";
  HttpRequestParser parser(Limits());
  const size_t used = FeedBytewise(parser, text);
  REQUIRE(parser.complete());
  CHECK(text.substr(used) == "GET /next HTTP/1.1\r\n\r\n");
  CHECK(parser.Take().body == "hello 0123456789");
}

TEST_CASE("Expect: 100-continue is reported until the body starts") {
  HttpRequestParser parser(Limits());
  parser.Feed("POST /p HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  CHECK(parser.head_complete());
  CHECK(parser.expects_continue());
  parser.Feed("a");
  CHECK_FALSE(parser.expects_continue());
  parser.Feed("bc");
  CHECK(parser.complete());

  HttpRequestParser http10(Limits());
  http10.Feed("POST /p HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  CHECK_FALSE(http10.expects_continue());
}

struct Refusal {
  std::string text;
  int status;
  std::string error;
};

TEST_CASE("malformed and oversized requests are refused with the status to answer") {
  const std::string long_target(2000, 'a');
  const std::vector<Refusal> refusals = {
      {"GET\r\n\r\n", 400, "malformed request line"},
      {"GET  / HTTP/1.1\r\n\r\n", 400, "malformed request line"},
      {"G(T / HTTP/1.1\r\n\r\n", 400, "malformed request line"},
      {"GET / HTTP/1.1 extra\r\n\r\n", 400, "malformed request line"},
      {"GET / FTP/1.1\r\n\r\n", 400, "malformed request line"},
      {"GET / HTTP/2.0\r\n\r\n", 505, "HTTP version '2.0' is not supported"},
      {"GET nowhere HTTP/1.1\r\n\r\n", 400, "malformed request target"},
      {"GET /a\x01 HTTP/1.1\r\n\r\n", 400, "malformed request target"},
      {"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400, "malformed header line"},
      {"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n", 400, "malformed header line"},
      {"GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n", 400, "obsolete line folding"},
      {"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400, "malformed Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400, "malformed Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n", 400,
       "malformed Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", 400,
       "malformed Content-Length"},
      {"POST / HTTP/1.1\r\nContent-Length: 5000\r\n\r\n", 413,
       "request body of 5000 bytes is over the limit of 1024 bytes"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n", 501,
       "transfer coding 'gzip' is not supported"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n", 400,
       "both Content-Length and Transfer-Encoding"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, "bad chunk size"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n401\r\n", 413,
       "over the limit of 1024 bytes"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc", 400,
       "no line end after a chunk"},
      {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n" + std::string(2000, '1'), 400,
       "chunk size line too long"},
      {"GET /" + long_target + " HTTP/1.1\r\n\r\n", 414, "request line longer than 1024 bytes"},
      {"GET / HTTP/1.1\r\nA: " + long_target + "\r\n\r\n", 431,
       "request head longer than 1024 bytes"},
  };
  for (const Refusal& refusal : refusals) {
    CAPTURE(refusal.text);
    HttpRequestParser parser(Limits());
    parser.Feed(refusal.text);
    REQUIRE(parser.failed());
    CHECK(parser.error_status() == refusal.status);
    CHECK(parser.error().find(refusal.error) != std::string::npos);
  }

  std::string many_headers = "GET / HTTP/1.1\r\n";
  for (int i = 0; i <= HttpRequestParser::kMaxHeaders; ++i) many_headers += "A: b\r\n";
  HttpRequestParser parser(Limits(/*head=*/100'000));
  parser.Feed(many_headers);
  REQUIRE(parser.failed());
  CHECK(parser.error_status() == 431);
}

TEST_CASE("an oversized head is refused before it is held, whatever it is made of") {
  // A client streaming an endless header line (or endless empty lines) is cut off at the limit.
  HttpRequestParser parser(Limits(/*head=*/1024));
  parser.Feed("GET / HTTP/1.1\r\nA: ");
  size_t fed = 0;
  while (!parser.failed() && fed < 10'000) fed += parser.Feed(std::string(100, 'x'));
  CHECK(parser.failed());
  CHECK(fed <= 1100);

  HttpRequestParser blank(Limits(/*head=*/1024));
  fed = 0;
  while (!blank.failed() && fed < 10'000) fed += blank.Feed("\r\n");
  CHECK(blank.failed());
  CHECK(blank.error_status() == 431);
}

TEST_CASE("absolute-form and asterisk targets give their paths") {
  HttpRequestParser parser(Limits());
  parser.Feed("GET http://example.com:8501/v1/models/m?x HTTP/1.1\r\n\r\n");
  REQUIRE(parser.complete());
  CHECK(parser.Take().path == "/v1/models/m");
  parser.Feed("OPTIONS * HTTP/1.1\r\n\r\n");
  REQUIRE(parser.complete());
  CHECK(parser.Take().path == "*");
  parser.Feed("GET /a%zz%4 HTTP/1.1\r\n\r\n");  // bad escapes stay as they are
  REQUIRE(parser.complete());
  CHECK(parser.Take().path == "/a%zz%4");
}

TEST_CASE("mangled requests in random pieces end complete, failed or wanting more, within limits") {
  const std::string valid =
      "POST /v1/models/m:predict HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello"
      "POST /p HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  const std::string alphabet = "\r\n :;0123456789abcdefxGET/HTTP1.Content-LengthTransfer-Encoding";
  std::mt19937 random(5);
  for (int trial = 0; trial < 5000; ++trial) {
    const int edits = static_cast<int>(random() % 4);
    const std::string text = Mangle(valid, edits, random, alphabet);
    CAPTURE(text);
    HttpRequestParser parser(Limits(/*head=*/256, /*body=*/64));
    size_t at = 0;
    int requests = 0;
    while (at < text.size() && !parser.failed()) {
      const size_t piece = 1 + random() % 16;
      const absl::string_view bytes = absl::string_view(text).substr(at, piece);
      const size_t used = parser.Feed(bytes);
      REQUIRE(used <= bytes.size());
      CHECK(parser.body_bytes() <= 64);
      at += used;
      if (parser.complete()) {
        parser.Take();
        ++requests;
      } else if (!parser.failed()) {
        REQUIRE(used == bytes.size());  // short only when complete or failed
      }
    }
    if (parser.failed()) {
      const int status = parser.error_status();
      CHECK((status == 400 || status == 413 || status == 414 || status == 431 || status == 501 ||
             status == 505));
      CHECK_FALSE(parser.error().empty());
    }
    if (edits == 0) CHECK(requests == 2);
  }
}

}  // namespace
}  // namespace tessera
