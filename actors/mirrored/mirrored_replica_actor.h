// The mirrored replica actor: one replica of a mirrored strategy (docs/design.md §3.14) — its
// copy of every variable (core/mirrored/mirrored_replica.h), its part of the training data, and its place
// in the ring the replicas all-reduce over (Note [Ring all-reduce] in core/mirrored/collective.h). In the
// simulation the strategy spawns one per worker slot; across processes each worker process
// (--role=worker --strategy=mirrored) spawns one and publishes it at its address in the cluster
// spec, and every replica connects to the next one itself, so ring traffic flows worker to
// worker, never through the coordinator.
//
// clang-format off
//   request                                      reply             errors
//   (link, MirrorRing)                           bool              InvalidArgument (a bad place,
//                                                                  another job), the linker's
//   (step, collective, first step, count)        MirrorStepResult  Aborted, the model's,
//                                                                  InvalidArgument (a count
//                                                                  outside 1..kMaxStepsPerRequest)
//   (run, collective, function, ClosureValues)   ClosureValues     NotFound, the function's,
//                                                                  Aborted
//   (create, MirroredVariableSpec)               bool              as CreateVariable's
//   (read, name)                                 TensorSlice       NotFound
//   (load, TensorSlice)                          bool              as MirroredReplica::Load
//   (eval, test batch index)                     ClosureValues     OutOfRange (< 0); past the
//                                                                  test set: examples 0
//   (probe, collective, elements, rounds)        double            InvalidArgument, Aborted
//   (ring, collective, RingChunk)                —                 (from the previous replica;
//                                                                  from anyone else: dropped)
//   (abort, collective)                          —                 —
//   (listen)                                     port, token       FailedPrecondition (no ring
//                                                                  links here), Unavailable
//   (data, link key, collective, RingChunk)      —                 (from this process's ring
//   (data, link key, why)                        —                 link reader only)
// clang-format on
// A probe all-reduces a buffer of `elements` floats `rounds` times (collectives collective ..
// collective + rounds - 1) and answers the seconds it took here: the ring's bandwidth, as
// bench/allreduce measures it.
//
// Note [Collectives between replicas]
// The driver numbers every synchronous call (a step, a run) with a collective id, the same on
// every replica, increasing; a request for k steps uses k consecutive ids, and the replicas run
// them back to back, each step starting as soon as the previous one is applied, without a round
// trip to the driver between steps. A call computes the replica's contribution, then all-reduces it
// around the ring; the reply goes out once the replica has the reduced values and has applied
// them. A replica takes in ring messages from the previous replica only (the ring names it), so
// no other peer can add to its sums. A replica can be asked for collective c after its neighbour
// has already sent it c's first messages: those wait in `early` until c starts here (at most a few
// collectives ahead; more is a peer out of step, dropped). A collective ends with an error on every
// replica when any one fails: the driver sends (abort, c) to all of them once a replica fails or
// dies, and a replica that sees something no healthy peer sends (a message for a collective it has
// finished, a segment of the wrong length) aborts c and passes the abort on around the ring.
//
// Thread-safety: a CAF actor.
#pragma once

#include <caf/actor.hpp>
#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/node_id.hpp>
#include <caf/replies_to.hpp>
#include <caf/typed_actor.hpp>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "actors/base/messages.h"
#include "core/data/dataset.h"
#include "core/mirrored/collective.h"
#include "core/mirrored/mirrored_replica.h"
#include "core/training/job_description.h"

namespace tessera {

using mirror_link_atom = caf::atom_constant<caf::atom("m_link")>;
using mirror_step_atom = caf::atom_constant<caf::atom("m_step")>;
using mirror_ring_atom = caf::atom_constant<caf::atom("m_ring")>;
using mirror_run_atom = caf::atom_constant<caf::atom("m_run")>;
using mirror_create_atom = caf::atom_constant<caf::atom("m_create")>;
using mirror_read_atom = caf::atom_constant<caf::atom("m_read")>;
using mirror_load_atom = caf::atom_constant<caf::atom("m_load")>;
using mirror_abort_atom = caf::atom_constant<caf::atom("m_abort")>;
using mirror_eval_atom = caf::atom_constant<caf::atom("m_eval")>;
using mirror_probe_atom = caf::atom_constant<caf::atom("m_probe")>;
using mirror_listen_atom = caf::atom_constant<caf::atom("m_listen")>;
using mirror_data_atom = caf::atom_constant<caf::atom("m_data")>;

// The largest buffer a ring probe may ask for: 64 Mi floats (256 MiB).
inline constexpr int64_t kMaxProbeElements = int64_t{1} << 26;

// The most steps one step request may ask for.
inline constexpr int64_t kMaxStepsPerRequest = 1000;

// A replica's place in the ring.
struct MirrorRing {
  int32_t rank = 0;
  int32_t members = 1;
  int64_t batch_size = 1;    // examples per replica per step: a global batch is members * this
  caf::actor next;           // the next replica, or
  std::string next_address;  // (networked) where it is published: the replica connects itself
  JobDescription job;        // the driver's job; a replica of another job refuses the ring
  // The driver's next collective id: everything before it is over (a replica that joins late,
  // a replacement, takes in the ring's next messages rather than dropping them as out of step).
  int64_t next_collective = 0;
  // The previous replica, the one sender whose ring messages this replica takes in (others are
  // dropped): its actor's id and node.
  caf::actor_id previous_id = 0;
  caf::node_id previous_node;
};

// A replica's shares of the steps of a request, one entry per step.
struct MirrorStepResult {
  std::vector<double> loss_sums;  // its mean loss times its examples
  std::vector<int64_t> examples;  // its slice of the global batch (0 when that is empty)
};

using mirrored_replica_actor = caf::typed_actor<
    caf::replies_to<mirror_link_atom, MirrorRing>::with<bool>,
    caf::replies_to<mirror_step_atom, int64_t, int64_t, int64_t>::with<MirrorStepResult>,
    caf::replies_to<mirror_run_atom, int64_t, std::string, ClosureValues>::with<ClosureValues>,
    caf::replies_to<mirror_create_atom, MirroredVariableSpec>::with<bool>,
    caf::replies_to<mirror_read_atom, std::string>::with<TensorSlice>,
    caf::replies_to<mirror_load_atom, TensorSlice>::with<bool>,
    caf::replies_to<mirror_eval_atom, int64_t>::with<ClosureValues>,
    caf::replies_to<mirror_probe_atom, int64_t, int64_t, int64_t>::with<double>,
    caf::reacts_to<mirror_ring_atom, int64_t, RingChunk>,
    caf::reacts_to<mirror_abort_atom, int64_t>,
    caf::replies_to<mirror_listen_atom>::with<int32_t, std::string>,
    caf::reacts_to<mirror_data_atom, uint64_t, int64_t, RingChunk>,
    caf::reacts_to<mirror_data_atom, uint64_t, std::string>>;

// Connects to the replica published at an address (networked mode; blocking, run off the actor's
// thread).
using ReplicaLinker = std::function<absl::StatusOr<caf::actor>(const std::string& address)>;

// What a replica is built from: the same in every process of a job.
struct MirroredReplicaOptions {
  ModelSpec model;
  OptimizerSpec optimizer;
  Dataset train;
  Dataset test;
  uint64_t seed = 1;                                   // the training data's shuffling
  std::shared_ptr<const MirroredFunctions> functions;  // may be null: no replica functions
  JobDescription job;
  ReplicaLinker linker;  // networked mode only
  // Networked without TLS: where this replica listens for its previous replica's ring link
  // (actors/mirrored/ring_link.h, Note [Ring links]); empty: ring messages go over the actor connection.
  std::string ring_link_bind;
  int64_t ring_chunk_elements = kDefaultRingChunkElements;
  // The core this replica's thread runs on (Note [Replicas on cores of their own]); -1: wherever
  // the kernel places it. Taken when the replica joins a ring.
  int32_t cpu = -1;
};

// The core replica `rank` of a ring whose replicas all live in this process runs on: the
// rank-th (round-robin) of the cores this process may run on, or -1 when it may run on one only
// (nothing to spread).
int32_t InProcessReplicaCpu(int32_t rank);

// Spawns a replica on a thread of its own (detached): the model initialized, not yet in a ring.
// Its errors at creation (a bad model or optimizer) are returned here.
absl::StatusOr<mirrored_replica_actor> SpawnMirroredReplica(caf::actor_system& system,
                                                            MirroredReplicaOptions options);

// Registers the messages above (RegisterTesseraTypes calls it).
void RegisterMirroredTypes(caf::actor_system_config& cfg);

// Serialization.
std::string to_string(VariableSynchronization sync);
std::string to_string(VariableAggregation aggregation);

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirrorRing& x) {
  return f(caf::meta::type_name("tessera::MirrorRing"), x.rank, x.members, x.batch_size, x.next,
           x.next_address, x.job, x.next_collective, x.previous_id, x.previous_node);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirrorStepResult& x) {
  return f(caf::meta::type_name("tessera::MirrorStepResult"), x.loss_sums, x.examples);
}

namespace wire {
// Ring values travel as a rank-1 Tensor does (Note [Bulk tensor payloads]): written straight
// from the sender's buffer, loaded into storage of the message's own.
caf::error SaveRingValues(caf::serializer& sink, const RingValues& values);
caf::error LoadRingValues(caf::deserializer& source, RingValues& values);
}  // namespace wire

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RingValues& x) {
  return wire::Dispatch(f, x, wire::SaveRingValues, wire::LoadRingValues,
                        [](Inspector& g, RingValues& v) {
                          int64_t size = v.size();  // the count only: values can be huge
                          return g(caf::meta::type_name("tessera::RingValues"), size);
                        });
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, RingChunk& x) {
  return f(caf::meta::type_name("tessera::RingChunk"), x.chunk, x.step, x.values);
}

template <class Inspector>
typename Inspector::result_type inspect(Inspector& f, MirroredVariableSpec& x) {
  return f(caf::meta::type_name("tessera::MirroredVariableSpec"), x.name, x.shape, x.dtype,
           x.initializer, x.synchronization, x.aggregation);
}

}  // namespace tessera
