// ShardState: everything one variable shard is and does, as plain C++ (no actors).
//
// A shard owns one contiguous row block of one variable ("emb/part_1": rows [row_offset, row_offset
// + rows) of the full variable), the optimizer rule that trains it, that rule's slots, and a
// version: the number of successful mutating operations applied since creation. The shard actor
// (actors/ps/shard_actor.h) is a thin mailbox around one ShardState; the local trainer can use one
// directly.
//
// Contract of every mutating operation: all input is validated first; on error the value, the
// slots and the version are exactly as before, and the error is InvalidArgument (bad ids, widths,
// shapes, specs) or FailedPrecondition (a gradient for a shard without an optimizer), its message
// prefixed with the shard's name. On success the version increases by one.
//
// Rows are initialized when an operation first touches them (Note [Rows initialized on first
// touch], core/ps/first_touch.h), and the shard counts how often updates name each row (Note [Row
// update counts], core/ps/row_update_counts.h).
//
// Note [One step count per variable]
// A rule such as Adam corrects its moments by the optimizer's step count, so the count must mean
// the same on every shard of a variable: the number of gradient applications to the variable.
// Every application reaches every shard — a sparse gradient sends the shards none of whose rows
// it names an empty update (0 rows), which steps their count and changes nothing else — so all
// shards of a variable count alike, a checkpoint records that one count, and a restore into
// another number of shards continues exactly as the original layout would (tests/coordinator/
// checkpoint_test.cc). Before, a shard counted only the updates that named its rows, shards
// diverged, and a restored shard took the largest count of the slices it read.
//
// Thread-safety: none, const methods included (they may initialize rows). A ShardState is owned
// by one actor (or one thread) at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/checkpoint/checkpoint.h"
#include "core/ps/cow_snapshot.h"
#include "core/ps/first_touch.h"
#include "core/ps/row_update_counts.h"
#include "core/ps/update_ledger.h"
#include "core/variables/scatter.h"
#include "tessera/model.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"

namespace tessera {

// Where a shard sits in its variable and how to build it. Serializable (a PS node receives it).
struct ShardSpec {
  std::string variable;     // the variable's name, e.g. "emb"
  int32_t shard_index = 0;  // i in "emb/part_i"
  int32_t num_shards = 1;   // shards of the variable; 1 means unpartitioned (named `variable`)
  Shape full_shape;         // the whole variable's shape
  int64_t row_offset = 0;   // the shard's first row in the variable
  int64_t rows = 0;         // the shard's row count (1 for a scalar variable)
  DType dtype = DType::kFloat32;
  InitializerSpec initializer;             // fills the shard's own rows (tessera/model.h)
  std::optional<OptimizerSpec> optimizer;  // none: the shard cannot apply gradients
};

// "emb/part_1" for shard 1 of a partitioned variable; just "emb" when num_shards == 1 (TF names
// an unpartitioned variable by its own name).
std::string ShardName(absl::string_view variable, int32_t shard_index, int32_t num_shards);

// The shape of the shard's block: full_shape with `rows` rows ([] for a scalar variable).
Shape ShardBlockShape(const ShardSpec& spec);

// InvalidArgument unless: the variable name is non-empty; the dtype is one of DType's values (a
// spec may come off the wire); 1 <= num_shards and 0 <= shard_index <
// num_shards; full_shape has no negative dim; the rows [row_offset, row_offset + rows) lie inside
// full_shape (a scalar variable: one unpartitioned shard, offset 0, 1 row); an optimizer is only
// given for a floating dtype. The initializer and optimizer specs themselves are checked by
// ShardState::Create.
absl::Status ValidateShardSpec(const ShardSpec& spec);

// A cheap description of a shard (no values).
struct ShardInfo {
  std::string name;  // "emb/part_1"
  Shape full_shape;
  int64_t row_offset = 0;
  Shape block_shape;
  DType dtype = DType::kFloat32;
  std::string optimizer;  // the rule's name; empty without one
  int64_t version = 0;
  int64_t bytes = 0;  // bytes held: the block plus the slots
  // Row-updating operations applied (assign, scatter, dense and sparse gradients): the version
  // less the restores and optimizer changes, so equal to it for a shard only ever trained.
  int64_t updates = 0;
  // Rows some update has named (every row once a dense update happened); rows only gathered or
  // read are not counted (Note [Row update counts]).
  int64_t rows_touched = 0;
  // The rows most often updated, most first (ties: lower row first), at most the K asked for;
  // rows never updated are not listed. Empty unless asked for (Info(k)).
  std::vector<HotRow> hottest_rows;
  // The optimizer's step: gradient applications to the variable (Note [One step count per
  // variable]); 0 without an optimizer.
  int64_t step = 0;
  // Updates answered as applied without applying them: repeats of an update the shard had
  // applied, from a closure's earlier attempt (Note [Exactly-once updates]).
  int64_t duplicate_updates = 0;
  // Each closure queue the shard's ledger remembers and its mark: (queue, resolved_below), every
  // closure of that queue below the mark resolved (UpdateLedger::Marks).
  std::vector<std::pair<uint64_t, int64_t>> ledger_marks;
};

class ShardState {
 public:
  // Builds the shard `spec` describes: validates it, builds the optimizer rule and its fresh
  // slots, and initializes the shard's OWN rows from the initializer (never the full value).
  // InvalidArgument for an invalid spec, an unknown or invalid initializer or optimizer; the
  // message names the shard. The version starts at 0.
  static absl::StatusOr<ShardState> Create(const ShardSpec& spec);
  // Create's checks alone (the spec, its initializer and its optimizer), allocating nothing: the
  // same errors, cheaply, for a PS node to refuse a bad spec before it builds the shard.
  static absl::Status Validate(const ShardSpec& spec);

  ShardState(ShardState&&) = default;
  // A shard assigned over, or destroyed, first hands a snapshot still being written what it has
  // not read (Note [Copy-on-write snapshots], core/ps/cow_snapshot.h).
  ShardState& operator=(ShardState&&) = default;
  ~ShardState();

  const std::string& name() const { return name_; }
  const ShardSpec& spec() const { return spec_; }
  const Shape& full_shape() const { return spec_.full_shape; }
  int64_t row_offset() const { return spec_.row_offset; }
  const Shape& block_shape() const { return value_.shape(); }
  int64_t version() const { return version_; }
  // The block itself (a view onto the shard's memory, valid while the shard lives unchanged).
  const Tensor& value() const {
    InitializeAllRows();
    return value_;
  }
  // Null when the shard has no optimizer.
  const Optimizer* optimizer() const { return optimizer_.get(); }
  const OptimizerSlots& slots() const { return slots_; }
  // Bytes held by the block and the slots.
  int64_t bytes() const;
  // The description, with the `hottest_rows` hottest rows (clamped to [0, kMaxHottestRows]; 0:
  // none, and no scan of the counters).
  ShardInfo Info(int32_t hottest_rows = 0) const;

  // Note [Row update counts]: how often updates named block-local row `local_row` (0 for a row
  // outside the block); rows some update named; row-updating operations applied; the `k` rows
  // most often updated (global ids, most first, ties by row; rows never updated left out).
  int64_t RowUpdates(int64_t local_row) const { return row_updates_.RowUpdates(local_row); }
  int64_t rows_touched() const { return row_updates_.rows_touched(); }
  int64_t updates() const { return row_updates_.updates(); }
  std::vector<HotRow> HottestRows(int32_t k) const { return row_updates_.HottestRows(k); }

  // A copy of the whole block.
  Tensor Read() const { return value(); }
  // The rows `local_ids` (block-local), in order: TF's sparse_read. InvalidArgument for an id
  // outside [0, rows).
  absl::StatusOr<Tensor> Gather(absl::Span<const int64_t> local_ids) const;

  // assign / assign_add / assign_sub of the whole block. InvalidArgument on a shape mismatch.
  absl::Status Assign(AssignKind kind, ConstTensorView value);
  // A scatter op on block-local ids (core/variables/scatter.h for duplicate, division and NaN
  // semantics). InvalidArgument for an id out of range or rows of the wrong shape.
  absl::Status Scatter(ScatterOp op, absl::Span<const int64_t> local_ids, ConstTensorView rows);

  // One optimizer step with a gradient of the block's shape. FailedPrecondition without an
  // optimizer; InvalidArgument on a shape mismatch.
  absl::Status ApplyDenseGradient(ConstTensorView grad);
  // One optimizer step on the rows `local_ids` only (none: the step count alone advances, Note
  // [One step count per variable]); duplicate ids are summed first.
  // FailedPrecondition without an optimizer; InvalidArgument for an id out of range or rows of the
  // wrong shape.
  absl::Status ApplySparseGradient(absl::Span<const int64_t> local_ids, ConstTensorView rows);

  // Note [Exactly-once updates] (core/ps/update_ledger.h), for ApplyShardOp: whether the update
  // `id` names was applied here already (counted as a duplicate when it was; always false for an
  // untagged id), and remembering an applied one. A restore forgets them all.
  bool AlreadyApplied(const UpdateId& id);
  void RecordApplied(const UpdateId& id) { applied_.Record(id); }
  // What the shard counts as applied, and taking that of another copy of it (a backup seeded
  // with its primary's state, RestoreOp::ledger).
  std::vector<RememberedQueue> RememberedUpdates() const { return applied_.Remembered(); }
  void TakeRememberedUpdates(const std::vector<RememberedQueue>& queues) {
    applied_.Replace(queues);
  }

  // Replaces the optimizer with the rule `spec` names and fresh slots (step 0). Setting the rule
  // the shard already has (same name and hyperparameters, defaults filled in) changes nothing and
  // keeps the slots. InvalidArgument for an unknown or invalid spec or a non-floating dtype.
  absl::Status SetOptimizer(const OptimizerSpec& spec);

  // The shard's state as a TensorSlice (core/checkpoint/checkpoint.h, the one representation of a
  // shard's rows and slots, in memory and in a checkpoint): its variable, full shape, dtype and row
  // offset, and its block, slots and step, copied.
  TensorSlice Snapshot() const;
  // Rows [begin, begin + count) of the block the same way: a TensorSlice naming just those rows
  // (row_offset is the shard's plus `begin`), their value and slot rows copied, and the step.
  // The caller keeps the range inside the block.
  TensorSlice SnapshotRows(int64_t begin, int64_t count) const;
  // The block and slots as they are now, every row initialized first, for a writer on another
  // thread (Note [Copy-on-write snapshots], core/ps/cow_snapshot.h): nothing is copied now; until
  // the snapshot is finished the shard copies a chunk aside before its first write there. Its
  // tensors are the value, then each slot. A snapshot started while an earlier one is still being
  // written first gives the earlier one a copy of every chunk it has not read.
  std::shared_ptr<CowSnapshot> StartSnapshot();
  // Takes back a slice's value, slots and step. The slice must have the block's shape and, when
  // it carries slots, exactly this shard's slot names (in order) with tensors of the block's
  // shape; when it names its variable, it must be this shard's rows of that variable (same name,
  // full shape, dtype and row offset). A slice without slots (e.g. from an exported model)
  // restores the value and gives the optimizer fresh slots. A named slice may also hold a run of
  // the shard's rows only (SnapshotRows): those rows are restored, with their slots, which it
  // must then carry when the shard has an optimizer, and the step; the other rows are left as
  // they are. InvalidArgument otherwise, shard unchanged. The version increases by one, like any
  // update.
  absl::Status Restore(const TensorSlice& slice);
  // The same, taking the slice's tensors instead of copying them (a whole block's).
  absl::Status Restore(TensorSlice&& slice);

 private:
  ShardState() = default;
  absl::Status RequireOptimizer(absl::string_view what) const;
  // Restore's validation: the block row `slice` starts at, or InvalidArgument, naming what
  // differs, unless it fits.
  absl::StatusOr<int64_t> CheckRestorable(const TensorSlice& slice) const;
  // Restore of a slice that CheckRestorable found to hold rows [first, ...) of the block, not all.
  void RestoreRows(int64_t first, const TensorSlice& slice);
  // The end of a restore: the step, an empty ledger, a new version.
  void FinishRestore(int64_t step);

  // Note [Rows initialized on first touch]. Ids outside the block are skipped (the operation's own
  // checks report them).
  void InitializeRows(absl::Span<const int64_t> local_ids) const;
  void InitializeAllRows() const;
  // Note [Copy-on-write snapshots]: called before writing rows `local_ids` (valid ids), rows
  // [begin, end), or anything (or freeing a tensor) of the value and slots.
  void BeforeWriteRows(absl::Span<const int64_t> local_ids);
  void BeforeWriteRange(int64_t begin, int64_t end);
  void BeforeWriteAll();
  // The snapshot its writer has not finished, if any (a finished one is let go here).
  CowSnapshot* SnapshotBeingWritten() const;

  // The snapshot being written, if any. Declared first: a move assignment hands it what it has
  // not read (SnapshotHold's) before the tensors below are replaced. Mutable as value_ is: a
  // const read that initializes rows writes into what the snapshot reads.
  struct SnapshotHold {
    SnapshotHold() = default;
    SnapshotHold(SnapshotHold&& other) noexcept : snapshot(std::move(other.snapshot)) {}
    SnapshotHold& operator=(SnapshotHold&& other) noexcept {
      Detach();
      snapshot = std::move(other.snapshot);
      return *this;
    }
    ~SnapshotHold() = default;  // ~ShardState detaches, while the tensors are still there
    // The snapshot gets a copy of every chunk it has not read, and the shard lets it go.
    void Detach() {
      if (snapshot != nullptr) snapshot->BeforeWriteAll();
      snapshot = nullptr;
    }
    std::shared_ptr<CowSnapshot> snapshot;
  };
  mutable SnapshotHold snapshot_;
  ShardSpec spec_;
  std::string name_;
  mutable Tensor value_;
  // Note [Rows initialized on first touch]; mutable as value_ is.
  mutable UninitializedRows uninitialized_;
  std::unique_ptr<Optimizer> optimizer_;
  OptimizerSlots slots_;
  int64_t version_ = 0;
  // Note [Row update counts].
  RowUpdateCounts row_updates_;
  // Note [Exactly-once updates].
  UpdateLedger applied_;
  int64_t duplicate_updates_ = 0;
};

}  // namespace tessera
