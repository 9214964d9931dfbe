// Networked mode's plumbing (docs/design.md §2): how a node's actor system is configured for the
// network (middleman, heartbeats, mutual TLS), and how a node is published and reached — always
// through its NodeGate (actors/base/node_gate.h), so the protocol version is checked before
// anything else is exchanged. Who is where (the cluster spec, TF_CONFIG) is
// tessera/cluster.h.
//
// Security: without TLS, connections are plain TCP and unauthenticated; a node listens on
// 127.0.0.1 unless NetworkOptions::bind says otherwise. With --tls_cert/--tls_key/--tls_ca every
// connection is mutual TLS and a peer whose certificate is not signed by the cluster CA is
// refused in the handshake. Either way, what a peer can make a node allocate is bounded
// (max_message_bytes, and far less before the version handshake; cluster/network/transport.h).
//
// Thread-safety: pure functions, except that ConnectToNode blocks the calling (non-actor) thread.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "actors/base/messages.h"
#include "tessera/cluster.h"

namespace tessera {

// InvalidArgument when only some TLS files are given, one cannot be read or does not load (not
// PEM, a key of another certificate, an encrypted key), the timeouts are not positive (the
// heartbeat must be shorter than the connection timeout), or max_message_bytes is outside
// kMinMaxMessageBytes..kMaxMaxMessageBytes (naming --max_message_bytes).
absl::Status ValidateNetworkOptions(const NetworkOptions& options);

// Loads the middleman (and the OpenSSL module with TLS) into `cfg` and sets heartbeats, the
// connection timeout and the certificate files, and the scheduler a networked node runs best
// with (Note [Scheduler on a networked node]). Call after ConfigureActorSystem,
// before the system is built. Errors as ValidateNetworkOptions (which also loads the TLS files,
// so a bad certificate is a start-up error, not a crash at the first connection).
absl::Status ConfigureNetwork(caf::actor_system_config& cfg, const NetworkOptions& options);

// Spawns a NodeGate named `node` for `service` and publishes it on options.bind:`port` (0: any
// free port) through the node's Transport; a peer the gate lets in is admitted. Returns the
// port. Unavailable when the port cannot be bound, naming `node`, the address and
// `how_to_change_port` ("start tessera ps with another --port"): at once when another process
// listens on it or the address cannot be bound at all; a port held only by connections is
// retried for 10 s first (Note [A busy port]).
absl::StatusOr<uint16_t> PublishNode(caf::actor_system& system, const std::string& node,
                                     caf::actor service, uint16_t port,
                                     const NetworkOptions& options,
                                     absl::string_view how_to_change_port = "",
                                     int32_t version = kProtocolVersion);

// Connects to the node at `address` through the node's Transport (retrying while nobody listens,
// until options.connect_timeout), shakes hands as `self_name`, admits the node and returns its
// service actor. Unavailable naming the address when it cannot be reached in time or the
// connection is dropped during the handshake three times; FailedPrecondition at once, naming
// the address and the reason, when trying again cannot help: one node speaks TLS and the other
// plain TCP, or a certificate is refused; FailedPrecondition naming both versions when the
// protocol versions differ.
// With `expected_node` ("ps 1", "the coordinator"), a node of another name is refused with
// FailedPrecondition naming both (a spec listing the wrong address or --task).
absl::StatusOr<caf::actor> ConnectToNode(caf::actor_system& system, const NodeAddress& address,
                                         const std::string& self_name,
                                         const NetworkOptions& options,
                                         int32_t version = kProtocolVersion,
                                         const std::string& expected_node = "");

}  // namespace tessera
