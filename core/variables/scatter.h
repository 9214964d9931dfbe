// Row-indexed updates and reads of one row block (a whole variable or one shard of it): the
// seven scatter ops, whole-block assignment, and the gather that is their read counterpart.
//
// Ids are block-local rows in [0, block.rows()). Every function validates all of its input before
// it writes anything, so an error leaves the block exactly as it was.
//
// Semantics (TF's, with the places TF leaves open pinned down):
// - Duplicate ids: scatter add / sub accumulate every duplicate; mul, div, min and max apply the
//   rows one after another in the order given (so duplicates compose: x * a * b); update writes
//   the rows in order, so the LAST row for an id wins (TF calls this undefined).
// - Division follows IEEE 754: x / 0 is +-inf, 0 / 0 is NaN. It is not an error.
// - min / max propagate NaN: if either operand is NaN the result is NaN (a NaN in an update is
//   never silently dropped).
//
// Thread-safety: pure functions over caller-owned memory; the caller serializes access to a block.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"
#include "tessera/variables.h"

namespace tessera {

// Applies `rows[k]` to `block` row `ids[k]` for every k with `op`'s semantics (see the file
// comment). `rows` must have shape [ids.size(), block's trailing dims...].
// Errors (InvalidArgument, block unchanged): a scalar block, an op outside the enum, `rows` of the
// wrong row count, row width or trailing shape, or an id outside [0, block.rows()).
absl::Status ScatterRows(ScatterOp op, TensorView block, absl::Span<const int64_t> ids,
                         ConstTensorView rows);

// The validation ScatterRows does, for other row updates (sparse gradients): OK when `rows_shape`
// is [ids.size(), block's trailing dims...], the block has rank >= 1, and every id lies in
// [0, block rows). InvalidArgument otherwise, its message starting with `what`.
absl::Status CheckRowUpdate(absl::string_view what, const Shape& block_shape,
                            absl::Span<const int64_t> ids, const Shape& rows_shape);

// Assigns `value` to the whole block with `kind`.
// Errors (InvalidArgument, block unchanged): a kind outside the enum, or value's shape differs
// from the block's (the message names both shapes).
absl::Status AssignBlock(AssignKind kind, TensorView block, ConstTensorView value);

// The rows `ids` of `block`, in the order given (duplicates repeated): shape
// [ids.size(), block's trailing dims...]. TF's gather / sparse_read.
// Errors (InvalidArgument): a scalar block, or an id outside [0, block.rows()).
absl::StatusOr<Tensor> GatherRows(ConstTensorView block, absl::Span<const int64_t> ids);

}  // namespace tessera
