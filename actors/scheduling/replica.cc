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

}  // namespace tessera
