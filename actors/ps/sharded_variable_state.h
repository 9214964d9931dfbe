// What stands behind a ShardedVariable (tessera/variables.h): the actor system its blocking
// operations send from and the handle of its shards (or, ON_READ, of every worker's copy), and
// the means to make and repoint such handles (the strategy's: coordinator/ps/strategy.h). The
// handle's accessors live on this floor, so that a replica function's context (the worker's,
// actors/scheduling/) can take a ShardedVariable; its blocking operations are the coordinator's
// (coordinator/ps/sharded_variable.cc).
//
// Thread-safety: a State is immutable once a ShardedVariable holds it; repointing a shard makes
// the variable a new one (its other copies keep the old).
#pragma once

#include <caf/actor_system.hpp>
#include <cstdint>
#include <optional>

#include "actors/ps/variable_ops.h"
#include "tessera/variables.h"

namespace tessera {

struct ShardedVariable::State {
  caf::actor_system* system = nullptr;
  VariableHandle handle;  // ON_READ: name, shape, dtype and aggregation only
  std::optional<PerWorkerVariable> per_worker;
};

class ShardedVariableAccess {
 public:
  // An ON_WRITE variable (partitioned or not), its blocking operations sent from `system`.
  static ShardedVariable Make(caf::actor_system* system, VariableHandle handle);
  // An ON_READ variable: one copy per worker.
  static ShardedVariable Make(caf::actor_system* system, PerWorkerVariable per_worker);
  // Networked PS recovery: shard `shard` (or worker `copy`'s ON_READ copy) of `v` is now `actor`,
  // on PS task `task`.
  static void ReplaceShard(ShardedVariable& v, int64_t shard, shard_actor actor, int32_t task);
  static void ReplaceCopy(ShardedVariable& v, int64_t copy, shard_actor actor, int32_t task);
  // ForWorker without the copy: the handle worker `slot`'s operations on `v` take, valid while
  // `v` lives (ON_WRITE: v's own; ON_READ: the worker's copy). InvalidArgument for no such copy.
  static absl::StatusOr<const VariableHandle*> HandleFor(const ShardedVariable& v, int32_t slot);
};

}  // namespace tessera
