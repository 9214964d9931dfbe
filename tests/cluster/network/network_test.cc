// The network layer (cluster/network/network.h): the network options, then real
// connections over loopback between actor systems in this process — the version handshake,
// requests and multi-MiB tensors crossing the wire, an unreachable node, what a stranger or a
// peer can make a node allocate or hold (cluster/network/transport.h) — and mutual TLS with
// certificates made by `openssl` at test time: nodes of the cluster CA talk; a client of another
// CA, a plain TCP client, and a server of another CA are refused, saying why; one connection's
// end does not end the others.
#include "cluster/network/network.h"

#include <doctest/doctest.h>

#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actors/base/messages.h"
#include "actors/ps/ps_node_actor.h"
#include "actors/ps/shard_actor.h"
#include "cluster/network/transport.h"
#include "core/ps/shard_state.h"
#include "tessera/tensor.h"
#include "tests/cluster/network_test_util.h"

namespace tessera {
namespace {

using testing::Ask;
using testing::AskOp;
using testing::NetworkNode;
using testing::TestCertificates;
using testing::UnusedPort;

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

// -- Network options ----------------------------------------------------------------------------

TEST_CASE("network: options need all three TLS files or none, readable, and sane timeouts") {
  TestCertificates certs;
  certs.MakeCa("ca");
  certs.MakeNode("node", "ca");
  const NetworkOptions tls = certs.Options("node", "ca");
  CHECK(ValidateNetworkOptions(NetworkOptions{}).ok());
  CHECK(ValidateNetworkOptions(tls).ok());

  auto check_invalid = [](const NetworkOptions& options, absl::string_view contains) {
    const absl::Status status = ValidateNetworkOptions(options);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(status.message(), contains), status);
  };
  SUBCASE("partial TLS flags") {
    for (int mask = 1; mask < 7; ++mask) {
      CAPTURE(mask);
      NetworkOptions options;
      if (mask & 1) options.tls_cert = tls.tls_cert;
      if (mask & 2) options.tls_key = tls.tls_key;
      if (mask & 4) options.tls_ca = tls.tls_ca;
      check_invalid(options, "--tls_cert, --tls_key and --tls_ca");
    }
  }
  SUBCASE("unreadable TLS files") {
    for (std::string NetworkOptions::*file :
         {&NetworkOptions::tls_cert, &NetworkOptions::tls_key, &NetworkOptions::tls_ca}) {
      NetworkOptions options = tls;
      options.*file = certs.File("missing.pem");
      check_invalid(options, certs.File("missing.pem"));
    }
  }
  SUBCASE("TLS files that do not load") {
    // CAF would load them only at the first connection, and end the process there.
    certs.MakeCa("other-ca");
    certs.MakeNode("other", "other-ca");
    certs.Run("echo 'not a certificate' > garbage.pem");
    certs.Run("openssl pkey -in node.key -aes256 -passout pass:secret -out encrypted.key");
    NetworkOptions options = tls;
    options.tls_cert = certs.File("garbage.pem");
    check_invalid(options, "--tls_cert " + certs.File("garbage.pem") + " is not a PEM");
    options = tls;
    options.tls_cert = certs.File("node.key");
    check_invalid(options, "is not a PEM certificate");
    options = tls;
    options.tls_key = certs.File("other.key");
    check_invalid(options, "--tls_key " + certs.File("other.key") + " is not an unencrypted PEM");
    options = tls;
    options.tls_key = certs.File("encrypted.key");
    check_invalid(options, "--tls_key " + certs.File("encrypted.key"));
    options = tls;
    options.tls_ca = certs.File("garbage.pem");
    check_invalid(options, "--tls_ca " + certs.File("garbage.pem") + " is not a PEM CA");
  }
  SUBCASE("bad timeouts") {
    NetworkOptions options;
    options.connect_timeout = absl::ZeroDuration();
    check_invalid(options, "timeouts");
    options = NetworkOptions{};
    options.heartbeat_interval = -absl::Milliseconds(1);
    check_invalid(options, "timeouts");
    options = NetworkOptions{};
    options.connection_timeout = options.heartbeat_interval;  // not longer than the heartbeat
    check_invalid(options, "heartbeat shorter");
    options = NetworkOptions{};
    options.handshake_timeout = absl::ZeroDuration();
    check_invalid(options, "timeouts");
  }
  SUBCASE("a message limit outside 1 MiB .. 4 GiB - 1") {
    NetworkOptions options;
    CHECK(ValidateNetworkOptions(options).ok());  // 1 GiB by default
    options.max_message_bytes = kMinMaxMessageBytes - 1;
    check_invalid(options, "--max_message_bytes=1048575 is outside");
    options.max_message_bytes = kMaxMaxMessageBytes + 1;
    check_invalid(options, "--max_message_bytes=4294967296 is outside");
    options.max_message_bytes = kMaxMaxMessageBytes;
    CHECK(ValidateNetworkOptions(options).ok());
  }
  SUBCASE("ConfigureNetwork refuses what ValidateNetworkOptions refuses") {
    caf::actor_system_config cfg;
    NetworkOptions options;
    options.tls_cert = tls.tls_cert;
    CHECK(ConfigureNetwork(cfg, options).code() == absl::StatusCode::kInvalidArgument);
  }
}

// -- Over loopback ------------------------------------------------------------------------------

// A 1024 x 1024 float32 shard (4 MiB) with random initial values.
ShardSpec BigShardSpec() {
  ShardSpec spec;
  spec.variable = "big";
  spec.full_shape = Shape{1024, 1024};
  spec.rows = 1024;
  spec.initializer = InitializerSpec{"random_uniform", {{"minval", -3.0}, {"maxval", 3.0}}, 17};
  return spec;
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), sizeof(float) * static_cast<size_t>(a.size())) == 0;
}

// Pings the PS node behind `service`, creates the big shard on it, reads it back and compares it
// with the same shard built locally, then assigns a value full of awkward floats and reads that
// back: bit-exact both ways.
void CheckRequestsCrossIntact(caf::actor_system& client, const caf::actor& service) {
  const auto node = caf::actor_cast<ps_node_actor>(service);
  CHECK(Ask<pong_atom>(client, node, ping_atom::value).ok());

  const ShardSpec spec = BigShardSpec();
  absl::StatusOr<shard_actor> shard = Ask<shard_actor>(client, node, create_shard_atom::value, spec, caf::actor());
  REQUIRE_MESSAGE(shard.ok(), shard.status().ToString());
  const Tensor want_initial = ShardState::Create(spec)->Read();
  absl::StatusOr<ShardValue> initial = AskOp(client, *shard, ReadOp{});
  REQUIRE_MESSAGE(initial.ok(), initial.status().ToString());
  CHECK(SameBytes(initial->value, want_initial));

  Tensor assigned(Shape{1024, 1024});
  for (int64_t i = 0; i < assigned.size(); ++i) {
    assigned.values()[i] = static_cast<float>(i % 4099) * 0.37f - 700.0f;
  }
  assigned.values()[0] = -0.0f;
  assigned.values()[1] = std::numeric_limits<float>::infinity();
  assigned.values()[2] = std::numeric_limits<float>::denorm_min();
  assigned.values()[assigned.size() - 1] = std::numeric_limits<float>::max();
  absl::StatusOr<ShardVersion> version =
      AskOp(client, *shard, AssignOp{AssignKind::kAssign, assigned});
  REQUIRE_MESSAGE(version.ok(), version.status().ToString());
  CHECK(version->version == 1);
  absl::StatusOr<ShardValue> read = AskOp(client, *shard, ReadOp{});
  REQUIRE_MESSAGE(read.ok(), read.status().ToString());
  CHECK(read->version == 1);
  CHECK(SameBytes(read->value, assigned));

  // Errors cross as values too.
  absl::StatusOr<shard_actor> again = Ask<shard_actor>(client, node, create_shard_atom::value, spec, caf::actor());
  CHECK(again.status().code() == absl::StatusCode::kAlreadyExists);
}

TEST_CASE("network: a client reaches a published PS node and a 4 MiB tensor crosses intact") {
  NetworkNode server(NetworkOptions{});
  const uint16_t port = server.PublishPsNode(0);
  NetworkNode client(NetworkOptions{});
  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  CheckRequestsCrossIntact(client.system(), *service);

  // The shard lives on the server's node.
  absl::StatusOr<std::vector<std::string>> names =
      Ask<std::vector<std::string>>(server.system(), server.ps_node(0), list_atom::value);
  REQUIRE(names.ok());
  CHECK(*names == std::vector<std::string>{"big"});
}

TEST_CASE("network: a node of another protocol version is refused, naming both versions") {
  const int32_t newer = kProtocolVersion + 1;
  NetworkNode server(NetworkOptions{});
  const uint16_t port = server.PublishPsNode(0, /*version=*/newer);
  NetworkNode client(NetworkOptions{});

  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_FALSE(service.ok());
  CHECK(service.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(Contains(service.status().message(), absl::StrCat("version ", newer)),
                service.status());
  CHECK_MESSAGE(Contains(service.status().message(), absl::StrCat("version ", kProtocolVersion)),
                service.status());

  // A client of the server's version is served.
  service = client.Connect(port, /*version=*/newer);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  CHECK(Ask<pong_atom>(client.system(), caf::actor_cast<ps_node_actor>(*service), ping_atom::value)
            .ok());
}

TEST_CASE("network: a node that is not the one the spec names is refused, naming both") {
  NetworkNode server(NetworkOptions{});
  const uint16_t port = server.PublishPsNode(0);
  NetworkNode client(NetworkOptions{});
  const NodeAddress address{"127.0.0.1", port};

  absl::StatusOr<caf::actor> service = ConnectToNode(client.system(), address, "test client",
                                                     client.options(), kProtocolVersion, "ps 1");
  REQUIRE_FALSE(service.ok());
  CHECK(service.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_MESSAGE(Contains(service.status().message(), "is ps 0, not ps 1"), service.status());

  // The node it is, by name, is served.
  service = ConnectToNode(client.system(), address, "test client", client.options(),
                          kProtocolVersion, "ps 0");
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  CHECK(Ask<pong_atom>(client.system(), caf::actor_cast<ps_node_actor>(*service), ping_atom::value)
            .ok());
}

TEST_CASE("network: a port nobody listens on is Unavailable naming the address after the timeout") {
  NetworkOptions options;
  options.connect_timeout = absl::Milliseconds(300);
  NetworkNode client(options);
  const uint16_t port = UnusedPort();
  const absl::Time start = absl::Now();
  const absl::StatusOr<caf::actor> service = client.Connect(port);
  const absl::Duration took = absl::Now() - start;
  REQUIRE_FALSE(service.ok());
  CHECK(service.status().code() == absl::StatusCode::kUnavailable);
  CHECK_MESSAGE(Contains(service.status().message(), absl::StrCat("127.0.0.1:", port)),
                service.status());
  CHECK(took >= absl::Milliseconds(300));  // it kept trying until the timeout
  CHECK(took < absl::Seconds(3));
}

TEST_CASE("network: a port another node listens on fails at once, naming it and the way out") {
  NetworkNode first{NetworkOptions{}};
  const uint16_t port = first.PublishPsNode(0);
  NetworkNode second{NetworkOptions{}};
  const ps_node_actor node = SpawnPsNode(second.system(), 1);
  const absl::Time start = absl::Now();
  const absl::StatusOr<uint16_t> published =
      PublishNode(second.system(), "ps 1", caf::actor_cast<caf::actor>(node), port,
                  second.options(), "start tessera ps with another --port");
  const absl::Duration took = absl::Now() - start;
  caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  REQUIRE_FALSE(published.ok());
  CHECK(published.status().code() == absl::StatusCode::kUnavailable);
  CHECK(published.status().message() ==
        absl::StrCat("ps 1 cannot listen on 127.0.0.1:", port, ": another process listens on "
                     "port ", port, " (`ss -ltnp 'sport = :", port, "'` names it); start tessera "
                     "ps with another --port"));
  CHECK(took < absl::Seconds(1));  // not the 10 s a port held by connections is given
}

TEST_CASE("network: a port held only by a connection is waited for, then listened on") {
  // A connected socket whose local port is the one the node wants (as a peer reconnecting to a
  // restarted node's address can take it), closed 600 ms later.
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int holder = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(listener >= 0);
  REQUIRE(holder >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(addr);
  REQUIRE(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(listen(listener, 1) == 0);
  REQUIRE(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  const sockaddr_in server = addr;
  addr.sin_port = 0;
  REQUIRE(bind(holder, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  REQUIRE(getsockname(holder, reinterpret_cast<sockaddr*>(&addr), &length) == 0);
  const uint16_t port = ntohs(addr.sin_port);
  REQUIRE(connect(holder, reinterpret_cast<const sockaddr*>(&server), sizeof(server)) == 0);
  // Closed with a reset: no TIME_WAIT (which a socket without SO_REUSEADDR leaves in the way).
  const linger reset{1, 0};
  REQUIRE(setsockopt(holder, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)) == 0);
  std::thread release([holder, listener] {
    std::this_thread::sleep_for(std::chrono::milliseconds(600));
    close(holder);
    close(listener);
  });
  NetworkNode node{NetworkOptions{}};
  const absl::Time start = absl::Now();
  const uint16_t published = node.PublishPsNode(0, kProtocolVersion, port);
  const absl::Duration took = absl::Now() - start;
  release.join();
  CHECK(published == port);
  CHECK(took >= absl::Milliseconds(500));  // it waited for the connection to close
  NetworkNode client{NetworkOptions{}};
  CHECK(client.Connect(port).ok());
}

// -- Mutual TLS ---------------------------------------------------------------------------------

// The cluster CA with a server and a client certificate, and a rogue CA with a node of its own.
void MakeClusterAndRogueCertificates(TestCertificates& certs) {
  certs.MakeCa("cluster-ca");
  certs.MakeNode("server", "cluster-ca");
  certs.MakeNode("client", "cluster-ca");
  certs.MakeCa("rogue-ca");
  certs.MakeNode("rogue", "rogue-ca");
}

// How long a refused client keeps retrying; a refusal must come back within kRefusedWithin.
constexpr absl::Duration kRefusedConnectTimeout = absl::Milliseconds(300);
constexpr absl::Duration kRefusedWithin = absl::Seconds(3);

// ConnectToNode from a fresh node with `options` to `port`, which must fail with `code` within
// kRefusedWithin, naming the address and saying `why`.
void CheckRefused(NetworkOptions options, uint16_t port, absl::StatusCode code,
                  absl::string_view why) {
  options.connect_timeout = kRefusedConnectTimeout;
  NetworkNode client(options);
  const absl::Time start = absl::Now();
  const absl::StatusOr<caf::actor> service = client.Connect(port);
  const absl::Duration took = absl::Now() - start;
  REQUIRE_FALSE(service.ok());
  CHECK_MESSAGE(service.status().code() == code, service.status());
  CHECK_MESSAGE(Contains(service.status().message(), absl::StrCat("127.0.0.1:", port)),
                service.status());
  CHECK_MESSAGE(Contains(service.status().message(), why), service.status());
  CHECK(took < kRefusedWithin);
}

TEST_CASE("network TLS: nodes with certificates of the cluster CA connect and talk") {
  TestCertificates certs;
  MakeClusterAndRogueCertificates(certs);
  NetworkNode server(certs.Options("server", "cluster-ca"));
  const uint16_t port = server.PublishPsNode(0);
  NetworkNode client(certs.Options("client", "cluster-ca"));
  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  CheckRequestsCrossIntact(client.system(), *service);
}

TEST_CASE("network TLS: a client whose certificate is of another CA is refused") {
  TestCertificates certs;
  MakeClusterAndRogueCertificates(certs);
  NetworkNode server(certs.Options("server", "cluster-ca"));
  const uint16_t port = server.PublishPsNode(0);

  // Trusting the cluster CA does not help a client whose own certificate is not of it; nor
  // does trusting the CA that signed it.
  // Trying again cannot help: FailedPrecondition at once, saying whose certificate failed.
  CheckRefused(certs.Options("rogue", "cluster-ca"), port, absl::StatusCode::kFailedPrecondition,
               "the peer refused this node's certificate");
  CheckRefused(certs.Options("rogue", "rogue-ca"), port, absl::StatusCode::kFailedPrecondition,
               "certificate");

  // The server kept serving: a client of the cluster CA gets in and finds nothing changed.
  NetworkNode client(certs.Options("client", "cluster-ca"));
  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  absl::StatusOr<std::vector<std::string>> names = Ask<std::vector<std::string>>(
      client.system(), caf::actor_cast<ps_node_actor>(*service), list_atom::value);
  REQUIRE_MESSAGE(names.ok(), names.status().ToString());
  CHECK(names->empty());
}

TEST_CASE("network TLS: a plain TCP client without a certificate is refused") {
  TestCertificates certs;
  MakeClusterAndRogueCertificates(certs);
  NetworkNode server(certs.Options("server", "cluster-ca"));
  const uint16_t port = server.PublishPsNode(0);
  // A TLS node says nothing to a peer that is not speaking TLS, so the plain client can only
  // guess (its retries take a moment, not the connect timeout).
  CheckRefused(NetworkOptions{}, port, absl::StatusCode::kUnavailable,
               "it speaks TLS and this node plain TCP");

  NetworkNode client(certs.Options("client", "cluster-ca"));
  CHECK(client.Connect(port).ok());
}

TEST_CASE("network TLS: a client refuses a server whose certificate is of another CA") {
  TestCertificates certs;
  MakeClusterAndRogueCertificates(certs);
  // The rogue server trusts the cluster CA, so only the client's check can refuse it.
  NetworkNode rogue_server(certs.Options("rogue", "cluster-ca"));
  const uint16_t port = rogue_server.PublishPsNode(0);
  CheckRefused(certs.Options("client", "cluster-ca"), port, absl::StatusCode::kFailedPrecondition,
               "the peer's certificate is not signed by this node's --tls_ca");
}

TEST_CASE("network TLS: a TLS client is refused by a plain TCP node") {
  TestCertificates certs;
  MakeClusterAndRogueCertificates(certs);
  NetworkNode plain_server(NetworkOptions{});
  const uint16_t port = plain_server.PublishPsNode(0);
  CheckRefused(certs.Options("client", "cluster-ca"), port, absl::StatusCode::kFailedPrecondition,
               "the peer speaks plain TCP and this node TLS");
}

TEST_CASE("network TLS: a connection that closes leaves the node's other TLS connections working") {
  // OpenSSL's error queue is per thread and every connection of a node shares one I/O thread:
  // a connection that ended with an error once left that error behind for the next read of
  // another, which then failed too (Note [OpenSSL's error queue is per thread]).
  TestCertificates certs;
  MakeClusterAndRogueCertificates(certs);
  NetworkNode server(certs.Options("server", "cluster-ca"));
  const uint16_t port = server.PublishPsNode(0);
  NetworkNode client(certs.Options("client", "cluster-ca"));
  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  const auto node = caf::actor_cast<ps_node_actor>(*service);
  for (int round = 0; round < 3; ++round) {
    {
      // Another node comes, talks and goes without a TLS goodbye (its socket just closes).
      NetworkNode passer_by(certs.Options("client", "cluster-ca"));
      absl::StatusOr<caf::actor> other = passer_by.Connect(port);
      REQUIRE_MESSAGE(other.ok(), other.status().ToString());
      CHECK(Ask<pong_atom>(passer_by.system(), caf::actor_cast<ps_node_actor>(*other),
                           ping_atom::value)
                .ok());
    }
    // A rogue knocks and is refused: an error on the server's side of the handshake.
    NetworkOptions rogue = certs.Options("rogue", "cluster-ca");
    rogue.connect_timeout = kRefusedConnectTimeout;
    CHECK_FALSE(NetworkNode(rogue).Connect(port).ok());
    absl::SleepFor(absl::Milliseconds(100));
    // The first client's connection is still up and serving.
    const absl::StatusOr<pong_atom> pong = Ask<pong_atom>(client.system(), node, ping_atom::value);
    CHECK_MESSAGE(pong.ok(), "round ", round, ": ", pong.status());
  }
}

// -- What a peer can make a node allocate or hold --------------------------------------------

TEST_CASE("network: a stranger's message before the version handshake is at most 64 KiB") {
  NetworkNode server(NetworkOptions{});
  const uint16_t port = server.PublishPsNode(0);
  // A forged header announcing 4 GiB, and a message of 1 MiB: both closed at once, never read.
  for (const uint32_t announced : {0xFFFFFFF0u, 1u << 20}) {
    testing::RawConnection stranger(port);
    stranger.Send(testing::BaspHeader(announced > (1u << 20) ? 0x01 : 0x02, announced));
    CHECK_MESSAGE(stranger.ClosedWithin(absl::Seconds(2)), "announced ", announced);
  }
  // The node serves on.
  NetworkNode client(NetworkOptions{});
  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  CHECK(Ask<pong_atom>(client.system(), caf::actor_cast<ps_node_actor>(*service), ping_atom::value)
            .ok());
}

TEST_CASE("network: a message over max_message_bytes closes its connection and the node serves on") {
  NetworkOptions small;
  small.max_message_bytes = kMinMaxMessageBytes;  // 1 MiB: the big shard (4 MiB) is too large
  NetworkNode server(small);
  const uint16_t port = server.PublishPsNode(0);
  const ShardSpec spec = BigShardSpec();
  {
    NetworkNode client(NetworkOptions{});
    absl::StatusOr<caf::actor> service = client.Connect(port);
    REQUIRE_MESSAGE(service.ok(), service.status().ToString());
    const auto node = caf::actor_cast<ps_node_actor>(*service);
    absl::StatusOr<shard_actor> shard =
        Ask<shard_actor>(client.system(), node, create_shard_atom::value, spec, caf::actor());
    REQUIRE_MESSAGE(shard.ok(), shard.status().ToString());
    // Small messages pass (and 4 MiB the other way: the client's limit is the default).
    CHECK(AskOp(client.system(), *shard, ReadOp{}).ok());
    // A 4 MiB assignment does not reach the shard: the server closes the connection, which the
    // client sees as its proxies of the server's actors going down.
    caf::scoped_actor self(client.system());
    self->monitor(node);
    self->send(*shard, ShardOp(AssignOp{AssignKind::kAssign, Tensor(Shape{1024, 1024})}));
    bool closed = false;
    self->receive([&](caf::down_msg& down) { closed = down.source == node.address(); },
                  caf::after(std::chrono::seconds(5)) >> [] {});
    CHECK(closed);
  }
  // A new client finds the node serving and the shard as it was.
  NetworkNode client(NetworkOptions{});
  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  absl::StatusOr<shard_actor> shard = Ask<shard_actor>(
      client.system(), caf::actor_cast<ps_node_actor>(*service), lookup_atom::value,
      std::string("big"));
  REQUIRE_MESSAGE(shard.ok(), shard.status().ToString());
  absl::StatusOr<ShardValue> read = AskOp(client.system(), *shard, ReadOp{});
  REQUIRE_MESSAGE(read.ok(), read.status().ToString());
  CHECK(read->version == 0);
  CHECK(SameBytes(read->value, ShardState::Create(spec)->Read()));
}

TEST_CASE("network: a connection without a version handshake is closed after handshake_timeout") {
  NetworkOptions options;
  options.handshake_timeout = absl::Milliseconds(300);
  NetworkNode server(options);
  const uint16_t port = server.PublishPsNode(0);
  const absl::Time start = absl::Now();
  testing::RawConnection silent(port);
  testing::RawConnection half(port);
  half.Send(testing::BaspHeader(0x01, 40).substr(0, 16));  // half a header, then nothing
  CHECK(silent.ClosedWithin(absl::Seconds(3)));
  CHECK(half.ClosedWithin(absl::Seconds(3)));
  CHECK(absl::Now() - start >= absl::Milliseconds(250));
  // A peer that says hello in time stays.
  NetworkNode client(options);
  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
  absl::SleepFor(absl::Milliseconds(600));
  CHECK(Ask<pong_atom>(client.system(), caf::actor_cast<ps_node_actor>(*service), ping_atom::value)
            .ok());
}

TEST_CASE("network: a peer refused for its protocol version is disconnected at the deadline") {
  NetworkOptions options;
  options.handshake_timeout = absl::Milliseconds(300);
  NetworkNode server(options);
  const uint16_t port = server.PublishPsNode(0, /*version=*/kProtocolVersion + 1);
  NetworkNode client(options);
  REQUIRE(client.Connect(port).status().code() == absl::StatusCode::kFailedPrecondition);
  // The refused connection is not kept: the gate's proxy on the client goes down with it.
  caf::expected<caf::actor> gate =
      Transport::Of(client.system(), options).Connect(NodeAddress{"127.0.0.1", port});
  if (gate) {  // (the connection may already be gone, and then a new one was just made)
    caf::scoped_actor self(client.system());
    self->monitor(*gate);
    bool down = false;
    self->receive([&](caf::down_msg&) { down = true; },
                  caf::after(std::chrono::seconds(3)) >> [] {});
    CHECK(down);
  }
}

TEST_CASE("network: connections waiting for their version handshake are capped") {
  NetworkOptions options;
  options.handshake_timeout = absl::Seconds(2);
  NetworkNode server(options);
  const uint16_t port = server.PublishPsNode(0);
  std::vector<std::unique_ptr<testing::RawConnection>> waiting;
  for (size_t i = 0; i < kMaxUnadmittedConnections; ++i) {
    waiting.push_back(std::make_unique<testing::RawConnection>(port));
  }
  // One more is closed as soon as it is accepted, long before the others' deadline.
  absl::SleepFor(absl::Milliseconds(200));
  testing::RawConnection one_too_many(port);
  CHECK(one_too_many.ClosedWithin(absl::Milliseconds(1500)));
  // Once their deadline has passed, a peer gets in again.
  CHECK(waiting.back()->ClosedWithin(absl::Seconds(4)));
  NetworkNode client(options);
  absl::StatusOr<caf::actor> service = client.Connect(port);
  REQUIRE_MESSAGE(service.ok(), service.status().ToString());
}

}  // namespace
}  // namespace tessera
