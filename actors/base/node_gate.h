// NodeGate: the one actor a networked node publishes on its port, and the version handshake that
// comes before anything else crosses the connection.
//
// A peer connects, sends (hello_atom, its protocol version, its name) and gets back (the node's
// version, the node's name, its service actor: a ps_node_actor or the coordinator_actor), so it
// can also check that the address it dialled is the node it meant. A peer of another
// version gets a FailedPrecondition naming both versions instead, so no message of an
// incompatible build ever reaches a shard. A peer let in is admitted: until then the transport
// keeps its messages small and closes its connections after a deadline. The gate's own interface is the one thing that never
// changes between versions; it is dynamically typed so that connecting to it does not compare
// actor interfaces first (which would fail with CAF's opaque "unexpected interface" error).
//
// Thread-safety: an actor; SpawnNodeGate is safe from any thread.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/node_id.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "actors/base/messages.h"

namespace tessera {

// Called with the node of each peer the gate lets in (from the gate's thread; it must not
// block): the transport then admits that peer's connections (cluster/network/transport.h).
using PeerAdmitted = std::function<void(const caf::node_id& peer)>;

// `node` names this node in messages ("ps 1", "coordinator"); `service` is what a compatible
// peer gets. `version` is kProtocolVersion except in tests of the handshake itself.
caf::actor SpawnNodeGate(caf::actor_system& system, std::string node, caf::actor service,
                         int32_t version = kProtocolVersion, PeerAdmitted admitted = {});

}  // namespace tessera
