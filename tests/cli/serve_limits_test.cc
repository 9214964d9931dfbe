// Process-level tests of `tessera serve` against hostile and careless clients: the built binary
// serves an exported model and each test plays a client that once broke it — many ranges, slow
// and idle connections, pipelining, keep-alive, huge bodies under a memory limit — and checks
// that the cost stays bounded and other clients are still answered.
#include <doctest/doctest.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schema/serving/model_io.h"
#include "serving/json.h"
#include "tests/cli/cli_test_util.h"
#include "tests/cli/tessera_child.h"
#include "tests/raw_http.h"

#ifdef TESSERA_BINARY

namespace tessera::cli {

using serving::ParseJson;
namespace {

using std::chrono::milliseconds;
using testing::Child;
using tessera::testing::HttpPost;
using tessera::testing::RawConnection;
using tessera::testing::RawResponse;
using testing::TempDir;
using testing::WaitForPort;

using Clock = std::chrono::steady_clock;

constexpr char kPredict[] = "/v1/models/recsys:predict";
constexpr milliseconds kWait(10'000);

// `tessera serve` on the tiny recsys model (5 users, 4 items) as "recsys", on a free port.
class Server {
 public:
  explicit Server(const std::vector<std::string>& flags = {}) {
    const std::string model_dir = dir_.MakeSub("export");
    REQUIRE(WriteExportedModel(model_dir, testing::TinyRecsysModel()).ok());
    std::vector<std::string> args = {"serve", "--model", model_dir, "--port",
                                     "0",     "--name",  "recsys"};
    args.insert(args.end(), flags.begin(), flags.end());
    child_ = std::make_unique<Child>(dir_, args, "/dev/null");
    port_ = WaitForPort(*child_);
    REQUIRE_MESSAGE(port_ > 0, std::string(child_->out() + child_->err()));
  }
  ~Server() {
    if (child_->Alive()) {
      child_->Signal(SIGTERM);
      CHECK(child_->Wait() == 0);
    }
  }

  int port() const { return port_; }
  Child& child() { return *child_; }

  // One request on a connection of its own; the answer, or nullopt within `timeout`.
  std::optional<RawResponse> Ask(const std::string& request, milliseconds timeout = kWait) {
    RawConnection c(port_);
    if (!c.Send(request)) return std::nullopt;
    return c.Read(timeout);
  }

 private:
  TempDir dir_;
  std::unique_ptr<Child> child_;
  int port_ = -1;
};

// {"instances": [...]} with n instances of the tiny model, the users and items cycling from
// `first`; `padding` spaces before the closing brace.
std::string Instances(int n, int first = 0, size_t padding = 0) {
  std::string body = "{\"instances\": [";
  for (int i = 0; i < n; ++i) {
    absl::StrAppend(&body, i == 0 ? "" : ",", "{\"user\": ", (first + i) % 5,
                    ", \"item\": ", (first + i) % 4, "}");
  }
  body += "]";
  body.append(padding, ' ');
  body += "}";
  return body;
}

TEST_CASE("a Range header listing thousands of ranges gets the plain answer at the plain cost") {
  Server server;
  const std::string body = Instances(1000);
  auto plain = server.Ask(HttpPost(kPredict, body));
  REQUIRE(plain);
  REQUIRE(plain->status == 200);
  const int64_t peak_before = server.child().MemoryMiB("VmHWM");
  REQUIRE(peak_before > 0);

  std::string ranges = "Range: bytes=0-";
  for (int i = 1; i < 2600; ++i) ranges += ",0-";  // each range the whole answer
  ranges += "\r\n";
  auto ranged = server.Ask(HttpPost(kPredict, body, ranges));
  REQUIRE(ranged);
  CHECK(ranged->status == 200);
  CHECK(ranged->body.size() == plain->body.size());
  CHECK(ranged->body == plain->body);
  const int64_t peak_after = server.child().MemoryMiB("VmHWM");
  CHECK_MESSAGE(peak_after - peak_before < 32,
                "peak RSS " << peak_before << " MiB -> " << peak_after << " MiB");
}

// Connections sending a byte every 100 ms: each read is quick, each request takes 20 s.
class Trickle {
 public:
  Trickle(int port, int connections, const std::string& request) : request_(request) {
    for (int i = 0; i < connections; ++i) {
      connections_.push_back(std::make_unique<RawConnection>(port));
    }
    thread_ = std::thread([this] {
      for (size_t at = 0; at < request_.size() && !stop_; ++at) {
        for (auto& c : connections_) c->Send(request_.substr(at, 1));
        std::this_thread::sleep_for(milliseconds(100));
      }
    });
  }
  ~Trickle() { Stop(); }

  // Whether the server has sent something (an answer, or a close) on every connection, waiting
  // up to `limit` on the sockets themselves while the trickle goes on.
  bool AwaitAnswers(milliseconds limit) {
    const Clock::time_point deadline = Clock::now() + limit;
    std::vector<pollfd> waiting;
    for (auto& c : connections_) waiting.push_back({c->fd(), POLLIN, 0});
    while (!waiting.empty()) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || poll(waiting.data(), waiting.size(), static_cast<int>(left)) <= 0) {
        return false;
      }
      waiting.erase(std::remove_if(waiting.begin(), waiting.end(),
                                   [](const pollfd& p) { return p.revents != 0; }),
                    waiting.end());
    }
    return true;
  }

  // Stops sending; the connections are then the caller's to read.
  std::vector<std::unique_ptr<RawConnection>>& Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    return connections_;
  }

 private:
  const std::string request_;
  std::vector<std::unique_ptr<RawConnection>> connections_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST_CASE("slow and idle clients do not hold up others") {
  Server server;
  // Twice as many idle and as many slow connections as the old server had threads.
  std::vector<std::unique_ptr<RawConnection>> idle;
  for (int i = 0; i < 16; ++i) idle.push_back(std::make_unique<RawConnection>(server.port()));
  Trickle slow(server.port(), 16, HttpPost(kPredict, Instances(2)));
  // Meanwhile a normal client is answered at once, again and again.
  const auto start = Clock::now();
  int answered = 0;
  while (Clock::now() - start < milliseconds(1500)) {
    const auto asked = Clock::now();
    auto answer = server.Ask(HttpPost(kPredict, Instances(1), "Connection: close\r\n"),
                             milliseconds(1000));
    REQUIRE_MESSAGE(answer, "no answer within 1 s while slow clients trickle");
    CHECK(answer->status == 200);
    CHECK(Clock::now() - asked < milliseconds(1000));
    ++answered;
  }
  CHECK(answered >= 5);
}

TEST_CASE("a request trickling in is cut at the read timeout, 408, and its connection closed") {
  Server server({"--read_timeout_ms=1500"});
  const auto start = Clock::now();
  Trickle trickle(server.port(), 8, HttpPost(kPredict, Instances(2)));
  REQUIRE_MESSAGE(trickle.AwaitAnswers(milliseconds(3500)),
                  "a slow request was not cut at the read timeout");
  CHECK(Clock::now() - start >= milliseconds(1400));  // cut at the timeout, not before
  for (auto& c : trickle.Stop()) {
    auto response = c->Read(milliseconds(3000));
    REQUIRE_MESSAGE(response, "a slow request was not cut at the read timeout");
    CHECK(response->status == 408);
    CHECK(c->ClosedWithin(milliseconds(3000)));
  }
  CHECK(Clock::now() - start < milliseconds(4000));
}

TEST_CASE("pipelined requests are all answered, in order") {
  Server server;
  std::vector<std::string> requests;
  std::vector<std::string> alone;
  for (int u = 0; u < 5; ++u) {
    requests.push_back(HttpPost(kPredict, Instances(1, u)));
    auto answer = server.Ask(requests.back());
    REQUIRE(answer);
    REQUIRE(answer->status == 200);
    alone.push_back(answer->body);
  }
  RawConnection c(server.port());
  std::string all;
  for (const std::string& request : requests) all += request;
  REQUIRE(c.Send(all));  // one write
  for (int u = 0; u < 5; ++u) {
    CAPTURE(u);
    auto answer = c.Read(kWait);
    REQUIRE_MESSAGE(answer, "pipelined request " << u << " got no answer");
    CHECK(answer->status == 200);
    CHECK(answer->body == alone[u]);
  }
}

TEST_CASE("200 keep-alive requests on one connection are quick and keep the connection") {
  Server server;
  RawConnection c(server.port());
  const std::string request = HttpPost(kPredict, Instances(2));
  const auto start = Clock::now();
  for (int i = 0; i < 200; ++i) {
    CAPTURE(i);
    REQUIRE(c.Send(request));
    auto answer = c.Read(kWait);
    REQUIRE(answer);
    CHECK(answer->status == 200);
    REQUIRE(answer->headers.count("connection") == 0);  // no "close": the connection stays
  }
  // ~40 ms each when the head and the body went out in two writes without TCP_NODELAY (8 s in
  // all); well under a millisecond each now. The bound is generous for a loaded machine.
  const auto taken = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  CHECK_MESSAGE(taken < milliseconds(4000),
                "200 keep-alive requests took " << taken.count() << " ms");
}

TEST_CASE("a body near the size limit costs a small multiple of itself") {
  Server server;
  REQUIRE(server.Ask(HttpPost(kPredict, Instances(1))));
  const int64_t peak_before = server.child().MemoryMiB("VmHWM");

  // 55 MB of instances (2.4 million of them): refused for their number, none read.
  const std::string many = Instances(2'400'000);
  REQUIRE(many.size() > (size_t{50} << 20));
  auto refused = server.Ask(HttpPost(kPredict, many), milliseconds(60'000));
  REQUIRE(refused);
  CHECK(refused->status == 413);
  auto error = ParseJson(refused->body);
  REQUIRE(error.ok());
  CHECK((*error)["error"] ==
        "the request has 2400000 instances; this server takes at most 10000 per request");

  // The largest request taken: 10000 instances, padded to 50 MB.
  auto taken =
      server.Ask(HttpPost(kPredict, Instances(10'000, 0, size_t{50} << 20)), milliseconds(60'000));
  REQUIRE(taken);
  CHECK(taken->status == 200);
  const int64_t peak_after = server.child().MemoryMiB("VmHWM");
  CHECK_MESSAGE(peak_after - peak_before < 3 * 50,
                "peak RSS " << peak_before << " MiB -> " << peak_after << " MiB");
}

// Caps the address space of process `pid` at its current size plus `extra_mib`: past that, every
// allocation fails. False when not applied: AddressSanitizer and ThreadSanitizer reserve
// terabytes of shadow memory up front, so a limit near the real use cannot be set there.
bool LimitAddressSpace(Child& child, int64_t extra_mib) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  MESSAGE("sanitizer build: the address-space limit is not applied");
  return false;
#else
  const int64_t size = child.MemoryMiB("VmSize");
  REQUIRE(size > 0);
  const rlimit limit{static_cast<rlim_t>((size + extra_mib) << 20),
                     static_cast<rlim_t>((size + extra_mib) << 20)};
  REQUIRE(prlimit(child.pid(), RLIMIT_AS, &limit, nullptr) == 0);
  return true;
#endif
}

TEST_CASE("under a memory limit, huge requests get 4xx or 5xx and the server keeps serving") {
  SUBCASE("with the default limits") {
    Server server;
    for (int i = 0; i < 4; ++i) REQUIRE(server.Ask(HttpPost(kPredict, Instances(10))));
    LimitAddressSpace(server.child(), 400);
    // Thousands of ranges over a 500 KB answer (the old server built 1.3 GB of it and died).
    std::string ranges = "Range: bytes=0-";
    for (int i = 1; i < 2600; ++i) ranges += ",0-";
    auto ranged = server.Ask(HttpPost(kPredict, Instances(10'000), ranges + "\r\n"));
    REQUIRE(ranged);
    CHECK(ranged->status == 200);
    CHECK(ranged->body.size() < (size_t{1} << 20));
    // A 50 MB body (the old server used 2.6 GB on it).
    auto huge = server.Ask(HttpPost(kPredict, Instances(2'200'000)), milliseconds(60'000));
    REQUIRE(huge);
    CHECK(huge->status >= 400);
    CHECK(huge->status < 600);
    auto after = server.Ask(HttpPost(kPredict, Instances(3)));
    REQUIRE(after);
    CHECK(after->status == 200);
    CHECK(server.child().Alive());
  }
  SUBCASE("with limits raised past what memory allows: out of memory is a 503") {
    Server server({"--max_instances=100000000", "--max_body_bytes=1000000000"});
    if (LimitAddressSpace(server.child(), 150)) {
      // A 50 MB body of 2.2 million instances, their ids and their predictions are more than
      // 150 MB. No request comes before it, so it lands on a handler thread that has served
      // nothing: one whose allocator would be set up only now, when memory is short, took
      // minutes to fail (Note [Out of memory] in http/internal/server_loop.h).
      auto huge = server.Ask(HttpPost(kPredict, Instances(2'200'000)), milliseconds(60'000));
      REQUIRE_MESSAGE(huge, "no answer; " << server.child().err());
      CHECK(huge->status == 503);
      auto error = ParseJson(huge->body);
      REQUIRE(error.ok());
      CHECK(testing::Has((*error)["error"].get<std::string>(), "out of memory"));
    }
    for (int i = 0; i < 3; ++i) {
      auto after = server.Ask(HttpPost(kPredict, Instances(3)));
      REQUIRE(after);
      CHECK(after->status == 200);
    }
    CHECK(server.child().Alive());
  }
}

TEST_CASE("serve's limit flags are checked and documented") {
  TempDir dir;
  const std::string model_dir = dir.MakeSub("export");
  REQUIRE(WriteExportedModel(model_dir, testing::TinyRecsysModel()).ok());
  for (const std::string flag :
       {"--max_connections=0", "--read_timeout_ms=0", "--max_instances=0", "--max_body_bytes=0",
        "--idle_timeout_ms=-1", "--write_timeout_ms=0", "--threads=-1"}) {
    CAPTURE(flag);
    const testing::Finished bad =
        testing::RunTessera(dir, {"serve", "--model", model_dir, "--port", "0", flag});
    CHECK(bad.code == 2);
    const std::string name = flag.substr(0, flag.find('='));
    CHECK(testing::Has(bad.err, "tessera serve: " + name + " must be at least"));
  }
  const testing::Finished help = testing::RunTessera(dir, {"help"});
  for (const char* flag : {"--max_body_bytes", "--max_instances", "--max_connections",
                           "--read_timeout_ms", "--idle_timeout_ms", "--write_timeout_ms"}) {
    CHECK(testing::Has(help.out, flag));
  }
}

}  // namespace
}  // namespace tessera::cli

#endif  // TESSERA_BINARY
