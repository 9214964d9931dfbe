// A closure: a replica function's registered name plus its arguments (tessera/closure.h's
// ClosureValues) and the identity the coordinator gives it. Per-worker resources (a worker's
// dataset iterator) are not arguments: the replica function names them and the worker resolves
// the name to its own instance (tessera/coordinator.h).
//
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <string>

#include "tessera/closure.h"

namespace tessera {

using ClosureId = int64_t;

struct Closure {
  ClosureId id = 0;          // assigned by the ClosureQueue
  std::string function;      // a registered replica function
  ClosureValues args;
  // The global step the closure trains (-1: none): a train step's batch is the step's (Note
  // [Closure ids that survive a restart] in core/scheduling/closure_queue.h numbers it by it too).
  int64_t step = -1;
  // Which queue issued `id` (random per queue), and, as dispatched, the lowest id of that queue
  // not yet resolved: what the closure's updates carry so that each shard applies them once
  // (Note [Exactly-once updates] in core/ps/update_ledger.h).
  uint64_t queue = 0;
  ClosureId resolved_below = 0;
};

}  // namespace tessera
