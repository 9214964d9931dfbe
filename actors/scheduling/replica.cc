#include "actors/scheduling/replica.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/ps/sharded_variable_state.h"
#include "core/ps/update_ledger.h"

namespace tessera {

absl::Status FunctionRegistry::AddReplicaFunction(std::string name, ReplicaFunction fn) {
  if (name.empty() || !fn) {
    return absl::InvalidArgumentError("a replica function needs a name and a function");
  }
  if (functions_.count(name) > 0 || resources_.count(name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("a function named ", name, " is registered"));
  }
  functions_.emplace(std::move(name), std::move(fn));
  return absl::OkStatus();
}

absl::Status FunctionRegistry::AddResourceErased(std::string name, std::type_index type,
                                                 ErasedBuilder build) {
  if (name.empty()) return absl::InvalidArgumentError("a resource needs a name");
  if (functions_.count(name) > 0 || resources_.count(name) > 0) {
    return absl::AlreadyExistsError(absl::StrCat("a function named ", name, " is registered"));
  }
  resources_.emplace(std::move(name), ResourceEntry{type, std::move(build)});
  return absl::OkStatus();
}

absl::StatusOr<const ReplicaFunction*> FunctionRegistry::FindReplicaFunction(
    absl::string_view name) const {
  auto it = functions_.find(name);
  if (it == functions_.end()) {
    return absl::NotFoundError(absl::StrCat("no replica function named ", name));
  }
  return &it->second;
}

ReplicaContext::ReplicaContext(std::unique_ptr<ShardClient> shards, WorkerInfo info,
                               std::shared_ptr<const FunctionRegistry> registry,
                               std::shared_ptr<WorkerResources> resources, const Closure& closure)
    : shards_(std::move(shards)),
      info_(info),
      registry_(std::move(registry)),
      resources_(std::move(resources)),
      step_(closure.step) {
  if (closure.id != 0) {
    updates_ = std::make_shared<UpdateNamer>(closure.queue, closure.id, closure.resolved_below);
    shards_->NameUpdates(updates_);
  }
}

ReplicaContext::~ReplicaContext() = default;

namespace {

// The handle of `v` this worker's operations take (an ON_READ variable's is the worker's copy),
// not copied: the operations only read it while they send.
absl::StatusOr<const VariableHandle*> HandleOn(const ShardedVariable& v, const WorkerInfo& worker) {
  if (v.name().empty()) return absl::FailedPreconditionError("no variable (an empty handle)");
  return ShardedVariableAccess::HandleFor(v, worker.index);
}

}  // namespace

void ReplicaContext::Read(const ShardedVariable& v, Done<Tensor> done) {
  absl::StatusOr<const VariableHandle*> h = HandleOn(v, info_);
  if (!h.ok()) return done(h.status());
  ReadAsync(*shards_, **h, std::move(done));
}

void ReplicaContext::Gather(const ShardedVariable& v, absl::Span<const int64_t> ids,
                            Done<Tensor> done) {
  absl::StatusOr<const VariableHandle*> h = HandleOn(v, info_);
  if (!h.ok()) return done(h.status());
  GatherAsync(*shards_, **h, ids, ShardingStrategy::kDiv, std::move(done));
}

void ReplicaContext::Assign(const ShardedVariable& v, AssignKind kind, Tensor value,
                            DoneStatus done) {
  absl::StatusOr<const VariableHandle*> h = HandleOn(v, info_);
  if (!h.ok()) return done(h.status());
  AssignAsync(*shards_, **h, kind, std::move(value), std::move(done));
}

void ReplicaContext::Scatter(const ShardedVariable& v, ScatterOp op, absl::Span<const int64_t> ids,
                             const Tensor& rows, DoneStatus done) {
  absl::StatusOr<const VariableHandle*> h = HandleOn(v, info_);
  if (!h.ok()) return done(h.status());
  ScatterAsync(*shards_, **h, op, ids, rows, std::move(done));
}

}  // namespace tessera
