// The mirrored replica actor's state and the helpers its behaviour's pieces share
// (actors/mirrored/mirrored_replica_actor.h): the collective in progress and the ring links, and
// one function per request the behaviour answers, grouped by file:
//   replica_join.cc         (link): taking a place in a ring;
//   replica_collectives.cc  (ring, abort): the all-reduce in progress;
//   replica_ring_links.cc   (listen, data): ring links (Note [Ring links]);
//   replica_steps.cc        (step, run, probe): requests that run collectives;
//   replica_variables.cc    (create, read, load, save): the replica's variables, saved and
//   restored; replica_evaluation.cc   (eval): a test batch's forward pass.
//
// Thread-safety: everything here runs on the replica actor's thread, with its state.
#pragma once

#include <caf/node_id.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "actors/base/messages.h"
#include "actors/mirrored/mirrored_replica_actor.h"
#include "actors/mirrored/ring_link.h"
#include "core/mirrored/collective.h"
#include "core/mirrored/mirrored_replica.h"
#include "core/model/model.h"
#include "tessera/data.h"

namespace tessera::mirrored_internal {

// A request for a ring link, from the actor (id and node) that will send over it.
struct LinkRequest {
  caf::actor_id id = 0;
  caf::node_id node;
  caf::typed_response_promise<int32_t, std::string> promise;
};

// One all-reduce in progress (Note [Collectives between replicas]).
struct Collective {
  int64_t id = -1;
  RingBuffer buffer;
  std::optional<RingAllReduce> ring;
  // Called once: OK with the reduced buffer, or the collective's error.
  std::function<void(absl::Status, RingBuffer&)> finish;
};

struct ReplicaState {
  static inline const char* name = "tessera.mirrored_replica";
  MirroredReplicaOptions options;
  std::optional<MirroredReplica> replica;
  // The ring (none until linked).
  int32_t rank = 0;
  int32_t members = 0;
  int64_t batch_size = 0;
  mirrored_replica_actor next;
  caf::actor_id previous_id = 0;  // the previous replica (MirrorRing)
  caf::node_id previous_node;
  bool on_its_cpu = false;            // options.cpu taken (Note [Replicas on cores of their own])
  std::optional<BatchStream> stream;  // global batches of members * batch_size
  std::optional<Collective> active;
  // Ring links (Note [Ring links]): to the next replica, and from whoever asked last, with the
  // key its messages carry.
  std::unique_ptr<RingLinkSender> link_out;
  std::unique_ptr<RingLinkReceiver> link_in;
  uint64_t link_in_key = 0;
  caf::actor_id link_in_id = 0;
  caf::node_id link_in_node;
  std::deque<LinkRequest> link_requests;  // waiting for a ring that names their asker
  std::map<int64_t, std::vector<RingChunk>> early;
  int64_t finished_through = -1;  // the highest collective finished (or aborted) here
  RingBufferPool buffers;         // collectives' buffers (Note [Ring segments read in place])
  ForwardResult eval_result;
};

using Self = mirrored_replica_actor::stateful_pointer<ReplicaState>;

// -- replica_join.cc ------------------------------------------------------------------------------

// Takes the ring place `ring` (the link request).
caf::result<bool> JoinRing(Self self, MirrorRing ring);

// -- replica_collectives.cc -----------------------------------------------------------------------

// Starts collective `id` over `buffer` (the replica's contribution); `finish` gets the reduced
// buffer. A collective the ring already aborted fails at once.
void StartCollective(Self self, int64_t id, RingBuffer buffer,
                     std::function<void(absl::Status, RingBuffer&)> finish);

// Ends collective `id` (and any earlier one in progress) with `error` here, and passes the abort
// on around the ring, once.
void Fail(Self self, int64_t id, const absl::Status& error);

// Takes in a ring message of `collective` from the previous replica (over either transport).
void OnRingChunk(Self self, int64_t collective, RingChunk& chunk);

// A ring message over the actor connection: taken in only from the previous replica.
void TakeRingMessage(Self self, int64_t collective, RingChunk& chunk);

// The abort request: ends `collective` here and passes the abort on.
void AbortCollective(Self self, int64_t collective);

// -- replica_ring_links.cc ------------------------------------------------------------------------

// The host of a "host:port" (or "[v6 host]:port") address.
std::string HostOf(const std::string& address);

// Asks the next replica, at `host`, for a ring link and connects to it (Note [Ring links]), then
// answers the ring request: linked either way, over BASP when there is no link.
void OpenRingLink(Self self, std::string host, caf::typed_response_promise<bool> promise);

// After a new ring: the incoming link stays only if the previous replica asked for it; a waiting
// request of the previous replica's is served, every other one refused.
void ServeLinkRequestsOfRing(Self self);

// The listen request: a ring link for the sender, now or once a ring names it the previous
// replica.
caf::result<int32_t, std::string> AnswerLinkRequest(Self self);

// A ring message from the incoming link's reader thread, and the link's end.
void OnLinkData(Self self, uint64_t key, int64_t collective, RingChunk& chunk);
void OnLinkEnded(Self self, uint64_t key, const std::string& why);

// -- replica_steps.cc -----------------------------------------------------------------------------

// Steps [step, step + count) over collectives [collective, collective + count).
caf::result<MirrorStepResult> RunStepsRequest(Self self, int64_t collective, int64_t step,
                                              int64_t count);

// Replica function `function` over `args`, its writes all-reduced in collective `collective`.
caf::result<ClosureValues> RunFunction(Self self, int64_t collective, const std::string& function,
                                       const ClosureValues& args);

// A ring probe: `rounds` all-reduces of `elements` floats from collective `collective` on.
caf::result<double> RunProbe(Self self, int64_t collective, int64_t elements, int64_t rounds);

// -- replica_variables.cc -------------------------------------------------------------------------

caf::result<bool> CreateVariable(Self self, const MirroredVariableSpec& spec);
// The variable's value and slots, for a checkpoint.
caf::result<TensorSlice> ReadSlice(Self self, const std::string& name);
// A checkpoint's part put back.
caf::result<bool> LoadSlice(Self self, const TensorSlice& slice);
// Writes variable `name` as `op` says, through the replica's store (Note [One save path]).
caf::result<SavedSlice> SaveSlice(Self self, const std::string& name, const SaveOp& op);

// -- replica_evaluation.cc ------------------------------------------------------------------------

// The loss, labels and logits of test batch `index` (examples 0 past the test set).
caf::result<ClosureValues> EvaluateTestBatch(Self self, int64_t index);

}  // namespace tessera::mirrored_internal
