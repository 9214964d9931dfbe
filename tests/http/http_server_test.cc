#include "http/http_server.h"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tests/event_count.h"
#include "tests/raw_http.h"

namespace tessera {
namespace {

using std::chrono::milliseconds;
using testing::HttpPost;
using testing::RawConnection;
using testing::RawResponse;

// The test handler: echoes the method, path and body, and misbehaves on request: /throw throws,
// /oom throws std::bad_alloc, /big answers `big_bytes` bytes, /slow takes 300 ms (slow work, which
// a request in the handler stands for: `slow` counts its entries).
HttpResponse Echo(const HttpRequest& request, size_t big_bytes, testing::EventCount& slow) {
  if (request.path == "/throw") throw std::runtime_error("the handler broke");
  if (request.path == "/oom") throw std::bad_alloc();
  HttpResponse response;
  if (request.path == "/big") {
    response.body = std::string(big_bytes, 'x');
    return response;
  }
  if (request.path == "/slow") {
    slow.Add();
    std::this_thread::sleep_for(milliseconds(300));
  }
  response.body = absl::StrCat(request.method, " ", request.path, " ", request.body);
  return response;
}

// An HttpServer on a free loopback port, serving on its own thread for the test's duration.
class Running {
 public:
  explicit Running(HttpServerOptions options, size_t big_bytes = 1 << 20)
      : slow_(std::make_shared<testing::EventCount>()),
        server_(
            [big_bytes, slow = slow_](const HttpRequest& r) { return Echo(r, big_bytes, *slow); },
            [](int status, absl::string_view message) {
              return absl::StrCat("{\"error\": \"", message, "\"}");
            },
            options) {
    auto port = server_.Bind("127.0.0.1", 0);
    REQUIRE(port.ok());
    port_ = *port;
    thread_ = std::thread([this] { status_ = server_.Run(); });
  }
  ~Running() {
    server_.Stop();
    thread_.join();
    CHECK(status_.ok());
  }
  int port() const { return port_; }
  testing::EventCount& slow() { return *slow_; }  // the /slow requests that reached the handler

 private:
  std::shared_ptr<testing::EventCount> slow_;  // shared with the handler threads
  HttpServer server_;
  int port_ = 0;
  std::thread thread_;
  absl::Status status_;
};

HttpServerOptions Options() {
  HttpServerOptions options;
  options.threads = 2;
  return options;
}

constexpr milliseconds kWait(5000);

TEST_CASE("keep-alive, pipelining, HEAD, chunked bodies and 100-continue") {
  Running server(Options());
  RawConnection c(server.port());
  // Three pipelined requests in one write, answered in order on the same connection.
  REQUIRE(c.Send(HttpPost("/a", "1") + HttpPost("/slow", "2") + HttpPost("/c", "3")));
  for (const char* want : {"POST /a 1", "POST /slow 2", "POST /c 3"}) {
    auto response = c.Read(kWait);
    REQUIRE(response);
    CHECK(response->status == 200);
    CHECK(response->body == want);
    CHECK(response->headers["content-type"] == "application/json");
  }
  REQUIRE(
      c.Send("POST /chunked HTTP/1.1\r\nTransfer-Encoding: "
             "chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"));
  auto chunked = c.Read(kWait);
  REQUIRE(chunked);
  CHECK(chunked->body == "POST /chunked abcde");

  REQUIRE(c.Send("POST /e HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 4\r\n\r\n"));
  auto go_on = c.Read(kWait);
  REQUIRE(go_on);
  CHECK(go_on->status == 100);
  REQUIRE(c.Send("body"));
  auto expected = c.Read(kWait);
  REQUIRE(expected);
  CHECK(expected->body == "POST /e body");

  REQUIRE(c.Send(HttpPost("/last", "", "Connection: close\r\n")));
  auto last = c.Read(kWait);
  REQUIRE(last);
  CHECK(last->headers["connection"] == "close");
  CHECK(c.ClosedWithin(kWait));
}

TEST_CASE("HEAD is answered with the length of its body and no body") {
  Running server(Options());
  RawConnection c(server.port());
  REQUIRE(c.Send("HEAD /x HTTP/1.1\r\n\r\nGET /y HTTP/1.1\r\n\r\n"));
  auto head = c.Read(kWait, /*head_only=*/true);
  REQUIRE(head);
  CHECK(head->headers["content-length"] == "8");  // "HEAD /x ", the echo not sent
  // Had the body been sent, it would be read as the start of the next response.
  auto get = c.Read(kWait);
  REQUIRE(get);
  CHECK(get->status == 200);
  CHECK(get->body == "GET /y ");
}

TEST_CASE("a handler's exception is a 500, running out of memory a 503, and serving goes on") {
  Running server(Options());
  RawConnection c(server.port());
  REQUIRE(c.Send(HttpPost("/throw", "") + HttpPost("/oom", "") + HttpPost("/ok", "")));
  auto thrown = c.Read(kWait);
  REQUIRE(thrown);
  CHECK(thrown->status == 500);
  CHECK(thrown->body == "{\"error\": \"internal error: the handler broke\"}");
  auto oom = c.Read(kWait);
  REQUIRE(oom);
  CHECK(oom->status == 503);
  CHECK(oom->body == "{\"error\": \"out of memory answering this request\"}");
  auto ok = c.Read(kWait);
  REQUIRE(ok);
  CHECK(ok->status == 200);
}

TEST_CASE("malformed and oversized requests get their error and a close") {
  HttpServerOptions options = Options();
  options.max_body_bytes = 100;
  Running server(options);
  {
    RawConnection c(server.port());
    REQUIRE(c.Send(HttpPost("/p", std::string(101, 'x'))));
    auto response = c.Read(kWait);
    REQUIRE(response);
    CHECK(response->status == 413);
    CHECK(response->body ==
          "{\"error\": \"request body of 101 bytes is over the limit of 100 bytes\"}");
    CHECK(response->headers["connection"] == "close");
    CHECK(c.ClosedWithin(kWait));
  }
  {
    RawConnection c(server.port());
    REQUIRE(c.Send("BAD\r\n\r\n"));
    auto response = c.Read(kWait);
    REQUIRE(response);
    CHECK(response->status == 400);
    CHECK(c.ClosedWithin(kWait));
  }
}

TEST_CASE("a request must arrive whole within the read timeout, however it trickles") {
  HttpServerOptions options = Options();
  options.read_timeout_ms = 600;
  Running server(options);
  RawConnection slow(server.port());
  const std::string request = HttpPost("/p", std::string(50, 'x'));
  const auto start = std::chrono::steady_clock::now();
  // A byte every 50 ms: each read is quick, the whole request is not.
  for (char byte : request) {
    if (!slow.Send(std::string(1, byte))) break;
    if (std::chrono::steady_clock::now() - start > milliseconds(3000)) break;
    std::this_thread::sleep_for(milliseconds(50));
    pollfd p{slow.fd(), POLLIN, 0};
    if (poll(&p, 1, 0) == 1) break;  // answered
  }
  auto response = slow.Read(kWait);
  REQUIRE(response);
  CHECK(response->status == 408);
  const auto taken = std::chrono::steady_clock::now() - start;
  CHECK(taken >= milliseconds(550));
  CHECK(taken < milliseconds(2000));
  CHECK(slow.ClosedWithin(kWait));
}

TEST_CASE("idle keep-alive connections are closed after the idle timeout") {
  HttpServerOptions options = Options();
  options.idle_timeout_ms = 300;
  Running server(options);
  RawConnection c(server.port());
  REQUIRE(c.Send(HttpPost("/p", "x")));
  REQUIRE(c.Read(kWait));
  const auto start = std::chrono::steady_clock::now();
  CHECK(c.ClosedWithin(kWait));
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
}

TEST_CASE(
    "past the connection limit the longest idle connection goes, else the new one is refused") {
  HttpServerOptions options = Options();
  options.max_connections = 3;
  Running server(options);
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 3; ++i) {
    idle.push_back(std::make_unique<RawConnection>(server.port()));
    REQUIRE(idle.back()->Send(HttpPost("/p", "x")));
    REQUIRE(idle.back()->Read(kWait));  // served, then idle (oldest first)
    std::this_thread::sleep_for(milliseconds(20));
  }
  RawConnection fourth(server.port());
  REQUIRE(fourth.Send(HttpPost("/p", "4")));
  auto answer = fourth.Read(kWait);
  REQUIRE(answer);
  CHECK(answer->body == "POST /p 4");
  CHECK(idle[0]->ClosedWithin(kWait));  // the longest idle made room
  CHECK_FALSE(idle[1]->ClosedWithin(milliseconds(100)));

  // Now every connection is mid-request: none is idle, so a new one is refused with 503.
  for (RawConnection* c : {idle[1].get(), idle[2].get(), &fourth}) {
    REQUIRE(c->Send("POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc"));
  }
  std::this_thread::sleep_for(milliseconds(100));
  RawConnection refused(server.port());
  auto busy = refused.Read(kWait);
  REQUIRE(busy);
  CHECK(busy->status == 503);
  CHECK(busy->body.find("too many connections") != std::string::npos);
  CHECK(refused.ClosedWithin(kWait));
  // The connections in the middle of their requests are untouched.
  REQUIRE(fourth.Send("defghij"));
  auto finished = fourth.Read(kWait);
  REQUIRE(finished);
  CHECK(finished->body == "POST /p abcdefghij");
}

TEST_CASE("request bodies held at once are bounded: past the budget a request gets 503") {
  HttpServerOptions options = Options();
  options.max_body_bytes = 1000;  // a budget of kBodyBudgetFactor * 1000 bytes
  Running server(options);
  std::vector<std::unique_ptr<RawConnection>> senders;
  const size_t per_sender = 900;
  int refused = 0;
  for (size_t i = 0; i < HttpServer::kBodyBudgetFactor + 1; ++i) {
    senders.push_back(std::make_unique<RawConnection>(server.port()));
    REQUIRE(senders.back()->Send(absl::StrCat("POST /p HTTP/1.1\r\nContent-Length: 1000\r\n\r\n",
                                              std::string(per_sender, 'x'))));
    std::this_thread::sleep_for(milliseconds(50));
  }
  for (auto& sender : senders) {
    auto response = sender->Read(milliseconds(300));
    if (response) {
      CHECK(response->status == 503);
      CHECK(response->body.find("too many request bytes") != std::string::npos);
      ++refused;
    }
  }
  CHECK(refused == 1);
  // Those within the budget complete normally.
  REQUIRE(senders[0]->Send(std::string(100, 'y')));
  auto done = senders[0]->Read(kWait);
  REQUIRE(done);
  CHECK(done->status == 200);
}

TEST_CASE("a client that does not read its answer is dropped after the write timeout") {
  HttpServerOptions options = Options();
  options.write_timeout_ms = 500;
  Running server(options, /*big_bytes=*/64 << 20);  // far more than the socket buffers hold
  RawConnection lazy(server.port());
  const int small = 4096;
  setsockopt(lazy.fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  REQUIRE(lazy.Send("GET /big HTTP/1.1\r\n\r\n"));
  // Its answer is on the way once the first bytes have arrived (left unread).
  pollfd answering{lazy.fd(), POLLIN, 0};
  REQUIRE(poll(&answering, 1, 5000) == 1);
  // Others are served meanwhile.
  RawConnection other(server.port());
  REQUIRE(other.Send(HttpPost("/p", "x")));
  auto answer = other.Read(kWait);
  REQUIRE(answer);
  CHECK(answer->status == 200);
  // Dropped with a reset once the write timeout has passed: wait for the reset itself (asking
  // for no events, poll reports only an error or a hang-up, and the client reads nothing).
  pollfd dropped{lazy.fd(), 0, 0};
  CHECK(poll(&dropped, 1, 10000) == 1);
  // Reading now ends (after what had arrived) well before 64 MB.
  size_t received = 0;
  char chunk[1 << 16];
  for (;;) {
    pollfd p{lazy.fd(), POLLIN, 0};
    if (poll(&p, 1, 2000) <= 0) break;
    const ssize_t n = recv(lazy.fd(), chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    received += static_cast<size_t>(n);
  }
  CHECK(received < (size_t{64} << 20));
}

TEST_CASE("stopping with connections open and a request in the handler returns") {
  Running* server = new Running(Options());
  RawConnection idle(server->port());
  RawConnection partial(server->port());
  REQUIRE(partial.Send("POST /p HTTP/1.1\r\nContent-Length: 10\r\n\r\nab"));
  RawConnection handling(server->port());
  REQUIRE(handling.Send(HttpPost("/slow", "")));
  REQUIRE(server->slow().AwaitAtLeast(1, absl::Seconds(5)));  // in the handler for 300 ms
  const auto start = std::chrono::steady_clock::now();
  delete server;  // Stop, join
  CHECK(std::chrono::steady_clock::now() - start < milliseconds(2000));
  CHECK(idle.ClosedWithin(kWait));
  CHECK(partial.ClosedWithin(kWait));
}

TEST_CASE("options out of range are refused at Bind") {
  HttpServerOptions options = Options();
  options.max_connections = 0;
  HttpServer server([](const HttpRequest&) { return HttpResponse(); },
                    [](int, absl::string_view) { return std::string(); }, options);
  auto bound = server.Bind("127.0.0.1", 0);
  CHECK(bound.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(bound.status().message() == "max_connections must be at least 1, got 0");
  HttpServer unbound([](const HttpRequest&) { return HttpResponse(); },
                     [](int, absl::string_view) { return std::string(); }, Options());
  CHECK(unbound.Run().code() == absl::StatusCode::kFailedPrecondition);
  // 192.0.2.1 (TEST-NET-1) is no address of this machine.
  CHECK(unbound.Bind("192.0.2.1", 0).status().code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace tessera
