// The all-reduce in progress on a replica (Note [Collectives between replicas] in
// actors/mirrored/mirrored_replica_actor.h): starting one, taking in and sending its ring
// messages, ending or aborting it.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "actors/mirrored/internal/replica_state.h"
#include "tessera/status.h"

namespace tessera::mirrored_internal {
namespace {

// How far ahead of this replica its neighbour's collectives may be (Note [Collectives between
// replicas]): one is normal, a few tolerate slow links; beyond that the message is a peer out of
// step and is dropped.
constexpr int64_t kMaxCollectivesAhead = 4;

// Ends the active collective (OK or not) and drops messages for collectives up to it.
void Finish(Self self, const absl::Status& status) {
  ReplicaState& s = self->state;
  Collective done = std::move(*s.active);
  s.active.reset();
  s.finished_through = std::max(s.finished_through, done.id);
  s.early.erase(s.early.begin(), s.early.upper_bound(s.finished_through));
  done.ring.reset();  // its share of the buffer: `finish` may start the next collective on it
  done.finish(status, done.buffer);
}

// Sends a ring message of collective `id` to the next replica: over the ring link when there is
// one, else over the actor connection. False when the link broke (the collective has failed).
bool SendChunk(Self self, int64_t id, RingChunk chunk) {
  ReplicaState& s = self->state;
  if (s.link_out == nullptr) {
    self->send(s.next, mirror_ring_atom::value, id, std::move(chunk));
    return true;
  }
  absl::Status sent = s.link_out->Send(id, chunk);
  if (sent.ok()) return true;
  s.link_out.reset();  // later collectives go over the actor connection
  Fail(self, id, Annotate(sent, "to the next replica"));
  return false;
}

// Takes in one ring message for the active collective; false when it failed.
bool Take(Self self, RingChunk chunk) {
  ReplicaState& s = self->state;
  const int64_t id = s.active->id;
  absl::StatusOr<std::optional<RingChunk>> out = s.active->ring->Receive(std::move(chunk));
  if (!out.ok()) {
    Fail(self, id, Annotate(out.status(), "from the previous replica"));
    return false;
  }
  if (out->has_value() && !SendChunk(self, id, std::move(**out))) return false;
  if (s.active->ring->done()) Finish(self, absl::OkStatus());
  return true;
}

}  // namespace

// Starts collective `id` over `buffer` (the replica's contribution); `finish` gets the reduced
// buffer. A collective the ring already aborted fails at once.
void StartCollective(Self self, int64_t id, RingBuffer buffer,
                     std::function<void(absl::Status, RingBuffer&)> finish) {
  ReplicaState& s = self->state;
  if (s.active.has_value()) {
    Fail(self, s.active->id,
         absl::AbortedError(absl::StrCat("collective ", s.active->id, " was overtaken by ", id)));
  }
  if (id <= s.finished_through) {
    finish(absl::AbortedError(absl::StrCat("collective ", id, " was aborted by the ring")), buffer);
    return;
  }
  s.active.emplace();
  s.active->id = id;
  s.active->buffer = std::move(buffer);
  s.active->finish = std::move(finish);
  absl::StatusOr<RingAllReduce> ring = RingAllReduce::Create(
      s.rank, s.members, s.active->buffer, ReduceOp::kSum, s.options.ring_chunk_elements);
  if (!ring.ok()) {
    Finish(self, ring.status());
    return;
  }
  s.active->ring.emplace(*std::move(ring));
  for (RingChunk& chunk : s.active->ring->Start()) {
    if (!SendChunk(self, id, std::move(chunk))) return;
  }
  if (auto it = s.early.find(id); it != s.early.end()) {
    std::vector<RingChunk> waiting = std::move(it->second);
    s.early.erase(it);
    for (RingChunk& chunk : waiting) {
      // A chunk past the collective's end (only a peer out of step sends one) is dropped.
      if (!s.active.has_value() || s.active->id != id) break;
      if (!Take(self, std::move(chunk))) return;
    }
  }
  if (s.active.has_value() && s.active->id == id && s.active->ring->done()) {
    Finish(self, absl::OkStatus());
  }
}

// Ends collective `id` (and any earlier one in progress) with `error` here, and passes the abort
// on around the ring, once.
void Fail(Self self, int64_t id, const absl::Status& error) {
  ReplicaState& s = self->state;
  const bool active = s.active.has_value() && s.active->id <= id;
  if (id <= s.finished_through && !active) return;
  if (active) Finish(self, error);
  s.finished_through = std::max(s.finished_through, id);
  s.early.erase(s.early.begin(), s.early.upper_bound(s.finished_through));
  if (s.next) self->send(s.next, mirror_abort_atom::value, id);
}

// Takes in a ring message of `collective` from the previous replica (over either transport).
void OnRingChunk(Self self, int64_t collective, RingChunk& chunk) {
  ReplicaState& s = self->state;
  if (s.active.has_value() && s.active->id == collective) {
    Take(self, std::move(chunk));
    return;
  }
  if (collective <= s.finished_through) {
    // Only a peer out of step (or one not told of an abort yet) sends for a collective
    // this replica has finished: pass the abort on.
    if (s.next) self->send(s.next, mirror_abort_atom::value, collective);
    return;
  }
  if (collective > s.finished_through + kMaxCollectivesAhead) return;  // out of step
  // A healthy neighbour is at most one collective ahead, a buffer's worth; more is a peer
  // out of step, and the collective it floods is aborted rather than held in memory.
  int64_t waiting = chunk.values.size();
  for (const auto& [id, chunks] : s.early) {
    for (const RingChunk& held : chunks) waiting += held.values.size();
  }
  const int64_t limit =
      std::max<int64_t>(2 * s.replica->trainer().packed_gradients_size(), kMaxProbeElements);
  if (waiting > limit) {
    Fail(self, collective,
         absl::ResourceExhaustedError(absl::StrCat("collective ", collective,
                                                   ": the previous replica sent more than ", limit,
                                                   " floats ahead of this one")));
    return;
  }
  s.early[collective].push_back(std::move(chunk));
}

void TakeRingMessage(Self self, int64_t collective, RingChunk& chunk) {
  const ReplicaState& s = self->state;
  if (const caf::strong_actor_ptr& sender = self->current_sender();
      sender == nullptr || sender->id() != s.previous_id ||
      sender->node() != s.previous_node) {
    return;  // not the previous replica's
  }
  OnRingChunk(self, collective, chunk);
}

void AbortCollective(Self self, int64_t collective) {
  Fail(self, collective,
       absl::AbortedError(absl::StrCat("collective ", collective,
                                       " was aborted: a replica failed or left the ring")));
}

}  // namespace tessera::mirrored_internal
