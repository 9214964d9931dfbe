// Transport::State: what one actor system's transport (cluster/network/transport.h) shares
// between its API, its middleman actor, its warden and its connections: the configuration, the
// admitted peers, the failures kept for ConnectToNode, the warning rate limit, and the
// connections waiting for their version handshake.
//
// Thread-safety: the members under `mu` from any thread; the watch list (Watch, Unwatch, Sweep,
// `watched`) from the multiplexer's thread only.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/atom.hpp>
#include <caf/intrusive_ptr.hpp>
#include <caf/io/middleman_actor.hpp>
#include <caf/io/network/default_multiplexer.hpp>
#include <caf/node_id.hpp>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actors/base/messages.h"  // sweep_atom
#include "cluster/network/connection_guard.h"
#include "cluster/network/internal/guarded_connection.h"
#include "cluster/network/network.h"
#include "cluster/network/transport.h"

namespace tessera {
struct Transport::State {
  State(caf::actor_system& sys, const NetworkOptions& options);

  caf::actor_system& system;
  caf::io::network::default_multiplexer& mpx;
  const ConnectionLimits limits;
  const bool tls;
  const absl::Duration handshake_timeout;
  caf::actor warden;  // set once, right after it is spawned

  // The transport's middleman actor, until the middleman module stops (then null: the state may
  // outlive it a moment, held by connections, and must not keep the actor from being destroyed,
  // which the actor system waits for).
  caf::io::middleman_actor Middleman();
  caf::io::middleman_actor TakeMiddleman();

  // -- Any thread ---------------------------------------------------------------------------

  bool Admitted(const caf::node_id& peer);
  void Admit(const caf::node_id& peer);
  void NoteFailure(const std::string& endpoint, ConnectionFailure failure);
  std::optional<ConnectionFailure> TakeFailure(const std::string& endpoint);
  // Logs `text` as a warning unless one was logged less than kWarningInterval ago.
  void Warn(const std::string& text);

  absl::Mutex mu;
  caf::io::middleman_actor middleman ABSL_GUARDED_BY(mu);
  std::set<caf::node_id> admitted ABSL_GUARDED_BY(mu);
  std::deque<caf::node_id> admission_order ABSL_GUARDED_BY(mu);
  std::map<std::string, ConnectionFailure> failures ABSL_GUARDED_BY(mu);
  absl::Time last_warning ABSL_GUARDED_BY(mu) = absl::InfinitePast();
  int64_t unlogged_warnings ABSL_GUARDED_BY(mu) = 0;

  // -- The multiplexer's thread only -------------------------------------------------------

  // Watches a connection whose peer is not admitted yet; returns its watch id.
  uint64_t Watch(transport_internal::GuardedConnection* connection);
  void Unwatch(uint64_t id) { watched.erase(id); }
  // Expires every watched connection whose deadline has passed.
  void Sweep();

  struct Watched {
    caf::intrusive_ptr<transport_internal::GuardedConnection> connection;
    absl::Time deadline;
  };
  std::map<uint64_t, Watched> watched;
  uint64_t next_watch_id = 1;
};

}  // namespace tessera
