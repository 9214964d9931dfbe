// ShardOp: every operation a variable shard serves, as one value type, and ApplyShardOp, the one
// function that applies it to a ShardState (docs/design.md §1, "One shard operation, one client").
//
// An op is a small struct naming its Result type and its name (for error messages); ShardOp is the
// variant of them all. The shard actor (actors/ps/shard_actor.h) receives ShardOps alone or in
// batches and replies with ApplyShardOp's result; ShardClient (actors/ps/shard_client.h) sends
// them. Nothing between the client and ApplyShardOp looks inside an op.
//
// Adding an operation takes three edits here and one on the wire: the op struct, its Apply overload
// in shard_op.cc, its entry in ShardOp, and its inspect overload in actors/base/messages.h.
//
//   op                      Result         ShardState call
//   InfoOp                  ShardInfo      Info(hottest_rows)
//   ReadOp                  ShardValue     Read()
//   GatherOp                ShardValue     Gather(ids)            (TF's sparse_read)
//   AssignOp                ShardVersion   Assign(kind, value)
//   ScatterRowsOp           ShardVersion   Scatter(op, ids, rows)
//   ApplyDenseGradientOp    ShardVersion   ApplyDenseGradient(grad)
//   ApplySparseGradientOp   ShardVersion   ApplySparseGradient(ids, rows)
//   SetOptimizerOp          ShardVersion   SetOptimizer(spec)
//   SnapshotOp              TensorSlice    Snapshot()
//   RestoreOp               ShardVersion   Restore(slice)
//   SaveOp                  SavedSlice     writes dir/file: block, slots, step, checkpoint
//                                          (through a SliceStore; core/checkpoint/save.h)
//   LoadOp                  ShardVersion   reads the slice files of dir its rows overlap, Restore
//
// Ids are block-local (global id minus the shard's row offset). Every result carries, or is, the
// shard's version after the op. Errors follow ShardState's contract: the shard is unchanged.
// An op that updates rows may carry an UpdateId; one the shard applied already is answered with
// its version and not applied again (Note [Exactly-once updates], core/ps/update_ledger.h).
//
// Thread-safety: ops and results are values; ApplyShardOp mutates only the shard it is given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/save.h"
#include "core/ps/shard_state.h"
#include "core/ps/update_ledger.h"
#include "core/variables/indexed_slices.h"
#include "core/variables/scatter.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"

namespace tessera {

// -- Results ---------------------------------------------------------------------------------

// The shard's version after a mutating op.
struct ShardVersion {
  int64_t version = 0;
};

// Rows read from a shard (the whole block, or gathered rows) and the shard's version then.
struct ShardValue {
  Tensor value;
  int64_t version = 0;
};

// -- Operations --------------------------------------------------------------------------------

struct InfoOp {
  using Result = ShardInfo;
  static constexpr const char* kName = "info";
  int32_t hottest_rows = 0;  // the K of ShardInfo::hottest_rows (0: none; clamped)
};

struct ReadOp {
  using Result = ShardValue;
  static constexpr const char* kName = "read";
};

struct GatherOp {
  using Result = ShardValue;
  static constexpr const char* kName = "gather";
  Ids ids;  // block-local, any order, repeats allowed
};

struct AssignOp {
  using Result = ShardVersion;
  static constexpr const char* kName = "assign";
  AssignKind kind = AssignKind::kAssign;
  Tensor value;     // the block's shape
  UpdateId update;  // Note [Exactly-once updates] (core/ps/update_ledger.h)
};

struct ScatterRowsOp {
  using Result = ShardVersion;
  static constexpr const char* kName = "scatter";
  ScatterOp op = ScatterOp::kAdd;
  IndexedSlices rows;  // block-local indices
  UpdateId update;
};

struct ApplyDenseGradientOp {
  using Result = ShardVersion;
  static constexpr const char* kName = "apply_gradient";
  Tensor grad;  // the block's shape
  UpdateId update;
};

struct ApplySparseGradientOp {
  using Result = ShardVersion;
  static constexpr const char* kName = "apply_sparse_gradient";
  SparseRows grad;  // block-local indices; repeats are summed
  UpdateId update;
};

struct SetOptimizerOp {
  using Result = ShardVersion;
  static constexpr const char* kName = "set_optimizer";
  OptimizerSpec spec;
};

struct SnapshotOp {
  using Result = TensorSlice;
  static constexpr const char* kName = "snapshot";
};

struct RestoreOp {
  using Result = ShardVersion;
  static constexpr const char* kName = "restore";
  TensorSlice slice;  // the shard's own rows (ShardState::Restore)
  // The updates the shard is to count as applied (Note [Exactly-once updates],
  // core/ps/update_ledger.h): none for a restore from a checkpoint; the primary's ledger when the
  // restore seeds its backup.
  std::vector<RememberedQueue> ledger;
};

struct LoadOp {
  using Result = ShardVersion;
  static constexpr const char* kName = "load";
  std::string dir;              // the checkpoint directory
  CheckpointVariable variable;  // the manifest's entry of the shard's variable
};

using ShardOp = std::variant<InfoOp, ReadOp, GatherOp, AssignOp, ScatterRowsOp,
                             ApplyDenseGradientOp, ApplySparseGradientOp, SetOptimizerOp,
                             SnapshotOp, RestoreOp, SaveOp, LoadOp>;

using ShardOpResult = std::variant<ShardVersion, ShardValue, ShardInfo, TensorSlice, SavedSlice>;

// "gather", "apply_sparse_gradient", ...: the op's name for messages.
absl::string_view ShardOpName(const ShardOp& op);

// Whether `op` changes the shard when it succeeds: everything but info, read, gather, snapshot
// and save. A backed-up shard's backup gets exactly these (Note [Shard backups],
// actors/ps/shard_actor.h).
bool ChangesShard(const ShardOp& op);

// The UpdateId of an op that updates rows (assign, scatter, dense and sparse gradients); null
// for any other op.
UpdateId* UpdateIdOf(ShardOp& op);

// A shard as of a cut, for a save off the shard (SaveOp::in_background): the slice's metadata
// and shapes, its data read through a copy-on-write snapshot (Note [Copy-on-write snapshots],
// core/ps/cow_snapshot.h), with what a save records of it. The snapshot is finished when this is
// destroyed, written or not, and the shard then goes on without it.
struct ShardSnapshot {
  ShardSnapshot() = default;
  ShardSnapshot(const ShardSnapshot&) = delete;
  ShardSnapshot& operator=(const ShardSnapshot&) = delete;
  ~ShardSnapshot();

  TensorSliceView slice;  // shapes only: the data comes from `data`
  ShardSpec spec;
  std::optional<OptimizerSpec> optimizer;  // the rule's full spec; none without one
  std::shared_ptr<CowSnapshot> data;
};
// A shard's state as RestoreOps, for a rebuilt backup (Note [Shard backups],
// actors/ps/shard_actor.h): a shard larger than a network message still goes, part by part.
// RestorePartRows: the rows a part of at most about `max_bytes` of values and slots holds (whole
// rows, at least one; the last part may hold fewer); 1 for a scalar.
int64_t RestorePartRows(const ShardState& shard, int64_t max_bytes);
// The part from row `begin` (a multiple of RestorePartRows) as the shard is now: at most
// `max_rows` rows, the ledger when it is the last (one part, the whole Snapshot(), when it all
// fits). Applied in order to a shard of the same spec, the parts from row 0 up leave it as one
// RestoreOp{Snapshot(), RememberedUpdates()} would. Taken one at a time as the shard changes,
// with every change in between applied to the receiver in order too, they still leave the
// receiver as the shard is after the last one.
RestoreOp RestorePart(const ShardState& shard, int64_t begin, int64_t max_rows);
// Starts a snapshot of `shard` as it is now (ShardState::StartSnapshot): nothing is copied.
std::shared_ptr<const ShardSnapshot> StartSnapshot(ShardState& shard);
// Writes `snapshot` as `op` says, through `store`: SaveOp's work, off the shard
// (SaveOp::in_background). The same file and result as ApplyShardOp's SaveOp.
absl::StatusOr<SavedSlice> WriteSnapshot(const ShardSnapshot& snapshot, const SaveOp& op,
                                         const SliceStore& store);

// Applies `op` to `shard`. `store` serves SaveOp and LoadOp (FailedPrecondition without one).
// Errors are ShardState's (InvalidArgument, FailedPrecondition), with the shard unchanged, or the
// store's for SaveOp / LoadOp.
absl::StatusOr<ShardOpResult> ApplyShardOp(ShardState& shard, ShardOp op, const SliceStore* store);

// The result of an `Op` out of a ShardOpResult; DataLoss when it holds another kind (a reply
// from a node of another build).
template <class Op>
absl::StatusOr<typename Op::Result> ResultOf(ShardOpResult result) {
  if (auto* r = std::get_if<typename Op::Result>(&result)) return std::move(*r);
  return absl::DataLossError(absl::StrCat("a ", Op::kName, " was answered with a result of kind ",
                                          result.index()));
}

}  // namespace tessera
