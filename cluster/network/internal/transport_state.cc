#include "cluster/network/internal/transport_state.h"

#include <caf/io/middleman.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <utility>
#include <vector>

#include "core/base/logging.h"

namespace tessera {
namespace {

// Warnings about closed connections: at most one a second (a flood of bad peers is one line a
// second, with a count of those not logged).
constexpr absl::Duration kWarningInterval = absl::Seconds(1);
// Admitted peers remembered; the oldest is forgotten past this (its open connections stay
// admitted; a new one says hello again, as every connection does).
constexpr size_t kRememberedPeers = 4096;

std::chrono::nanoseconds ToChrono(absl::Duration d) {
  return std::chrono::nanoseconds(absl::ToInt64Nanoseconds(d));
}

}  // namespace

Transport::State::State(caf::actor_system& sys, const NetworkOptions& options)
    : system(sys),
      mpx(static_cast<caf::io::network::default_multiplexer&>(sys.middleman().backend())),
      limits{options.max_message_bytes, options.max_handshake_bytes},
      tls(options.tls()),
      handshake_timeout(options.handshake_timeout) {}

caf::io::middleman_actor Transport::State::Middleman() {
  absl::MutexLock lock(&mu);
  return middleman;
}

caf::io::middleman_actor Transport::State::TakeMiddleman() {
  absl::MutexLock lock(&mu);
  return std::exchange(middleman, caf::io::middleman_actor());
}

bool Transport::State::Admitted(const caf::node_id& peer) {
  absl::MutexLock lock(&mu);
  return admitted.count(peer) > 0;
}

void Transport::State::Admit(const caf::node_id& peer) {
  absl::MutexLock lock(&mu);
  if (!admitted.insert(peer).second) return;
  admission_order.push_back(peer);
  if (admission_order.size() > kRememberedPeers) {
    admitted.erase(admission_order.front());
    admission_order.pop_front();
  }
}

void Transport::State::NoteFailure(const std::string& endpoint, ConnectionFailure failure) {
  absl::MutexLock lock(&mu);
  failures[endpoint] = std::move(failure);
}

std::optional<ConnectionFailure> Transport::State::TakeFailure(const std::string& endpoint) {
  absl::MutexLock lock(&mu);
  auto it = failures.find(endpoint);
  if (it == failures.end()) return std::nullopt;
  ConnectionFailure out = std::move(it->second);
  failures.erase(it);
  return out;
}

void Transport::State::Warn(const std::string& text) {
  int64_t unlogged = 0;
  {
    absl::MutexLock lock(&mu);
    const absl::Time now = absl::Now();
    if (now - last_warning < kWarningInterval) {
      ++unlogged_warnings;
      return;
    }
    last_warning = now;
    std::swap(unlogged, unlogged_warnings);
  }
  if (unlogged > 0) {
    Log().warn("{} ({} more closed connection(s) not logged)", text, unlogged);
  } else {
    Log().warn("{}", text);
  }
}

uint64_t Transport::State::Watch(transport_internal::GuardedConnection* connection) {
  const uint64_t id = next_watch_id++;
  watched.emplace(id, Watched{connection, absl::Now() + handshake_timeout});
  caf::delayed_anon_send(warden, ToChrono(handshake_timeout + absl::Milliseconds(10)),
                         sweep_atom::value);
  return id;
}

void Transport::State::Sweep() {
  const absl::Time now = absl::Now();
  std::vector<caf::intrusive_ptr<transport_internal::GuardedConnection>> due;
  for (const auto& [id, entry] : watched) {
    if (entry.deadline <= now) due.push_back(entry.connection);
  }
  for (const auto& connection : due) connection->ExpireUnlessAdmitted(&mpx);
}

}  // namespace tessera
