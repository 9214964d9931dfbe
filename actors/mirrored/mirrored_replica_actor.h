// The mirrored replica actor: one replica of a mirrored strategy (docs/design.md §3.14) — its copy
// of every variable (core/mirrored/mirrored_replica.h), its part of the training data, and its
// place in the ring the replicas all-reduce over (Note [Ring all-reduce] in
// core/mirrored/collective.h). In the simulation the strategy spawns one per worker slot; across
// processes each worker process (--role=worker --strategy=mirrored) spawns one and publishes it at
// its address in the cluster spec, and every replica connects to the next one itself, so ring
// traffic flows worker to worker, never through the coordinator.
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
#include "actors/base/actor_handles.h"
#include "actors/base/messages.h"
#include "core/mirrored/collective.h"
#include "core/mirrored/mirrored_replica.h"
#include "core/training/job_description.h"
#include "tessera/data.h"

namespace tessera {

// The largest buffer a ring probe may ask for: 64 Mi floats (256 MiB).
inline constexpr int64_t kMaxProbeElements = int64_t{1} << 26;

// The most steps one step request may ask for.
inline constexpr int64_t kMaxStepsPerRequest = 1000;

// The messages (MirrorRing, MirrorStepResult) are in actors/base/messages.h, the interface,
// mirrored_replica_actor, with the other actor handles (actors/base/actor_handles.h).

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
  // (actors/mirrored/ring_link.h, Note [Ring links]); empty: ring messages go over the actor
  // connection.
  std::string ring_link_bind;
  int64_t ring_chunk_elements = kDefaultRingChunkElements;
  // The core this replica's thread runs on (Note [Replicas on cores of their own]); -1: wherever
  // the kernel places it. Taken when the replica joins a ring.
  int32_t cpu = -1;
  // Where the replica writes its slice files when saving (Note [One save path],
  // core/checkpoint/save.h); null: slice files on this machine (FileSliceStore).
  std::shared_ptr<const SliceStore> store;
};

// The core replica `rank` of a ring whose replicas all live in this process runs on: the
// rank-th (round-robin) of the cores this process may run on, or -1 when it may run on one only
// (nothing to spread).
int32_t InProcessReplicaCpu(int32_t rank);

// Spawns a replica on a thread of its own (detached): the model initialized, not yet in a ring.
// Its errors at creation (a bad model or optimizer) are returned here.
absl::StatusOr<mirrored_replica_actor> SpawnMirroredReplica(caf::actor_system& system,
                                                            MirroredReplicaOptions options);

}  // namespace tessera
