// IndexedSlices: rows of a tensor addressed by row id (TF's name). It is both a sparse gradient
// (an embedding's gradient touches only the batch's ids) and the operand of a scatter op.
//
// Thread-safety: a value type, no synchronization.
#pragma once

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

struct IndexedSlices {
  Ids indices;    // one row id per row of `values`; global or shard-local as the API says
  Tensor values;  // [indices.size(), trailing dims of the addressed tensor...]
};

// Checks that `values` has one row per index, rows of `row_size` elements, and every index in
// [0, row_limit). InvalidArgument naming the first offender otherwise.
absl::Status ValidateIndexedRows(absl::Span<const int64_t> indices, ConstTensorView values,
                                 int64_t row_limit, int64_t row_size);

// True when `ids` are strictly increasing, hence sorted and unique (an empty or one-id list is).
// A linear scan: what a worker's ids are by construction (Model::RowsNeeded sorts and dedups),
// so the sparse paths check it and skip their sort or hash map when it holds.
bool IsSortedUnique(absl::Span<const int64_t> ids);

// Sums the rows of repeated indices. The result has unique indices in ascending order.
// Precondition: values.rows() == indices.size().
IndexedSlices SumDuplicates(absl::Span<const int64_t> indices, ConstTensorView values);

}  // namespace tessera
