// ReplicaGroup: the replicas of a mirrored strategy as the driver reaches them — the ring they
// form, the requests that run on all of them at once, checkpoints, and a lost replica's recovery.
// What stands behind the public MirroredStrategy (tessera/mirrored.h, which says what the strategy
// means) and what the library's mirrored training drives itself
// (coordinator/mirrored/mirrored_training.h), in this process or across processes
// (docs/design.md §3.14).
//
// Every replica (actors/mirrored/mirrored_replica_actor.h) holds a copy of every variable; a step
// runs on all of them at once, each on its share of the global batch, and their gradients are
// combined by a ring all-reduce between the replicas before each applies the same result.
//
// Note [A lost replica]
// A synchronous step needs every replica. While a request is out the driver monitors every replica;
// when one dies its request fails and the driver aborts the collective on the others (Note
// [Collectives between replicas]), so the request fails on all of them with an error naming the
// lost replica. A replica lost before it sent its share leaves the step applied nowhere; one lost
// during the all-gather may leave the survivors one step apart (a survivor that had every segment
// applied the step, one still waiting for the lost replica's did not). What follows is the driver's
// choice (coordinator/mirrored/mirrored_training.h): as TF's multi-worker mirrored strategy does,
// wait for the worker to be back and resume everyone from the latest checkpoint (Replace, then
// Restore); or, where TF cannot, go on with the replicas left (Drop, then Resync: every survivor
// becomes a copy of the one that applied the most, so the replicas agree again and no step is
// applied twice; the global batch shrinks, the summary says so).
//
// Thread-safety: not synchronized; the driver's thread. Calls block that thread (never an
// actor's).
#pragma once

#include <caf/actor_system.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/mirrored/mirrored_replica_actor.h"
#include "core/checkpoint/checkpoint.h"
#include "core/mirrored/collective.h"
#include "core/model/model.h"
#include "core/training/evaluation.h"
#include "tessera/env.h"
#include "tessera/mirrored.h"

namespace tessera {

// A replica of the strategy: its actor and, across processes, where it is published.
struct ReplicaHandle {
  mirrored_replica_actor actor;
  std::string address;  // networked: "host:port"; empty in process
};

class ReplicaGroup {
 public:
  // Forms the ring of `replicas` (rank = position), each training `batch_size` examples per step,
  // all checked against `job` (a replica of another job is refused, naming the differences).
  // InvalidArgument for no replicas or batch_size < 1; a replica's error.
  static absl::StatusOr<std::unique_ptr<ReplicaGroup>> Create(caf::actor_system& system,
                                                              std::vector<ReplicaHandle> replicas,
                                                              int64_t batch_size,
                                                              JobDescription job);
  // Stops the in-process replicas (remote ones keep serving: a driver that resumes the run finds
  // them; EndRun stops them).
  ~ReplicaGroup();
  ReplicaGroup(const ReplicaGroup&) = delete;
  ReplicaGroup& operator=(const ReplicaGroup&) = delete;

  // Stops every replica, remote ones too (their worker processes then exit): the run is over.
  void EndRun();

  int32_t num_replicas_in_sync() const { return static_cast<int32_t>(replicas_.size()); }
  int64_t global_batch_size() const { return batch_size_ * num_replicas_in_sync(); }
  const std::vector<ReplicaHandle>& replicas() const { return replicas_; }

  // -- Variables and replica functions: as MirroredStrategy's (tessera/mirrored.h) -------------
  absl::Status CreateVariable(const MirroredVariableSpec& spec);
  absl::StatusOr<Tensor> Read(const std::string& name);  // replica 0's copy unless ON_READ
  absl::StatusOr<PerReplica<Tensor>> ReadPerReplica(const std::string& name);
  absl::Status Assign(const std::string& name, const Tensor& value);
  absl::StatusOr<PerReplica<ClosureValues>> Run(const std::string& function,
                                                const ClosureValues& args);

  // -- Training ----------------------------------------------------------------------------------
  using StepResult = MirroredStrategy::StepResult;
  // Synchronous steps on global batches first .. first + count - 1 (of the stream of global
  // batches: a pure function of the data, the seed and the global batch size), which the
  // replicas run back to back. Unavailable naming the replicas lost (Note [A lost replica]); a
  // replica's error otherwise. InvalidArgument for a count outside 1..kMaxStepsPerRequest.
  // `on_sent` (fault injection) runs once every replica has been sent the request.
  absl::StatusOr<std::vector<StepResult>> TrainSteps(int64_t first, int64_t count,
                                                     std::function<void()> on_sent = nullptr);
  absl::StatusOr<StepResult> TrainStep(int64_t step);
  // The test set evaluated on the replicas, one evaluation batch each at a time, merged in batch
  // order (the same result as LocalTrainer::Evaluate on the same values).
  absl::StatusOr<EvalResult> Evaluate(const Model& model, int64_t test_examples);

  // The ring's speed: `rounds` all-reduces (SUM) of a buffer of `elements` floats that each
  // replica holds, back to back; the slowest replica's seconds. InvalidArgument as the replica's.
  absl::StatusOr<double> ProbeRing(int64_t elements, int64_t rounds);

  // -- Checkpoints (the parameter-server strategy's format: each restores into the other) -------
  // Writes every parameter and variable (values, slots, steps; ON_READ ones reduced) as one
  // slice file each, then the manifest (Note [One save path], core/checkpoint/save.h): the
  // replicas write the parameters and ON_WRITE variables where they live (spread over them), the
  // ON_READ values and the manifest go through `env`. A replica's or the Env's error.
  absl::Status Save(const std::string& dir, const CheckpointId& checkpoint, const ModelSpec& model,
                    Env* env = Env::Default());
  // Restores every parameter and variable from the checkpoint in `dir` (any layout it was
  // saved in: sharded or not); returns its global step. InvalidArgument for another optimizer
  // rule or a shape that differs; NotFound for a parameter the checkpoint lacks.
  absl::StatusOr<int64_t> Restore(const std::string& dir, const ModelSpec& model,
                                  const OptimizerSpec& optimizer);

  // -- A lost replica (Note [A lost replica]) ----------------------------------------------------
  // The ranks whose replica does not answer (within `timeout` each).
  std::vector<int32_t> LostReplicas(absl::Duration timeout = absl::Seconds(2));
  // Puts `replacement` in rank `rank`'s place and forms the ring again.
  absl::Status Replace(int32_t rank, ReplicaHandle replacement);
  // Leaves the ranks out and forms the ring again with the others (renumbered in order).
  // FailedPrecondition when none would be left.
  absl::Status Drop(const std::vector<int32_t>& ranks);
  // The optimizer steps `model`'s first trainable parameter has taken on each replica.
  absl::StatusOr<PerReplica<int64_t>> AppliedSteps(const ModelSpec& model);
  // Note [A lost replica]: after a failed step the survivors may differ by the last step (a
  // replica that had every segment applied it, one still waiting for the lost one's did not).
  // Makes every replica a copy of the one that applied the most (values, slots, steps) and
  // returns that count of applied steps.
  absl::StatusOr<int64_t> Resync(const ModelSpec& model);

 private:
  ReplicaGroup(caf::actor_system& system, std::vector<ReplicaHandle> replicas, int64_t batch_size,
               JobDescription job);
  absl::Status Link();
  // Replica `rank`'s copy of a parameter or variable, with its slots and step.
  absl::StatusOr<TensorSlice> ReadSlice(size_t rank, const std::string& name);
  // The spec of `name` when it is an ON_READ variable created under the strategy; else null.
  const MirroredVariableSpec* OnRead(const std::string& name) const;
  // What every copy of `name` gets for the variable to read `value`: an ON_READ SUM variable's
  // share (ReplicaShare; Note [ON_READ variables in checkpoints] in
  // coordinator/checkpoint/save_restore.cc); else `value`.
  Tensor Share(const std::string& name, Tensor value) const;
  // Every replica's copy of it; every replica's copy set to `slice` (a whole variable).
  absl::StatusOr<std::vector<TensorSlice>> ReadAll(const std::string& name);
  absl::Status LoadAll(const TensorSlice& slice);
  // The model's parameters, then the variables created under the strategy.
  std::vector<std::string> Names(const ModelSpec& model) const;
  // Sends one request per replica (made by `request(self, rank, collective)`) and gathers every
  // reply; once one fails, aborts collective `collective` on all. The first error that is not an
  // abort (else the first), naming its replica.
  template <class Reply, class Request>
  absl::StatusOr<std::vector<Reply>> AskAll(int64_t collective, Request request,
                                            std::function<void()> on_sent = nullptr);

  caf::actor_system& system_;
  std::vector<ReplicaHandle> replicas_;
  int64_t batch_size_;
  JobDescription job_;
  int64_t next_collective_ = 0;
  std::vector<MirroredVariableSpec> variables_;  // created under the strategy, in order
};

}  // namespace tessera
