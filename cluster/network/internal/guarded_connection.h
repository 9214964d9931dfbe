// GuardedConnection: one of the transport's connections (cluster/network/transport.h), plain TCP
// or mutual TLS, as the rest of the transport sees it; MakeConnection makes one. Each screens
// every read through a ConnectionGuard before CAF's BASP broker sees it (Note [Allocation follows
// bytes the guard allowed] in cluster/network/internal/guarded_connection.cc), and is closed when
// its peer is not admitted within the handshake timeout (Transport::State's watch list).
//
// Thread-safety: a connection is used on the multiplexer's thread only.
#pragma once

#include <caf/execution_unit.hpp>
#include <caf/expected.hpp>
#include <caf/io/network/native_socket.hpp>
#include <caf/io/scribe.hpp>
#include <memory>
#include <string>

#include "cluster/network/transport.h"

namespace tessera {
namespace transport_internal {

// One of the transport's connections, as the rest of the transport sees it.
class GuardedConnection : public caf::io::scribe {
 public:
  using caf::io::scribe::scribe;
  // Closes the connection unless its peer has been admitted meanwhile (multiplexer thread).
  virtual void ExpireUnlessAdmitted(caf::execution_unit* ctx) = 0;
};

// A connection over `fd` (connected or accepted), plain or TLS as the transport is. Takes the
// socket: closes it on failure.
caf::expected<caf::io::scribe_ptr> MakeConnection(const std::shared_ptr<Transport::State>& state,
                                                  caf::io::network::native_socket fd,
                                                  std::string peer, bool outgoing);

}  // namespace transport_internal
}  // namespace tessera
