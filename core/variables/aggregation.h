// Variable synchronization and aggregation (tessera/variables.h) as plain rules, apart from any
// transport: which pairs a variable may have, and how replicas' updates combine.
//
// Thread-safety: pure functions.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"
#include "tessera/variables.h"

namespace tessera {

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

// What each of `replicas` copies of an ON_READ variable holds so that the variable reads
// `reduced` (TF's restore of a sync-on-read variable, and its assign from the cross-replica
// context): `reduced` divided by the number of copies for SUM, `reduced` itself for MEAN and
// ONLY_FIRST_REPLICA (and for replicas < 1).
Tensor ReplicaShare(VariableAggregation aggregation, Tensor reduced, int64_t replicas);

}  // namespace tessera
