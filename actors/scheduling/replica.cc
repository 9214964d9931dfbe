#include "actors/scheduling/replica.h"

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

absl::Status ReplicaContext::BeginCachingScope() {
  if (caching_) {
    return absl::FailedPreconditionError("a caching scope is already open (scopes do not nest)");
  }
  caching_ = true;
  return absl::OkStatus();
}

void ReplicaContext::EndCachingScope() {
  caching_ = false;
  cache_.clear();
}

void ReplicaContext::ReadCached(const VariableHandle& v, Done<Tensor> done) {
  if (!caching_) return ReadAsync(shards_, v, std::move(done));
  if (auto it = cache_.find(v.name); it != cache_.end()) return done(it->second);
  ReadAsync(shards_, v, [this, name = v.name, done = std::move(done)](absl::StatusOr<Tensor> value) {
    if (value.ok() && caching_) cache_[name] = *value;
    done(std::move(value));
  });
}

}  // namespace tessera
