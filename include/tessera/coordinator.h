// ClusterCoordinator: schedules closures on a cluster's workers (TF's
// tf.distribute.coordinator.ClusterCoordinator), and what a closure runs: replica functions and
// per-worker resources, registered by name, and the ReplicaContext a replica function runs in.
//
// User code is registered by name in a FunctionRegistry, so a closure travels as a name plus
// ClosureValues (tessera/closure.h) and the same program serves as coordinator and worker:
//   - a replica function runs on a worker for one closure. It must not block: it issues the
//     context's non-blocking variable operations and calls `done` exactly once, possibly later,
//     from one of their callbacks.
//   - a resource function builds a per-worker resource (e.g. the worker's dataset iterator) on
//     the worker that first asks for it. A worker that dies loses its resources; its replacement
//     rebuilds them on first use (TF's per-worker dataset, recreated after a preemption).
//
// Schedule queues a closure and returns its RemoteValue at once; an idle worker runs it. When a
// worker dies mid-closure the closure runs again on another (its RemoteValue resolves once), and
// every update it makes is applied once however often it runs. The first closure that fails
// fails the queue: its error is raised once by the next Schedule, Join or Done, and the closures
// queued behind it are cancelled (TF's semantics). A lost PS is an Unavailable error naming the
// node and the variables it held (a networked run of RunTrainingJob recovers it instead, from its
// checkpoints or the shards' backups).
//
// Example:
//   auto registry = std::make_shared<FunctionRegistry>();
//   TESSERA_RETURN_IF_ERROR(registry->AddReplicaFunction(
//       "count", [counter](ReplicaContext& ctx, const ClosureValues&, Done<ClosureValues> done) {
//         ctx.Assign(counter, AssignKind::kAdd, Tensor(Shape{}, 1.0f),
//                    [done](absl::Status s) {
//                      if (!s.ok()) return done(s);
//                      done(ClosureValues());
//                    });
//       }));
//   TESSERA_ASSIGN_OR_RETURN(auto coordinator, ClusterCoordinator::Create(strategy, registry));
//   for (int i = 0; i < 100; ++i) {
//     TESSERA_ASSIGN_OR_RETURN(RemoteValue done, coordinator->Schedule("count"));
//   }
//   TESSERA_RETURN_IF_ERROR(coordinator->Join());
//
// Thread-safety: a FunctionRegistry is filled before the coordinator starts and is read-only
// after (workers on several threads read it). A ReplicaContext belongs to the worker running its
// closure. A ClusterCoordinator's methods are safe from any thread that is not a worker's.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tessera/closure.h"
#include "tessera/status.h"
#include "tessera/strategy.h"
#include "tessera/tensor.h"
#include "tessera/variables.h"

namespace tessera {

// Who a worker is: its index among the worker slots (a replacement keeps the index of the worker
// it replaces) and how many slots there are.
struct WorkerInfo {
  int32_t index = 0;
  int32_t num_workers = 1;
};

class ReplicaContext;

using ReplicaFunction =
    std::function<void(ReplicaContext& ctx, const ClosureValues& args, Done<ClosureValues> done)>;

class FunctionRegistry {
 public:
  // AlreadyExists when `name` is taken; InvalidArgument for an empty name or function.
  absl::Status AddReplicaFunction(std::string name, ReplicaFunction fn);

  // Registers a builder of a per-worker resource of type T.
  template <class T>
  absl::Status AddResource(std::string name,
                           std::function<absl::StatusOr<T>(const WorkerInfo&)> build) {
    if (!build) return absl::InvalidArgumentError("resource " + name + ": no function");
    return AddResourceErased(
        std::move(name), typeid(T),
        [build = std::move(build)](const WorkerInfo& w) -> absl::StatusOr<std::shared_ptr<void>> {
          absl::StatusOr<T> value = build(w);
          if (!value.ok()) return value.status();
          return std::shared_ptr<void>(std::make_shared<T>(*std::move(value)));
        });
  }

  // NotFound naming the function when it is not registered.
  absl::StatusOr<const ReplicaFunction*> FindReplicaFunction(absl::string_view name) const;

 private:
  friend class ReplicaContext;
  using ErasedBuilder = std::function<absl::StatusOr<std::shared_ptr<void>>(const WorkerInfo&)>;
  struct ResourceEntry {
    std::type_index type;
    ErasedBuilder build;
  };
  absl::Status AddResourceErased(std::string name, std::type_index type, ErasedBuilder build);

  std::map<std::string, ReplicaFunction, std::less<>> functions_;
  std::map<std::string, ResourceEntry, std::less<>> resources_;
};

// A worker's per-worker resources by name, built on first use; they die with the worker.
using WorkerResources = std::map<std::string, std::shared_ptr<void>, std::less<>>;

class ShardClient;  // internal: sends shard operations (actors/ps/shard_client.h)
class UpdateNamer;  // internal: names a closure's updates (core/ps/update_ledger.h)
struct Closure;     // internal: a closure as dispatched (core/scheduling/closure.h)

// What a running replica function can use: who the worker is, the closure's step, the worker's
// per-worker resources, and non-blocking operations on the strategy's variables. One context per
// closure (a worker may run several at once, CoordinatorOptions::closures_per_worker); the
// resources are the worker's, shared by its closures.
class ReplicaContext {
 public:
  // Internal: the worker makes one for each closure it runs; `shards` sends the closure's shard
  // operations, and names its updates after it (closure id 0: not named).
  ReplicaContext(std::unique_ptr<ShardClient> shards, WorkerInfo info,
                 std::shared_ptr<const FunctionRegistry> registry,
                 std::shared_ptr<WorkerResources> resources, const Closure& closure);
  ~ReplicaContext();
  ReplicaContext(const ReplicaContext&) = delete;
  ReplicaContext& operator=(const ReplicaContext&) = delete;

  const WorkerInfo& worker() const { return info_; }
  // The global step the closure trains (ClusterCoordinator::Schedule's `step`); -1 for a closure
  // scheduled without one.
  int64_t step() const { return step_; }

  // This worker's instance of resource `name`, built on first use. NotFound for an unregistered
  // name, InvalidArgument when T is not the registered type, or the builder's error.
  template <class T>
  absl::StatusOr<T*> Resource(absl::string_view name) {
    auto entry = registry_->resources_.find(name);
    if (entry == registry_->resources_.end()) {
      return absl::NotFoundError(absl::StrCat("no per-worker resource named ", name));
    }
    if (entry->second.type != std::type_index(typeid(T))) {
      return absl::InvalidArgumentError(
          absl::StrCat("per-worker resource ", name, " has another type"));
    }
    auto it = resources_->find(name);
    if (it == resources_->end()) {
      absl::StatusOr<std::shared_ptr<void>> built = entry->second.build(info_);
      if (!built.ok()) return Annotate(built.status(), absl::StrCat("building ", name));
      it = resources_->emplace(std::string(name), *std::move(built)).first;
    }
    return static_cast<T*>(it->second.get());
  }

  // The replica context's reads and updates of a variable: each sends its shard operations at
  // once, straight to the shards, and calls `done` exactly once, on this worker, when every
  // shard has answered or with the first error (as ShardedVariable's, tessera/variables.h).
  // On an ON_READ variable they act on this worker's own copy. Every update carries the
  // closure's identity, so a shard applies it once however often the closure runs.
  void Read(const ShardedVariable& v, Done<Tensor> done);
  void Gather(const ShardedVariable& v, absl::Span<const int64_t> ids, Done<Tensor> done);
  void Assign(const ShardedVariable& v, AssignKind kind, Tensor value, DoneStatus done);
  void Scatter(const ShardedVariable& v, ScatterOp op, absl::Span<const int64_t> ids,
               const Tensor& rows, DoneStatus done);

  // Internal, for the library's replica functions: the client of this closure's shard
  // operations (actors/ps/variable_ops.h), and what names its updates (null without a closure
  // id), for a client of the function's own.
  ShardClient& shards() { return *shards_; }
  const std::shared_ptr<UpdateNamer>& update_namer() const { return updates_; }

 private:
  std::unique_ptr<ShardClient> shards_;
  WorkerInfo info_;
  std::shared_ptr<const FunctionRegistry> registry_;
  std::shared_ptr<WorkerResources> resources_;
  int64_t step_ = -1;
  std::shared_ptr<UpdateNamer> updates_;
};

// -- The coordinator -----------------------------------------------------------------------------

struct CoordinatorOptions {
  // Closures that may wait to run before Schedule blocks.
  int64_t queue_capacity = 256;
  // Closures each worker runs at once. 1 (TF's behaviour) leaves a worker idle while its
  // closure's messages travel; 2 overlaps one closure's parameter fetch and gradient push with
  // another's compute.
  int32_t closures_per_worker = 1;
};

struct CoordinatorRun;    // internal: what a training run adds (coordinator/scheduling/)
struct WorkerPoolStatus;  // internal: the worker slots (actors/base/messages.h)
struct PsRecovery;        // internal: one PS recovery (coordinator/scheduling/ps_recovery.h)
class ClosureScheduler;   // internal: what stands behind the coordinator

class ClusterCoordinator {
 public:
  // Starts one worker per worker slot of `strategy`'s cluster (on a networked cluster it listens
  // at the spec's coordinator address instead, and worker processes join), running functions
  // from `registry`, which is complete by now (read-only from here on). The strategy's
  // variables must be created first, so that a PS failure can name them. InvalidArgument for no
  // registry or options < 1.
  static absl::StatusOr<std::unique_ptr<ClusterCoordinator>> Create(
      ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
      CoordinatorOptions options = {});
  // Internal: the same with what a training run adds (PS recovery from its checkpoints, the job
  // its workers must have been started for, closure ids that survive a restart).
  static absl::StatusOr<std::unique_ptr<ClusterCoordinator>> Create(
      ParameterServerStrategy& strategy, std::shared_ptr<const FunctionRegistry> registry,
      CoordinatorOptions options, CoordinatorRun run);
  // Stops the workers; closures still queued are abandoned.
  ~ClusterCoordinator();
  ClusterCoordinator(const ClusterCoordinator&) = delete;
  ClusterCoordinator& operator=(const ClusterCoordinator&) = delete;

  // Queues function(args) and returns its RemoteValue at once (blocks only while the queue is
  // full). Raises a pending closure error once, or the PS-unavailable error; NotFound for a
  // function the registry does not have. `step`: the global step the closure trains, if it trains
  // one (the replica function reads it: ReplicaContext::step).
  absl::StatusOr<RemoteValue> Schedule(const std::string& function, ClosureValues args = {},
                                       std::optional<int64_t> step = std::nullopt);
  // Waits until nothing is queued or running; raises the pending error once.
  absl::Status Join();
  // Whether everything scheduled has finished, without waiting; raises the pending error once.
  absl::StatusOr<bool> Done();
  ClosureStats stats() const;

  // Networked mode: the port workers join on (the spec's, or the one picked for port 0).
  uint16_t port() const;
  // Networked mode: waits until at least `min_workers` workers have joined, printing who is
  // connected as they come. DeadlineExceeded after `timeout`, naming who is missing.
  absl::Status WaitForWorkers(int32_t min_workers, absl::Duration timeout);

  // Internal, for the library: the closure queue's identity (every closure's queue), the worker
  // slots, the PS recoveries so far (oldest first), and what stands behind the coordinator.
  uint64_t queue_identity() const;
  WorkerPoolStatus workers() const;
  std::vector<PsRecovery> recoveries() const;
  ClosureScheduler& scheduler() const { return *scheduler_; }

 private:
  explicit ClusterCoordinator(std::unique_ptr<ClosureScheduler> scheduler);
  std::unique_ptr<ClosureScheduler> scheduler_;
};

}  // namespace tessera
