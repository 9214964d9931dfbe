// Transport (cluster/network/transport.h) on its own, without PublishNode's gate or
// ConnectToNode's version handshake: publishing and connecting on loopback, the reuse of an open
// connection, failures a connect reports, and the admission limit on what a peer may send.
// network_test.cc covers the same guards through PublishNode and ConnectToNode (raw strangers,
// the handshake deadline, the cap on connections waiting for it, TLS).
#include "cluster/network/transport.h"

#include <doctest/doctest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cluster/base/cluster.h"
#include "cluster/network/network.h"
#include "tests/cluster/network_test_util.h"

namespace tessera {
namespace {

using testing::UnusedPort;

constexpr auto kGuard = std::chrono::seconds(20);  // only a hang waits this long

// A node of its own: an actor system configured for the network, and an actor that answers a
// string with its length.
class Node {
 public:
  explicit Node(NetworkOptions options = {}) : options_(std::move(options)) {
    ConfigureActorSystem(config_, /*threads=*/2);
    const absl::Status configured = ConfigureNetwork(config_, options_);
    REQUIRE_MESSAGE(configured.ok(), configured.ToString());
    system_ = std::make_unique<caf::actor_system>(config_);
    measurer_ = system_->spawn([](caf::event_based_actor*, int32_t) -> caf::behavior {
      return {[](const std::string& s) { return static_cast<int64_t>(s.size()); }};
    }, 0);
  }
  ~Node() {
    caf::anon_send_exit(measurer_, caf::exit_reason::user_shutdown);
    measurer_ = nullptr;
    system_.reset();
  }

  caf::actor_system& system() { return *system_; }
  Transport transport() { return Transport::Of(*system_, options_); }
  const caf::actor& measurer() const { return measurer_; }

 private:
  NetworkOptions options_;
  caf::actor_system_config config_;  // must outlive system_
  std::unique_ptr<caf::actor_system> system_;
  caf::actor measurer_;
};

// Asks `remote` for the length of `s`: the length, or nullopt when the connection closed first
// (the remote actor went down).
std::optional<int64_t> Measure(caf::actor_system& system, const caf::actor& remote,
                               const std::string& s) {
  caf::scoped_actor self{system};
  self->monitor(remote);
  self->send(remote, s);
  std::optional<int64_t> out;
  bool done = false;
  while (!done) {
    self->receive([&](int64_t length) { out = length, done = true; },
                  [&](caf::down_msg&) { done = true; },
                  caf::after(kGuard) >> [&] {
                    FAIL("neither a reply nor the connection's end came");
                    done = true;
                  });
  }
  return out;
}

TEST_CASE("transport: a published actor is reached over loopback, the open connection reused") {
  Node server;
  Node client;
  const caf::expected<uint16_t> port =
      server.transport().Publish(server.measurer(), 0, "127.0.0.1");
  REQUIRE_MESSAGE(port, client.system().render(port.error()));
  CHECK(*port != 0);

  const NodeAddress address{"127.0.0.1", *port};
  const caf::expected<caf::actor> remote = client.transport().Connect(address);
  REQUIRE_MESSAGE(remote, client.system().render(remote.error()));
  CHECK(remote->node() == server.system().node());
  CHECK(Measure(client.system(), *remote, "hello") == 5);

  // A second connect (through another handle of the same transport) finds the same actor.
  const caf::expected<caf::actor> again = client.transport().Connect(address);
  REQUIRE(again);
  CHECK(*again == *remote);
  CHECK_FALSE(client.transport().TakeFailure(address).has_value());
}

TEST_CASE("transport: a port already published on cannot be published on again") {
  Node server;
  const caf::expected<uint16_t> port =
      server.transport().Publish(server.measurer(), 0, "127.0.0.1");
  REQUIRE(port);
  Node other;
  CHECK_FALSE(other.transport().Publish(other.measurer(), *port, "127.0.0.1"));
}

TEST_CASE("transport: a connect to a port nobody listens on fails") {
  Node client;
  const NodeAddress address{"127.0.0.1", UnusedPort()};
  CHECK_FALSE(client.transport().Connect(address));
  // Whatever it knows of why is said once.
  client.transport().TakeFailure(address);
  CHECK_FALSE(client.transport().TakeFailure(address).has_value());
}

TEST_CASE("transport: before admission a peer's message is at most max_handshake_bytes") {
  NetworkOptions options;
  options.max_handshake_bytes = 16 << 10;
  Node server(options);
  Node client(options);
  const caf::expected<uint16_t> port =
      server.transport().Publish(server.measurer(), 0, "127.0.0.1");
  REQUIRE(port);
  const NodeAddress address{"127.0.0.1", *port};
  const std::string small(1 << 10, 'x');
  const std::string large(64 << 10, 'x');

  caf::expected<caf::actor> remote = client.transport().Connect(address);
  REQUIRE(remote);
  CHECK(Measure(client.system(), *remote, small) == static_cast<int64_t>(small.size()));
  // Too large for a peer not admitted: the server closes the connection rather than allocate.
  CHECK_FALSE(Measure(client.system(), *remote, large).has_value());

  // Admitted (as the version handshake does on both sides), the same message crosses. From a
  // client of its own: the first client's middleman may still hand out the proxy of the closed
  // connection from its cache until that proxy's down message reaches it, a race with no bound.
  Node admitted(options);
  server.transport().Admit(admitted.system().node());
  admitted.transport().Admit(server.system().node());
  remote = admitted.transport().Connect(address);
  REQUIRE_MESSAGE(remote, admitted.system().render(remote.error()));
  CHECK(Measure(admitted.system(), *remote, large) == static_cast<int64_t>(large.size()));
}

}  // namespace
}  // namespace tessera
