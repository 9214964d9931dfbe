// A worker process of a networked cluster (a driver run with --role=worker): connects to the
// coordinator, fetches the variable directory, connects to every PS node it names (where each
// task is served now: a standby may have replaced one), builds its replica functions against
// it, and joins. It serves closures until the coordinator finishes; when the coordinator
// stops it because shards moved (a PS was restored), it fetches the new directory and joins
// again. A worker process that is killed and started again simply joins again; so does a worker
// whose coordinator was lost, once a coordinator is back at the spec's address (a restarted one,
// e.g. with --resume) within the connect timeout. When the run fails (a lost PS that could not
// be restored), the worker exits with the coordinator's error, whether it learns it as its
// worker's exit reason, as the answer to a directory or join request, or as the coordinator's
// own exit reason (Note [A worker watches its coordinator between memberships]).
//
// Example (what ServeAsWorker, coordinator/training/worker_role.h, does with --role=worker):
//   TESSERA_RETURN_IF_ERROR(RunWorkerNode({spec, network, task}, [&](const VariableDirectory& dir)
//   {
//     ... build ModelVariables from dir.variables, register the replica functions ...
//   }));
//
// Thread-safety: RunWorkerNode blocks the calling (non-actor) thread until the work is over.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "actors/scheduling/coordinator_actor.h"
#include "actors/scheduling/replica.h"
#include "cluster/network/network.h"
#include "core/training/job_description.h"

namespace tessera {

struct WorkerNodeOptions {
  ClusterSpec spec;
  NetworkOptions network;
  int32_t task = 0;     // this worker's index in spec.workers
  int32_t threads = 0;  // scheduler threads (0: one per core)
  // The job this worker was started for: the coordinator refuses it (InvalidArgument naming the
  // differences) unless it is the coordinator's own.
  JobDescription job;
};

// The replica functions of one variable directory.
using RegistryBuilder = std::function<absl::StatusOr<std::shared_ptr<const FunctionRegistry>>(
    const VariableDirectory& directory)>;

// Runs worker `options.task` until the coordinator finishes (OK). InvalidArgument for a task not
// in the spec; Unavailable when the coordinator cannot be reached within the connect timeout
// (also a lost one that does not come back in that time); FailedPrecondition when a node speaks
// another protocol version, or TLS against plain TCP, or refuses a certificate; InvalidArgument
// when the coordinator runs another job (naming every difference); Aborted ("the run failed:
// ...") when the coordinator's run failed; the builder's error.
absl::Status RunWorkerNode(const WorkerNodeOptions& options, const RegistryBuilder& build);

// The handle of every variable in `directory` by name (what a driver's replica functions use).
std::map<std::string, VariableHandle> HandlesByName(const VariableDirectory& directory);

}  // namespace tessera
