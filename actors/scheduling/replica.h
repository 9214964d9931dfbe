// The library's side of replica functions (tessera/coordinator.h): with this header a replica
// function reaches its closure's shard client (ReplicaContext::shards()) and the non-blocking
// operations of actors/ps/variable_ops.h on it, and the actor behind it (shards().self()), as the
// training loop's train_step and the evaluation's eval_step do.
//
// Example:
//   registry.AddReplicaFunction("count", [v](ReplicaContext& ctx, const ClosureValues& args,
//                                            Done<ClosureValues> done) {
//     AssignAsync(ctx.shards(), v, AssignKind::kAdd, Tensor(Shape{}, 1.0f),
//                 [done](absl::Status s) {
//                   if (!s.ok()) return done(s);
//                   done(ClosureValues());
//                 });
//   });
//
// Thread-safety: as tessera/coordinator.h.
#pragma once

#include "actors/ps/shard_client.h"
#include "actors/ps/variable_ops.h"
#include "core/scheduling/closure.h"
#include "tessera/coordinator.h"
