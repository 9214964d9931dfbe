// IndexedSlices: rows of a tensor addressed by row id (TF's name). It is both a sparse gradient
// (an embedding's gradient touches only the batch's ids) and the operand of a scatter op.
// SparseRows: the same as a shard's sparse gradient op carries it, its rows possibly shared.
//
// Note [A step's gradient is split without a copy]
// A train step's sparse gradient of a table has one row per id of the step's sorted unique ids,
// so the rows bound for each shard are one contiguous range of it (the ids' grouping is
// in_shard_order, core/variables/shard_layout.h). The ops for the table's shards therefore share
// the gradient rather than copy their rows out of it: each SparseRows holds the tensor (read-only)
// and its range. In one process the shard reads its rows where the worker's backward pass wrote
// them; across processes the transport serializes the range straight from the tensor, on the wire
// exactly as an IndexedSlices of the range (actors/base/core_inspect.h), and the receiver's
// SparseRows owns its values. A worker writes a shared gradient's memory again only once no op
// holds it (actors/ps/train_step.cc, Note [Step scratch reuse]).
//
// Thread-safety: value types, no synchronization; a SparseRows' shared values are never written
// while it holds them, so copies of one may be read on any thread.
#pragma once

#include <memory>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

struct IndexedSlices {
  Ids indices;    // one row id per row of `values`; global or shard-local as the API says
  Tensor values;  // [indices.size(), trailing dims of the addressed tensor...]
};

// Row ids and one row of values per id, the values its own or a row range of a shared tensor
// (Note [A step's gradient is split without a copy]).
class SparseRows {
 public:
  SparseRows() = default;
  // An IndexedSlices' ids and values, its own.
  SparseRows(IndexedSlices own);  // NOLINT(google-explicit-constructor): an IndexedSlices is one
  // `indices` and rows [begin, begin + indices.size()) of `source`, shared. Precondition: the
  // range lies within `source`, whose rank is at least 1.
  static SparseRows Share(Ids indices, std::shared_ptr<const Tensor> source, int64_t begin);

  const Ids& indices() const { return indices_; }
  // [indices().size(), trailing dims...], valid while this SparseRows (or a copy) lives.
  ConstTensorView values() const { return ConstTensorView(data_, shape_); }

 private:
  Ids indices_;
  std::shared_ptr<const Tensor> source_;  // an own value is a source of its own
  const float* data_ = nullptr;
  Shape shape_{0};
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
