// Ring links between replicas (Note [Ring links]): asking the next replica for one, serving the
// previous replica's request, and taking in what arrives over it.
#include <caf/actor.hpp>
#include <caf/actor_addr.hpp>
#include <caf/actor_cast.hpp>
#include <caf/send.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "actors/base/error.h"
#include "actors/mirrored/internal/replica_state.h"
#include "actors/mirrored/ring_link.h"
#include "core/base/logging.h"

namespace tessera::mirrored_internal {
namespace {

// How long a replica that offered a ring link waits for its previous replica to connect.
constexpr absl::Duration kRingLinkAcceptTimeout = absl::Seconds(30);
constexpr absl::Duration kRingLinkConnectTimeout = absl::Seconds(5);

// Note [Ring links]
// Across processes (without TLS) each replica sends its ring messages over a ring link
// (actors/mirrored/ring_link.h) rather than over BASP. Once a replica has reached its next replica
// by address (MirrorRing::next_address), it asks it to listen (listen_atom); the next replica opens
// a receiver on a fresh port, remembers who asked, and answers the port and a random token; the
// asker connects and presents the token. Only the previous replica's request is served: one from a
// peer not (yet) named previous waits for the ring that names it — the next replica may get the
// request before its own MirrorRing — and is refused by any other ring (at most kMaxLinkRequests
// wait), so a stranger can neither open a link that counts nor displace the previous replica's. The
// receiver's reader thread hands each message to its replica as (data, key, collective, chunk),
// where `key` is a random number that never leaves the process, so no peer can forge one; the
// replica takes it in only while the link's asker is its previous replica (MirrorRing), exactly as
// it takes (ring, ...) messages from that replica only. A malformed message on the link ends the
// link and aborts the active collective (DataLoss passed around the ring). A replica whose next
// replica offers no link (TLS, an older peer) or whose link cannot be set up or breaks sends over
// BASP, as in the simulation; a send that fails on a broken link fails the collective with
// Unavailable, and later ones go over BASP. Each re-link (a new MirrorRing) drops the replica's
// outgoing link and sets up a new one; a new listen request replaces the incoming one.

// Requests for a ring link from peers not (yet) named the previous replica that wait for a ring
// naming them, at most this many (the oldest refused first).
constexpr size_t kMaxLinkRequests = 4;

// Opens the incoming ring link `request` asked for and answers it with the port and token
// (Note [Ring links]); it replaces the link from whoever asked before.
void ServeLinkRequest(Self self, LinkRequest request) {
  ReplicaState& s = self->state;
  s.link_in.reset();
  std::random_device device;
  const uint64_t key = (uint64_t{device()} << 32) | device();
  const caf::actor_addr me = self->address();
  absl::StatusOr<std::unique_ptr<RingLinkReceiver>> link = RingLinkReceiver::Listen(
      s.options.ring_link_bind, s.options.ring_chunk_elements, kRingLinkAcceptTimeout,
      [me, key](int64_t collective, RingChunk chunk) {
        if (caf::actor replica = caf::actor_cast<caf::actor>(me)) {
          caf::anon_send(replica, mirror_data_atom::value, key, collective, std::move(chunk));
        }
      },
      [me, key](absl::Status why) {
        caf::actor replica = caf::actor_cast<caf::actor>(me);
        if (replica && absl::IsDataLoss(why)) {
          caf::anon_send(replica, mirror_data_atom::value, key, std::string(why.message()));
        }
      });
  if (!link.ok()) {
    request.promise.deliver(StatusToError(link.status()));
    return;
  }
  s.link_in = *std::move(link);
  s.link_in_key = key;
  s.link_in_id = request.id;
  s.link_in_node = request.node;
  request.promise.deliver(static_cast<int32_t>(s.link_in->port()), s.link_in->token());
}

}  // namespace

std::string HostOf(const std::string& address) {
  std::string host = address.substr(0, address.rfind(':'));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host;
}

void OpenRingLink(Self self, std::string host, caf::typed_response_promise<bool> promise) {
  if (self->state.options.ring_link_bind.empty()) {
    promise.deliver(true);
    return;
  }
  self->request(self->state.next, std::chrono::seconds(10), mirror_listen_atom::value)
      .then(
          [self, host, promise](int32_t port, const std::string& token) mutable {
            absl::StatusOr<std::unique_ptr<RingLinkSender>> link =
                port > 0 && port <= 65535
                    ? RingLinkSender::Connect(host, static_cast<uint16_t>(port), token,
                                              kRingLinkConnectTimeout)
                    : absl::InvalidArgumentError(absl::StrCat("ring link: port ", port));
            if (link.ok()) {
              self->state.link_out = *std::move(link);
              Log().info("ring link to the next replica at {}:{}", host, port);
            } else {
              Log().warn(
                  "no ring link to the next replica ({}): ring messages go over the "
                  "actor connection",
                  link.status().message());
            }
            promise.deliver(true);
          },
          [promise](caf::error&) mutable { promise.deliver(true); });
}

void ServeLinkRequestsOfRing(Self self) {
  ReplicaState& s = self->state;
  if (s.link_in != nullptr &&
      (s.link_in_id != s.previous_id || s.link_in_node != s.previous_node)) {
    s.link_in.reset();
  }
  std::deque<LinkRequest> waiting = std::move(s.link_requests);
  s.link_requests.clear();
  for (LinkRequest& request : waiting) {
    if (request.id == s.previous_id && request.node == s.previous_node) {
      ServeLinkRequest(self, std::move(request));
    } else {
      request.promise.deliver(StatusToError(
          absl::PermissionDeniedError("a ring link for a replica that is not the previous one")));
    }
  }
}

caf::result<int32_t, std::string> AnswerLinkRequest(Self self) {
  ReplicaState& s = self->state;
  if (s.options.ring_link_bind.empty()) {
    return StatusToError(absl::FailedPreconditionError(
        "this replica takes ring messages over the actor connection only"));
  }
  const caf::strong_actor_ptr& sender = self->current_sender();
  if (sender == nullptr) {
    return StatusToError(absl::InvalidArgumentError("a ring link asked for anonymously"));
  }
  // Before the promise, which takes the sender out of the current message.
  LinkRequest request{sender->id(), sender->node(), {}};
  auto promise = self->make_response_promise<int32_t, std::string>();
  request.promise = promise;
  if (request.id == s.previous_id && request.node == s.previous_node) {
    ServeLinkRequest(self, std::move(request));
  } else {
    // Maybe the previous replica of a ring this replica has not been told of yet.
    if (s.link_requests.size() == kMaxLinkRequests) {
      s.link_requests.front().promise.deliver(StatusToError(
          absl::ResourceExhaustedError("too many ring link requests from strangers")));
      s.link_requests.pop_front();
    }
    s.link_requests.push_back(std::move(request));
  }
  return promise;
}

void OnLinkData(Self self, uint64_t key, int64_t collective, RingChunk& chunk) {
  const ReplicaState& s = self->state;
  if (s.link_in == nullptr || key != s.link_in_key || s.link_in_id != s.previous_id ||
      s.link_in_node != s.previous_node) {
    return;  // an old link's, or not from the previous replica
  }
  OnRingChunk(self, collective, chunk);
}

void OnLinkEnded(Self self, uint64_t key, const std::string& why) {
  ReplicaState& s = self->state;
  if (s.link_in == nullptr || key != s.link_in_key) return;
  Log().warn("the ring link from the previous replica ended: {}", why);
  if (s.active.has_value()) {
    Fail(self, s.active->id,
         absl::DataLossError(absl::StrCat("from the previous replica: ", why)));
  }
}

}  // namespace tessera::mirrored_internal
