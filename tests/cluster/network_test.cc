// The network layer (cluster/network.h): the cluster spec and the network options, then real
// connections over loopback between actor systems in this process — the version handshake,
// requests and multi-MiB tensors crossing the wire, an unreachable node, what a stranger or a
// peer can make a node allocate or hold (cluster/transport.h) — and mutual TLS with
// certificates made by `openssl` at test time: nodes of the cluster CA talk; a client of another
// CA, a plain TCP client, and a server of another CA are refused, saying why; one connection's
// end does not end the others.
#include "cluster/network.h"

#include <doctest/doctest.h>

#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actors/messages.h"
#include "actors/ps_node_actor.h"
#include "actors/shard_actor.h"
#include "cluster/transport.h"
#include "core/shard_state.h"
#include "core/tensor.h"
#include "tests/cluster/network_test_util.h"

namespace tessera {
namespace {

using testing::Ask;
using testing::AskOp;
using testing::NetworkNode;
using testing::ScratchDir;
using testing::TestCertificates;
using testing::UnusedPort;

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

// -- The cluster spec ---------------------------------------------------------------------------

TEST_CASE("network: a cluster spec lists its ps, worker and coordinator addresses in order") {
  absl::StatusOr<ClusterSpec> spec = ParseClusterSpec(R"({"cluster": {
      "ps": ["10.0.0.1:7001", "10.0.0.2:7002"],
      "worker": ["10.0.0.3:7101", "w4:7102", "w5:7103"],
      "coordinator": ["10.0.0.5:7000"]}})");
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  REQUIRE(spec->ps.size() == 2);
  CHECK(spec->ps[0].ToString() == "10.0.0.1:7001");
  CHECK(spec->ps[1].ToString() == "10.0.0.2:7002");
  REQUIRE(spec->workers.size() == 3);
  CHECK(spec->workers[1].host == "w4");
  CHECK(spec->workers[2].port == 7103);
  CHECK(spec->coordinator.ToString() == "10.0.0.5:7000");
  CHECK(spec->ps_standby.empty());

  // Standby PS processes, optional.
  spec = ParseClusterSpec(R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"],
      "coordinator": ["c:3"], "ps_standby": ["s1:7009", "s2:7009"]}})");
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  REQUIRE(spec->ps_standby.size() == 2);
  CHECK(spec->ps_standby[1].ToString() == "s2:7009");

  // TF_CONFIG's "chief" names the coordinator too.
  spec = ParseClusterSpec(
      R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "chief": ["c:3"]}, "task": {}})");
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  CHECK(spec->coordinator.ToString() == "c:3");
}

TEST_CASE("network: a malformed cluster spec is InvalidArgument saying what is wrong") {
  struct Case {
    const char* json;
    const char* error_contains;
  };
  const Case cases[] = {
      {"", "not valid JSON: parse error at line 1, column 1"},
      {R"({"cluster": {"ps": ["a:1"],)", "not valid JSON: parse error at line 1, column 28"},
      {"{\n  \"cluster\": {\n    \"ps\": [\"a:1\"]\n    \"worker\": []}}",
       "parse error at line 4, column 12"},  // a missing comma: the line after it
      {R"(["a:1"])", "not a JSON object but an array"},
      {R"("a:1")", "not a JSON object but a string"},
      {R"({"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3"]})", "no \"cluster\""},
      {R"({"cluster": ["a:1"]})", "no \"cluster\""},
      {R"({"cluster": {"worker": ["b:2"], "coordinator": ["c:3"]}})", "no \"ps\""},
      {R"({"cluster": {"ps": [], "worker": ["b:2"], "coordinator": ["c:3"]}})", "no \"ps\""},
      {R"({"cluster": {"ps": ["a:1"], "coordinator": ["c:3"]}})", "no \"worker\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": [], "coordinator": ["c:3"]}})", "no \"worker\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"]}})", "exactly one \"coordinator\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": []}})", "has 0"},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3", "d:4"]}})",
       "has 2"},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3"],
                       "chief": ["d:4"]}})",
       "has 2"},
      {R"({"cluster": {"ps": "a:1", "worker": ["b:2"], "coordinator": ["c:3"]}})",
       "\"ps\" must be a list"},
      {R"({"cluster": {"ps": ["host"], "worker": ["b:2"], "coordinator": ["c:3"]}})",
       "\"ps\": \"host\" is not a \"host:port\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["host:0"], "coordinator": ["c:3"]}})",
       "\"worker\": \"host:0\""},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["host:70000"]}})",
       "\"coordinator\": \"host:70000\""},
      {R"({"cluster": {"ps": [":80"], "worker": ["b:2"], "coordinator": ["c:3"]}})",
       "\":80\" is not"},
      {R"({"cluster": {"ps": ["a:1", 7001], "worker": ["b:2"], "coordinator": ["c:3"]}})",
       "\"ps\" holds 7001, not a string"},
      {R"({"cluster": {"ps": ["a:1"], "worker": [null], "coordinator": ["c:3"]}})",
       "\"worker\" holds null, not a string"},
      {R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3"],
                       "ps_standby": ["s:0"]}})",
       "\"ps_standby\": \"s:0\""},
  };
  for (const Case& c : cases) {
    CAPTURE(c.json);
    const absl::StatusOr<ClusterSpec> spec = ParseClusterSpec(c.json);
    REQUIRE_FALSE(spec.ok());
    CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(spec.status().message(), "cluster spec"), spec.status());
    CHECK_MESSAGE(Contains(spec.status().message(), c.error_contains), spec.status());
  }
}

TEST_CASE("network: ReadClusterSpec reads a file, and a missing file is NotFound naming it") {
  ScratchDir dir("tessera-spec");
  const std::string path = dir.File("cluster.json");
  {
    std::ofstream out(path);
    out << R"({"cluster": {"ps": ["a:1"], "worker": ["b:2"], "coordinator": ["c:3"]}})";
  }
  absl::StatusOr<ClusterSpec> spec = ReadClusterSpec(path);
  REQUIRE_MESSAGE(spec.ok(), spec.status().ToString());
  CHECK(spec->ps[0].ToString() == "a:1");

  const std::string missing = dir.File("missing.json");
  spec = ReadClusterSpec(missing);
  CHECK(spec.status().code() == absl::StatusCode::kNotFound);
  CHECK_MESSAGE(Contains(spec.status().message(), missing), spec.status());

  // A bad file's error names the file.
  {
    std::ofstream out(path);
    out << R"({"cluster": {"ps": ["a:1"]}})";
  }
  spec = ReadClusterSpec(path);
  CHECK(spec.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_MESSAGE(Contains(spec.status().message(), path), spec.status());
}

TEST_CASE("network: ParseNodeAddress takes host:port with a port in 1..65535") {
  struct Good {
    const char* text;
    const char* host;
    uint16_t port;
  };
  for (const Good& g : {Good{"10.0.0.1:7001", "10.0.0.1", 7001}, Good{"localhost:1", "localhost", 1},
                        Good{"ps-0.example.com:65535", "ps-0.example.com", 65535}}) {
    CAPTURE(g.text);
    absl::StatusOr<NodeAddress> address = ParseNodeAddress(g.text);
    REQUIRE_MESSAGE(address.ok(), address.status().ToString());
    CHECK(address->host == g.host);
    CHECK(address->port == g.port);
    CHECK(address->ToString() == g.text);
  }
  for (const char* bad : {"", "host", "host:", "host:0", "host:70000", "host:65536", ":80",
                          "host:-1", "host:8x", "host:http"}) {
    CAPTURE(bad);
    const absl::StatusOr<NodeAddress> address = ParseNodeAddress(bad);
    REQUIRE_FALSE(address.ok());
    CHECK(address.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(Contains(address.status().message(), absl::StrCat("\"", bad, "\"")),
                  address.status());
  }
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
