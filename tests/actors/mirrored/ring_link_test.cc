#include "actors/mirrored/ring_link.h"

#include <arpa/inet.h>
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "tests/listener.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using testing::CheckOk;
using testing::ValueOrDie;

constexpr absl::Duration kWait = absl::Seconds(10);

// What a receiver handed over: its messages, in order, and its end.
struct Received {
  std::mutex mu;
  std::condition_variable ended;
  std::vector<std::pair<int64_t, RingChunk>> chunks;
  std::optional<absl::Status> end;

  std::unique_ptr<RingLinkReceiver> Listen(int64_t max_elements = 1000,
                                           absl::Duration accept_timeout = kWait) {
    return ValueOrDie(RingLinkReceiver::Listen(
        "127.0.0.1", max_elements, accept_timeout,
        [this](int64_t collective, RingChunk chunk) {
          std::lock_guard<std::mutex> lock(mu);
          chunks.emplace_back(collective, std::move(chunk));
        },
        [this](absl::Status why) {
          std::lock_guard<std::mutex> lock(mu);
          CHECK(!end.has_value());  // once
          end = std::move(why);
          ended.notify_all();
        }));
  }
  // The end, once there is one (or DeadlineExceeded from the wait itself).
  absl::Status WaitForEnd() {
    std::unique_lock<std::mutex> lock(mu);
    if (!ended.wait_for(lock, absl::ToChronoSeconds(kWait), [this] { return end.has_value(); })) {
      return absl::DeadlineExceededError("the test waited for the link's end");
    }
    return *end;
  }
  size_t Count() {
    std::lock_guard<std::mutex> lock(mu);
    return chunks.size();
  }
};

RingChunk Chunk(int64_t chunk, int32_t step, std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return {chunk, step, RingValues::Own(*Tensor::FromVector(Shape{n}, std::move(values)))};
}

// A raw connection to the receiver, for what no RingLinkSender writes.
int RawConnect(uint16_t port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0);
  return fd;
}

void RawWrite(int fd, const void* data, size_t size) {
  REQUIRE(write(fd, data, size) == static_cast<ssize_t>(size));
}

void RawHello(int fd, const std::string& token) {
  RawWrite(fd, kRingLinkMagic, sizeof(kRingLinkMagic));
  RawWrite(fd, token.data(), token.size());
}

TEST_CASE("a ring link carries messages in order, values intact, and ends OK when closed") {
  Received received;
  std::unique_ptr<RingLinkReceiver> receiver = received.Listen();
  CHECK(receiver->port() > 0);
  CHECK(receiver->token().size() == 32);
  std::unique_ptr<RingLinkSender> sender =
      ValueOrDie(RingLinkSender::Connect("127.0.0.1", receiver->port(), receiver->token(), kWait));
  // A segment shared in place from a buffer, one owned, and an empty one.
  RingBuffer buffer = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5});
  CheckOk(sender->Send(7, {2, 1, RingValues::Share(buffer, {1, 4})}));
  CheckOk(sender->Send(8, Chunk(0, 0, {-1.5f, 1e30f})));
  CheckOk(sender->Send(9, Chunk(3, 2, {})));
  sender.reset();
  CheckOk(received.WaitForEnd());
  std::lock_guard<std::mutex> lock(received.mu);
  REQUIRE(received.chunks.size() == 3);
  CHECK(received.chunks[0].first == 7);
  CHECK(received.chunks[0].second.chunk == 2);
  CHECK(received.chunks[0].second.step == 1);
  CHECK(std::vector<float>(received.chunks[0].second.values.span().begin(),
                           received.chunks[0].second.values.span().end()) ==
        std::vector<float>{2, 3, 4});
  CHECK(received.chunks[1].first == 8);
  CHECK(std::vector<float>(received.chunks[1].second.values.span().begin(),
                           received.chunks[1].second.values.span().end()) ==
        std::vector<float>{-1.5f, 1e30f});
  CHECK(received.chunks[2].second.chunk == 3);
  CHECK(received.chunks[2].second.values.size() == 0);
}

TEST_CASE("a ring link takes only the sender with the token, and strangers cannot block it") {
  Received received;
  std::unique_ptr<RingLinkReceiver> receiver = received.Listen();
  std::string wrong = receiver->token();
  wrong[0] = wrong[0] == 'a' ? 'b' : 'a';
  // A wrong token is refused by the sender's own check of its length, then by the receiver.
  CHECK(absl::IsInvalidArgument(
      RingLinkSender::Connect("127.0.0.1", receiver->port(), "short", kWait).status()));
  std::unique_ptr<RingLinkSender> stranger =
      ValueOrDie(RingLinkSender::Connect("127.0.0.1", receiver->port(), wrong, kWait));
  // A connection that sends nothing at all, and one that sends garbage.
  const int silent = RawConnect(receiver->port());
  const int garbage = RawConnect(receiver->port());
  RawWrite(garbage, "GET / HTTP/1.1\r\n\r\n0123456789012345678901234567890", 48);
  std::unique_ptr<RingLinkSender> sender =
      ValueOrDie(RingLinkSender::Connect("127.0.0.1", receiver->port(), receiver->token(), kWait));
  // The stranger's message never arrives (its connection was closed: a send may or may not
  // notice yet); the real sender's does, once the silent connection's hello timed out.
  (void)stranger->Send(1, Chunk(0, 0, {666}));
  CheckOk(sender->Send(2, Chunk(0, 0, {42})));
  sender.reset();
  CheckOk(received.WaitForEnd());
  close(silent);
  close(garbage);
  std::lock_guard<std::mutex> lock(received.mu);
  REQUIRE(received.chunks.size() == 1);
  CHECK(received.chunks[0].first == 2);
  CHECK(received.chunks[0].second.values.span()[0] == 42);
}

TEST_CASE("a malformed or truncated ring link message ends the link with DataLoss, unread") {
  struct Case {
    const char* name;
    RingLinkHeader header;
    size_t payload_bytes;  // written after the header, then the connection closes
  };
  RingLinkHeader good;
  good.collective = 1;
  good.elements = 4;
  good.magic = kRingLinkHeaderMagic;
  auto with = [&](auto change) {
    RingLinkHeader h = good;
    change(h);
    return h;
  };
  const std::vector<Case> cases = {
      {"a bad magic", with([](RingLinkHeader& h) { h.magic = 0; }), 16},
      {"more floats than a chunk", with([](RingLinkHeader& h) { h.elements = 1001; }), 0},
      {"a negative count", with([](RingLinkHeader& h) { h.elements = -1; }), 0},
      {"a negative collective", with([](RingLinkHeader& h) { h.collective = -2; }), 16},
      {"a negative step", with([](RingLinkHeader& h) { h.step = -1; }), 16},
      {"a negative chunk", with([](RingLinkHeader& h) { h.chunk = -1; }), 16},
      {"values cut short", good, 7},
      {"a header and no values", good, 0},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Received received;
    std::unique_ptr<RingLinkReceiver> receiver = received.Listen(1000);
    const int fd = RawConnect(receiver->port());
    RawHello(fd, receiver->token());
    RawWrite(fd, &c.header, sizeof(c.header));
    const std::vector<char> payload(c.payload_bytes, 0);
    if (!payload.empty()) RawWrite(fd, payload.data(), payload.size());
    close(fd);
    CHECK(absl::IsDataLoss(received.WaitForEnd()));
    CHECK(received.Count() == 0);
  }
  // A header cut short, too.
  Received received;
  std::unique_ptr<RingLinkReceiver> receiver = received.Listen();
  const int fd = RawConnect(receiver->port());
  RawHello(fd, receiver->token());
  RawWrite(fd, &good, sizeof(good) / 2);
  close(fd);
  CHECK(absl::IsDataLoss(received.WaitForEnd()));
}

TEST_CASE("a ring link nobody connects to times out, and a receiver stops when destroyed") {
  Received lonely;
  std::unique_ptr<RingLinkReceiver> waiting = lonely.Listen(1000, absl::Milliseconds(200));
  CHECK(absl::IsDeadlineExceeded(lonely.WaitForEnd()));
  // Destroyed while it waits for a sender, and while it reads from one: both return at once.
  Received accepting;
  std::unique_ptr<RingLinkReceiver> idle = accepting.Listen();
  idle.reset();
  CheckOk(accepting.WaitForEnd());
  Received reading;
  std::unique_ptr<RingLinkReceiver> busy = reading.Listen();
  std::unique_ptr<RingLinkSender> sender =
      ValueOrDie(RingLinkSender::Connect("127.0.0.1", busy->port(), busy->token(), kWait));
  CheckOk(sender->Send(0, Chunk(0, 0, {1})));
  busy.reset();
  CheckOk(reading.WaitForEnd());
  // The sender then finds the link broken (at once or at the next send) and says so.
  absl::Status sent = absl::OkStatus();
  for (int i = 0; i < 100 && sent.ok(); ++i) sent = sender->Send(1, Chunk(0, 0, {2}));
  CHECK(absl::IsUnavailable(sent));
  CHECK(absl::IsUnavailable(sender->Send(2, Chunk(0, 0, {3}))));
  // A receiver that takes nothing (a process stopped): the send gives up after its timeout.
  // (A listener that never accepts: the kernel takes the connection and buffers what comes.)
  testing::Listener listener;
  std::unique_ptr<RingLinkSender> stalled =
      ValueOrDie(RingLinkSender::Connect("127.0.0.1", static_cast<uint16_t>(listener.port()),
                                         std::string(32, 'a'), kWait, absl::Milliseconds(300)));
  const absl::Time before = absl::Now();
  absl::Status stuck = absl::OkStatus();
  // 8 MiB a send: the socket buffers fill within a few.
  for (int i = 0; i < 64 && stuck.ok(); ++i) {
    stuck = stalled->Send(i, Chunk(0, 0, std::vector<float>(size_t{1} << 21, 1.0f)));
  }
  CHECK(absl::IsUnavailable(stuck));
  CHECK(absl::StrContains(stuck.message(), "took nothing"));
  CHECK(absl::Now() - before < kWait);
  // Nobody listening: Unavailable.
  const uint16_t closed_port = [] {
    Received gone;
    return gone.Listen()->port();
  }();
  CHECK(absl::IsUnavailable(
      RingLinkSender::Connect("127.0.0.1", closed_port, std::string(32, 'a'), kWait).status()));
}

}  // namespace
}  // namespace tessera
