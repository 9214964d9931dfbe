// Replica functions, per-worker resources, and the context a replica function runs in.
//
// User code is registered by name in a FunctionRegistry, so a closure travels as a name plus
// ClosureValues and the same driver binary serves as coordinator and worker (docs/design.md §2):
//   - a replica function runs on a worker for one closure. It must not block: it issues
//     non-blocking variable operations (actors/ps/variable_ops.h) through ctx.shards() and calls `done`
//     exactly once, possibly later from a reply handler.
//   - a resource function builds a per-worker resource (e.g. the worker's dataset iterator) on
//     the worker that first asks for it. A worker that dies loses its resources; its replacement
//     rebuilds them on first use (TF's per-worker dataset, recreated after a preemption).
//
// Example:
//   FunctionRegistry registry;
//   registry.AddResource<BatchIterator>("batches", [&](const WorkerInfo& w) {
//     return BatchIterator::Create(*train.Shard(w.num_workers, w.index), options);
//   });
//   registry.AddReplicaFunction("count", [v](ReplicaContext& ctx, const ClosureValues& args,
//                                            Done<ClosureValues> done) {
//     AssignAsync(ctx.shards(), v, AssignKind::kAdd, Tensor(Shape{}, 1.0f),
//                 [done](absl::Status s) { done(s.ok() ? ClosureValues{} : s); });
//   });
//
// Thread-safety: a FunctionRegistry is filled before the cluster starts and is read-only after
// (workers on several threads read it). A ReplicaContext belongs to one worker actor.
#pragma once

#include <any>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <typeindex>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "actors/ps/variable_ops.h"
#include "actors/scheduling/worker_actor.h"
#include "core/scheduling/closure.h"
#include "tessera/status.h"
#include "tessera/tensor.h"

namespace tessera {

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
    return AddResourceErased(std::move(name), typeid(T),
                             [build = std::move(build)](const WorkerInfo& w)
                                 -> absl::StatusOr<std::shared_ptr<void>> {
                               absl::StatusOr<T> value = build(w);
                               if (!value.ok()) return value.status();
                               return std::shared_ptr<void>(
                                   std::make_shared<T>(*std::move(value)));
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

// What a running replica function can use: the worker's actor (to issue variable operations),
// who the worker is and its per-worker resources. One context per closure (a worker may run
// several at once, see CoordinatorOptions::closures_per_worker); the resources are the worker's,
// shared by its closures.
class ReplicaContext {
 public:
  // `self` is the worker actor; it outlives the context. `closure` is the closure it runs: its
  // updates are named after it (closure id 0: not named).
  ReplicaContext(worker_actor::pointer self, WorkerInfo info,
                 std::shared_ptr<const FunctionRegistry> registry,
                 std::shared_ptr<WorkerResources> resources, const Closure& closure)
      : self_(self),
        shards_(self),
        info_(info),
        registry_(std::move(registry)),
        resources_(std::move(resources)),
        step_(closure.step) {
    if (closure.id != 0) {
      updates_ = std::make_shared<UpdateNamer>(closure.queue, closure.id, closure.resolved_below);
      shards_.NameUpdates(updates_);
    }
  }

  worker_actor::pointer self() const { return self_; }
  // The client that sends this closure's shard operations (actors/ps/variable_ops.h), straight to
  // the shards. Every update it sends carries the closure's identity, so a shard applies it once
  // however often the closure runs (Note [Exactly-once updates] in core/ps/update_ledger.h).
  ShardClient& shards() { return shards_; }
  // What names this closure's updates, for a ShardClient of the function's own
  // (ShardClient::NameUpdates); null for a context without a closure id.
  const std::shared_ptr<UpdateNamer>& update_namer() const { return updates_; }
  const WorkerInfo& worker() const { return info_; }
  // The global step the closure trains (Closure::step: ClusterCoordinator::Schedule's `step`);
  // -1 for a closure scheduled without one.
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

 private:
  worker_actor::pointer self_;
  ShardClient shards_;
  WorkerInfo info_;
  std::shared_ptr<const FunctionRegistry> registry_;
  std::shared_ptr<WorkerResources> resources_;
  int64_t step_;
  std::shared_ptr<UpdateNamer> updates_;
};

}  // namespace tessera
