// Transport: the connections under CAF's BASP that a networked node publishes and connects through
// (PublishNode and ConnectToNode, cluster/network/network.h), in place of CAF's own plain and
// caf_openssl connections. Every connection, plain TCP or mutual TLS, is guarded:
//   - a peer can make this node allocate at most max_handshake_bytes for one message until it
//     is admitted (it has completed Tessera's version handshake, NodeGate's hello, with this
//     node), and at most max_message_bytes after (cluster/network/connection_guard.h); a message that
//     cannot be allocated closes its connection instead of the process;
//   - a connection whose peer is not admitted within handshake_timeout is closed, and at most
//     kMaxUnadmittedConnections such connections are open at once (a further one is closed as
//     it is accepted);
//   - with TLS, OpenSSL's per-thread error queue is cleared around every call (Note [OpenSSL's
//     error queue is per thread], cluster/network/internal/stream_policies.h), and a failed TLS
//     handshake says why: a peer speaking plain TCP, a certificate of another CA, ...
// Why a connection was closed is logged (at most one line a second) and, for a connection this
// node made, kept for ConnectToNode to report (TakeFailure).
//
// Example (what PublishNode and ConnectToNode do):
//   Transport transport = Transport::Of(system, options);
//   caf::expected<uint16_t> port = transport.Publish(gate, 7001, "127.0.0.1");
//   caf::expected<caf::actor> remote_gate = transport.Connect({"10.0.0.1", 7001});
//   ... the version handshake with *remote_gate succeeded:
//   transport.Admit(remote_gate->node());
//
// Thread-safety: every member is safe from any thread; Publish and Connect block the calling
// (non-actor) thread.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/expected.hpp>
#include <caf/node_id.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cluster/network/network.h"

namespace tessera {

// Connections accepted but not yet admitted, at most, per node.
inline constexpr size_t kMaxUnadmittedConnections = 256;

// Why a connection this node made was closed.
struct ConnectionFailure {
  std::string reason;          // e.g. "the peer speaks plain TCP and this node TLS: ..."
  bool misconfigured = false;  // trying again cannot help: TLS vs plain, a refused certificate
};

class Transport {
 public:
  // The transport of `system`, started by the first call with that call's options (every call
  // of one process passes the same). `system` must have been configured by ConfigureNetwork.
  static Transport Of(caf::actor_system& system, const NetworkOptions& options);

  // Publishes `whom` on bind:`port` (0: any free port); returns the port. CAF's errors.
  caf::expected<uint16_t> Publish(const caf::actor& whom, uint16_t port,
                                  const std::string& bind) const;
  // The actor published at `address`, over a new connection or the one already open to it.
  // CAF's errors; TakeFailure may say more.
  caf::expected<caf::actor> Connect(const NodeAddress& address) const;

  // `peer` completed the version handshake with this node: its connections may carry messages
  // of up to max_message_bytes and stay open.
  void Admit(const caf::node_id& peer) const;

  // Why the last connection this node made to `address` was closed by this node or refused by
  // the peer, if it knows; forgotten once taken.
  std::optional<ConnectionFailure> TakeFailure(const NodeAddress& address) const;

  // Shared with the transport's connections (cluster/network/internal/transport_state.h).
  struct State;

 private:
  explicit Transport(std::shared_ptr<State> state) : state_(std::move(state)) {}

  std::shared_ptr<State> state_;
};

}  // namespace tessera
