#include "coordinator/cluster_coordinator.h"

#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace {

int64_t Millis(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

}  // namespace

absl::StatusOr<std::unique_ptr<ClusterCoordinator>> ClusterCoordinator::Create(
    ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
    CoordinatorOptions options) {
  if (!registry) return absl::InvalidArgumentError("ClusterCoordinator: no function registry");
  if (options.queue_capacity < 1 || options.closures_per_worker < 1) {
    return absl::InvalidArgumentError(
        "ClusterCoordinator: queue_capacity and closures_per_worker must be >= 1");
  }
  InProcessCluster& cluster = strategy.cluster();
  caf::actor_system& system = cluster.system();
  auto queue = std::make_shared<ClosureQueue>(options.queue_capacity);
  std::unique_ptr<ClusterCoordinator> coordinator(
      new ClusterCoordinator(system, queue, registry));
  WorkerFactory factory = [&system, registry](const WorkerInfo& info) {
    return SpawnWorker(system, info, registry);
  };
  coordinator->actor_ = SpawnCoordinator(system, queue, cluster.num_workers(),
                                         options.closures_per_worker, factory);
  for (int32_t task = 0; task < cluster.num_ps(); ++task) {
    caf::anon_send(coordinator->actor_, watch_ps_atom::value, cluster.ps_node(task), task,
                   strategy.DescribePlacement(task));
  }
  for (int32_t slot = 0; slot < cluster.num_workers(); ++slot) {
    caf::anon_send(coordinator->actor_, add_worker_atom::value, slot);
  }
  return coordinator;
}

ClusterCoordinator::~ClusterCoordinator() {
  queue_->Shutdown(absl::CancelledError("the coordinator was shut down"));
  caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
}

absl::StatusOr<RemoteValue> ClusterCoordinator::Schedule(const std::string& function,
                                                         ClosureValues args) {
  if (absl::StatusOr<const ReplicaFunction*> fn = registry_->FindReplicaFunction(function);
      !fn.ok()) {
    return fn.status();
  }
  bool was_empty = false;
  absl::StatusOr<RemoteValue> value = queue_->Enqueue(function, std::move(args), &was_empty);
  // Into a non-empty queue, every worker is busy and pulls the next closure when it finishes.
  if (value.ok() && was_empty) caf::anon_send(actor_, dispatch_atom::value);
  return value;
}

WorkerPoolStatus ClusterCoordinator::workers() const {
  caf::scoped_actor self(system_);
  WorkerPoolStatus out;
  self->request(actor_, caf::infinite, workers_atom::value)
      .receive([&](WorkerPoolStatus& status) { out = std::move(status); }, [](caf::error&) {});
  return out;
}

bool ClusterCoordinator::KillWorker(int32_t slot) {
  caf::scoped_actor self(system_);
  bool killed = false;
  self->request(actor_, caf::infinite, kill_worker_atom::value, slot)
      .receive([&](bool k) { killed = k; }, [](caf::error&) {});
  return killed;
}

void ClusterCoordinator::RestartWorker(int32_t slot, absl::Duration delay) {
  caf::anon_send(actor_, restart_atom::value, slot, Millis(delay));
}

void ClusterCoordinator::InjectWorkerFailures(int32_t failures, int64_t closures, uint64_t seed,
                                              absl::Duration restart_delay) {
  caf::anon_send(actor_, chaos_atom::value, failures, closures, seed, Millis(restart_delay));
}

void ClusterCoordinator::KillRandomWorkerEvery(absl::Duration period, uint64_t seed,
                                               absl::Duration restart_delay) {
  caf::anon_send(actor_, chaos_atom::value, Millis(period), seed, Millis(restart_delay));
}

}  // namespace tessera
