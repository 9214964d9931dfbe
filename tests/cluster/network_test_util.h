// Test support for the network layer (cluster/network/network.h): a networked node (an actor system
// configured like a `tessera ps` process, with PS nodes it publishes and stops), a blocking
// request helper, a port nobody listens on, a stranger's raw connection and BASP headers, and
// certificates made with the `openssl` command-line tool — the same commands docs/tls.md tells
// users to run.
//
// Several nodes live in one test process, each its own caf::actor_system, so a "remote" request
// really crosses a loopback TCP (or TLS) connection and CAF's serialization.
//
// Thread-safety: the helpers are called from the test's thread.
#pragma once

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "actors/base/error.h"
#include "actors/ps/ps_node_actor.h"
#include "cluster/base/cluster.h"
#include "cluster/network/network.h"

namespace tessera::testing {

// Sends (xs...) to `dest` from a scoped actor and waits (10 s at most) for the reply R, or the
// error reply as a Status.
template <class R, class Handle, class... Ts>
absl::StatusOr<R> Ask(caf::actor_system& system, const Handle& dest, Ts&&... xs) {
  caf::scoped_actor self(system);
  absl::StatusOr<R> out = absl::InternalError("no reply");
  self->request(dest, std::chrono::seconds(10), std::forward<Ts>(xs)...)
      .receive([&](R& reply) { out = std::move(reply); },
               [&](caf::error& err) { out = ErrorToStatus(err); });
  return out;
}

// Sends the shard op `op` to `shard` and waits for its result (Op::Result), or the error.
template <class Op>
absl::StatusOr<typename Op::Result> AskOp(caf::actor_system& system, const shard_actor& shard,
                                          Op op) {
  absl::StatusOr<ShardOpResult> result = Ask<ShardOpResult>(system, shard, ShardOp(std::move(op)));
  if (!result.ok()) return result.status();
  return ResultOf<Op>(*std::move(result));
}

// One node of a test cluster: its own actor system, configured for the network with `options`.
// The PS nodes it publishes are stopped by the destructor (CAF waits for every actor at
// shutdown), so declare the server before its clients: they go first.
class NetworkNode {
 public:
  explicit NetworkNode(NetworkOptions options) : options_(std::move(options)) {
    ConfigureActorSystem(config_, /*threads=*/2);
    const absl::Status configured = ConfigureNetwork(config_, options_);
    REQUIRE_MESSAGE(configured.ok(), configured.ToString());
    system_ = std::make_unique<caf::actor_system>(config_);
  }
  ~NetworkNode() {
    for (const ps_node_actor& node : ps_nodes_) {
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    }
    ps_nodes_.clear();
    system_.reset();
  }
  NetworkNode(const NetworkNode&) = delete;
  NetworkNode& operator=(const NetworkNode&) = delete;

  caf::actor_system& system() { return *system_; }
  const NetworkOptions& options() const { return options_; }

  // Spawns PS node `task` and publishes it (behind a NodeGate speaking `version`) on
  // options().bind:`port_wanted`; returns the port.
  // (port_wanted 0: a free one.)
  // `lease`: how long a lost coordinator's shards are kept (0: dropped at once).
  uint16_t PublishPsNode(int32_t task, int32_t version = kProtocolVersion, uint16_t port_wanted = 0,
                         caf::timespan lease = caf::timespan{0}) {
    ps_nodes_.push_back(SpawnPsNode(*system_, task, lease));
    absl::StatusOr<uint16_t> port =
        PublishNode(*system_, absl::StrCat("ps ", task), caf::actor_cast<caf::actor>(ps_nodes_.back()),
                    port_wanted, options_, /*how_to_change_port=*/"", version);
    REQUIRE_MESSAGE(port.ok(), port.status().ToString());
    return *port;
  }
  // Spawns a standby PS node (kStandbyTask) and publishes it as "standby"; returns the port.
  uint16_t PublishStandby() {
    ps_nodes_.push_back(SpawnPsNode(*system_, kStandbyTask));
    absl::StatusOr<uint16_t> port =
        PublishNode(*system_, "standby", caf::actor_cast<caf::actor>(ps_nodes_.back()), 0,
                    options_);
    REQUIRE_MESSAGE(port.ok(), port.status().ToString());
    return *port;
  }
  const ps_node_actor& ps_node(size_t i) const { return ps_nodes_.at(i); }

  // ConnectToNode to 127.0.0.1:`port` as "test client".
  absl::StatusOr<caf::actor> Connect(uint16_t port, int32_t version = kProtocolVersion) {
    return ConnectToNode(*system_, NodeAddress{"127.0.0.1", port}, "test client", options_,
                         version);
  }

 private:
  NetworkOptions options_;
  caf::actor_system_config config_;  // must outlive system_
  std::unique_ptr<caf::actor_system> system_;
  std::vector<ps_node_actor> ps_nodes_;
};

// A loopback port nobody listens on: one the kernel just handed out and that was closed again.
inline uint16_t UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  socklen_t len = sizeof(addr);
  REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  close(fd);
  return ntohs(addr.sin_port);
}

// A stranger's connection to 127.0.0.1:`port`: a plain socket that sends what the test says.
class RawConnection {
 public:
  explicit RawConnection(uint16_t port) : fd_(socket(AF_INET, SOCK_STREAM, 0)) {
    REQUIRE(fd_ >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    REQUIRE(connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
  }
  ~RawConnection() { close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  void Send(const std::string& bytes) {
    REQUIRE(send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(bytes.size()));
  }
  // Reads (and drops) what the node sends until it closes the connection; whether it did
  // within `limit`.
  bool ClosedWithin(absl::Duration limit) {
    const absl::Time deadline = absl::Now() + limit;
    char buf[4096];
    for (;;) {
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return false;
      timeval tv{};
      tv.tv_sec = static_cast<time_t>(absl::ToInt64Seconds(left));
      tv.tv_usec = static_cast<suseconds_t>(
          absl::ToInt64Microseconds(left - absl::Seconds(tv.tv_sec)));
      setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0) return errno == ECONNRESET;
    }
  }

 private:
  int fd_;
};

// A BASP header (caf/io/basp/header.hpp) announcing `payload_bytes` for `operation`
// (0x01: a client handshake, 0x02: a message to an actor), in network byte order.
inline std::string BaspHeader(uint8_t operation, uint32_t payload_bytes) {
  std::string out(32, '\0');
  out[0] = static_cast<char>(operation);
  for (int i = 0; i < 4; ++i) {
    out[4 + i] = static_cast<char>((payload_bytes >> (8 * (3 - i))) & 0xFF);
  }
  out[31] = 1;  // a destination actor, as a message needs
  return out;
}

// A fresh directory under the system's temporary directory, removed with its content.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& prefix) {
    std::string pattern = std::filesystem::temp_directory_path() / (prefix + "-XXXXXX");
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Certificate authorities and node certificates made with the `openssl` tool in a scratch
// directory: EC P-256 keys, valid for one day. The commands are docs/tls.md's.
//
// Example:
//   TestCertificates certs;
//   certs.MakeCa("ca");                  // ca.pem, ca.key
//   certs.MakeNode("ps0", "ca");         // ps0.pem, ps0.key, signed by ca
//   NetworkOptions options = certs.Options("ps0", "ca");
class TestCertificates {
 public:
  TestCertificates() : dir_("tessera-tls") {
    // The extensions of a node certificate: every node both listens and connects.
    std::ofstream ext(dir_.File("node.ext"));
    ext << "basicConstraints = CA:FALSE\n"
           "keyUsage = critical, digitalSignature\n"
           "extendedKeyUsage = serverAuth, clientAuth\n"
           "subjectAltName = DNS:localhost, IP:127.0.0.1\n";
    REQUIRE(ext.good());
  }

  // A self-signed CA `name`: name.pem (the certificate every node trusts) and name.key.
  void MakeCa(const std::string& name) {
    Run(absl::StrCat("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                     "-days 1 -subj '/CN=Tessera test CA ",
                     name, "' -keyout ", name, ".key -out ", name, ".pem"));
  }

  // A node key and certificate signed by CA `ca`: name.key, name.pem.
  void MakeNode(const std::string& name, const std::string& ca) {
    Run(absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes "
                     "-subj '/CN=",
                     name, "' -keyout ", name, ".key -out ", name, ".csr"));
    Run(absl::StrCat("openssl x509 -req -in ", name, ".csr -CA ", ca, ".pem -CAkey ", ca,
                     ".key -CAcreateserial -days 1 -extfile node.ext -out ", name, ".pem"));
  }

  // Mutual TLS as node `name`, trusting CA `ca`; loopback only.
  NetworkOptions Options(const std::string& name, const std::string& ca) const {
    NetworkOptions options;
    options.tls_cert = File(name + ".pem");
    options.tls_key = File(name + ".key");
    options.tls_ca = File(ca + ".pem");
    return options;
  }

  std::string File(const std::string& name) const { return dir_.File(name); }

  // Runs shell `command` in the scratch directory; its output goes to openssl.log, shown when it
  // fails.
  void Run(const std::string& command) {
    const std::string line =
        absl::StrCat("cd '", dir_.path(), "' && ", command, " >>openssl.log 2>&1");
    const int rc = std::system(line.c_str());
    std::ifstream log(dir_.File("openssl.log"));
    std::stringstream text;
    text << log.rdbuf();
    REQUIRE_MESSAGE(rc == 0, command, " failed (is the openssl tool installed?):\n",
                    text.str());
  }

 private:

  ScratchDir dir_;
};

}  // namespace tessera::testing
