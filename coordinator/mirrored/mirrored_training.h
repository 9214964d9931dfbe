// Training under the mirrored strategy (coordinator/mirrored/replica_group.h): the driver's
// loop around synchronous steps — the replicas started in this process (the simulation) or reached
// at the workers' addresses of a cluster spec (each worker process serving a replica:
// ServeAsReplica), resuming from the latest checkpoint, a checkpoint every few steps, validation,
// the final evaluation and export, a lost replica (Note [A lost replica]), and the run's figures in
// the summary.
//
// --batch_size is each replica's batch: a step trains on a global batch of replicas * batch_size
// examples, so a run of the same --epochs takes 1/replicas as many steps as on parameter servers.
// The checkpoints are the parameter-server strategy's format: a run may resume under either.
//
// Thread-safety: call from the driver's thread (it blocks until training is over).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/mirrored/mirrored_replica_actor.h"
#include "cluster/network/network.h"
#include "coordinator/ps/parameter_server_training.h"
#include "coordinator/training/training_run.h"

namespace tessera {

// Trains `job` with options.workers replicas (options.ps is unused). Errors: the job's (a model
// or optimizer that does not validate), a replica's, a checkpoint's, a lost replica under kRestore
// without checkpoints. The run is recorded in the observers' monitor as it goes, and the
// replicas shown to their on_replicas (RunObservers; on_cluster is not called: there are no PS).
absl::StatusOr<TrainingRun> TrainMirrored(const TrainingJob& job,
                                          const ParameterServerTrainingOptions& options,
                                          ReplicaLossPolicy on_loss, int64_t eval_every,
                                          nlohmann::json& summary,
                                          const RunObservers& observers = {});

// Runs this process as the replica of worker `task` of the cluster in options.cluster: spawns it
// and publishes it at the task's address until the coordinator ends the run (or the process is
// stopped). InvalidArgument without a cluster or for a task not in it; the port's error.
absl::Status ServeAsReplica(const TrainingJob& job, const ParameterServerTrainingOptions& options,
                            int32_t task);

// -- How replicas across processes find one another ---------------------------------------------

// The node name worker `task`'s replica is published under, and checked by whoever connects.
std::string ReplicaNodeName(int32_t task);

// Connects, as the coordinator, to the replica worker `task` publishes at `address` (blocking,
// up to the network's connect timeout). The connection's errors.
absl::StatusOr<mirrored_replica_actor> ConnectToReplica(caf::actor_system& system,
                                                        const NodeAddress& address, int32_t task,
                                                        const NetworkOptions& network);

// Makes `options` those of replica `task`, published in `system`: it connects to its ring
// neighbour at an address (MirroredReplicaOptions::linker) and, without TLS, takes its ring
// messages over a ring link on the network's bind address (MirroredReplicaOptions::ring_link_bind).
void ConfigureNetworkedReplica(MirroredReplicaOptions& options, caf::actor_system& system,
                               int32_t task, const NetworkOptions& network);

}  // namespace tessera
