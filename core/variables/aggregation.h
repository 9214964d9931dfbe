// Variable synchronization and aggregation (TF's tf.VariableSynchronization and
// tf.VariableAggregation) as plain rules, apart from any transport.
//
// - ON_WRITE (the default, AUTO): one copy of the variable (possibly sharded) on the parameter
//   servers. Updates that several replicas make in one step are first combined with the
//   variable's aggregation (SUM, MEAN or ONLY_FIRST_REPLICA) and applied once. NONE cannot
//   combine replica updates: such an update is an error.
// - ON_READ: one copy per worker (e.g. a per-worker counter); a read from the driver reduces the
//   copies with the aggregation. NONE is an error there too.
// - MEAN needs a floating dtype.
//
// Thread-safety: pure functions.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

// The numeric values are part of the wire format: never renumber.
enum class VariableSynchronization : int32_t { kAuto = 0, kOnWrite = 1, kOnRead = 2 };
enum class VariableAggregation : int32_t {
  kNone = 0,
  kSum = 1,
  kMean = 2,
  kOnlyFirstReplica = 3,
};

absl::string_view SynchronizationName(VariableSynchronization sync);  // "auto", "on_write", ...
absl::string_view AggregationName(VariableAggregation aggregation);  // "none", "sum", ...

// Checks a variable's (synchronization, aggregation, dtype) when it is created.
// InvalidArgument: a value outside the enums, MEAN on a non-floating dtype, or ON_READ with NONE
// (a per-worker variable must say how its copies combine).
absl::Status ValidateAggregation(VariableSynchronization sync, VariableAggregation aggregation,
                                 DType dtype);

// Combines one update per replica into the one update that is applied: their sum, their mean or
// the first one. Every value must have the first one's shape. InvalidArgument when there are no
// values, the shapes differ (naming both), or `aggregation` is NONE ("an update from a replica
// context needs an aggregation" — TF's error).
absl::StatusOr<Tensor> AggregateReplicaValues(VariableAggregation aggregation,
                                              absl::Span<const Tensor> values);

}  // namespace tessera
