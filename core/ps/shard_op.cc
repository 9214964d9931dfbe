#include "core/ps/shard_op.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/str_join.h"
#include "tessera/status.h"

namespace tessera {
namespace {

ShardVersion VersionOf(const ShardState& s) { return ShardVersion{s.version()}; }

absl::StatusOr<ShardOpResult> Apply(ShardState& s, InfoOp& op, const SliceStore*) {
  return s.Info(op.hottest_rows);
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, ReadOp&, const SliceStore*) {
  return ShardValue{s.Read(), s.version()};
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, GatherOp& op, const SliceStore*) {
  TESSERA_ASSIGN_OR_RETURN(Tensor rows, s.Gather(op.ids));
  return ShardValue{std::move(rows), s.version()};
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, AssignOp& op, const SliceStore*) {
  TESSERA_RETURN_IF_ERROR(s.Assign(op.kind, op.value));
  return VersionOf(s);
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, ScatterRowsOp& op, const SliceStore*) {
  TESSERA_RETURN_IF_ERROR(s.Scatter(op.op, op.rows.indices, op.rows.values));
  return VersionOf(s);
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, ApplyDenseGradientOp& op, const SliceStore*) {
  TESSERA_RETURN_IF_ERROR(s.ApplyDenseGradient(op.grad));
  return VersionOf(s);
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, ApplySparseGradientOp& op, const SliceStore*) {
  TESSERA_RETURN_IF_ERROR(s.ApplySparseGradient(op.grad.indices(), op.grad.values()));
  return VersionOf(s);
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, SetOptimizerOp& op, const SliceStore*) {
  TESSERA_RETURN_IF_ERROR(s.SetOptimizer(op.spec));
  return VersionOf(s);
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, SnapshotOp&, const SliceStore*) {
  return s.Snapshot();
}

absl::StatusOr<ShardOpResult> Apply(ShardState& s, RestoreOp& op, const SliceStore*) {
  TESSERA_RETURN_IF_ERROR(s.Restore(std::move(op.slice)));
  s.TakeRememberedUpdates(op.ledger);  // none from a checkpoint: the restore's clearing stands
  return VersionOf(s);
}

absl::Status RequireStore(const SliceStore* store, const ShardState& s, absl::string_view op) {
  if (store != nullptr) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat(s.name(), ": ", op, " needs a slice store (none was given to the shard)"));
}

// What a save wrote, for the manifest (Note [One save path], core/checkpoint/save.h).
absl::StatusOr<SavedSlice> Write(const TensorSliceView& slice, const ShardSpec& spec,
                                 std::optional<OptimizerSpec> optimizer, const SaveOp& op,
                                 const SliceStore& store) {
  return WriteSlice(slice, std::move(optimizer), op, store,
                    ShardName(spec.variable, spec.shard_index, spec.num_shards));
}

std::optional<OptimizerSpec> OptimizerOf(const ShardState& s) {
  if (s.optimizer() == nullptr) return std::nullopt;
  return s.optimizer()->spec();
}

// Writes the shard's block, slots and step: a snapshot (StartSnapshot) written at once, as a
// background save writes it later; the shard serves nothing else meanwhile. So both write the
// same file, and neither initializes the rows still waiting for their initializer: the writer
// computes them (Note [Copy-on-write snapshots], core/ps/cow_snapshot.h).
absl::StatusOr<ShardOpResult> Apply(ShardState& s, SaveOp& op, const SliceStore* store) {
  TESSERA_RETURN_IF_ERROR(RequireStore(store, s, SaveOp::kName));
  TESSERA_ASSIGN_OR_RETURN(SavedSlice saved, WriteSnapshot(*StartSnapshot(s), op, *store));
  return saved;
}

// Restores the shard from the slices of `op.variable` that its rows overlap. Slots come along
// when the checkpoint's slot names are the shard's own; a checkpoint without slots restores the
// values and gives the optimizer fresh slots.
absl::StatusOr<ShardOpResult> Apply(ShardState& s, LoadOp& op, const SliceStore* store) {
  TESSERA_RETURN_IF_ERROR(RequireStore(store, s, LoadOp::kName));
  const CheckpointVariable& variable = op.variable;
  const std::string what = absl::StrCat("restoring ", s.name(), " from ", op.dir);
  if (variable.shape != s.full_shape()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": the checkpoint's ", variable.name, " has shape ", variable.shape.ToString(),
        " but the variable has ", s.full_shape().ToString()));
  }
  if (variable.dtype != s.spec().dtype) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the checkpoint's dtype is ",
                                                   DTypeName(variable.dtype), ", the variable's ",
                                                   DTypeName(s.spec().dtype)));
  }
  // Reads only the rows this shard holds, into a fresh block: the shard is unchanged until the
  // whole block has been read and checked.
  TESSERA_ASSIGN_OR_RETURN(TensorSlice block,
                           store->ReadBlock(op.dir, variable, s.row_offset(), s.spec().rows));
  const std::vector<std::string> own_slots =
      s.optimizer() != nullptr ? s.optimizer()->SlotNames() : std::vector<std::string>{};
  if (!block.slot_names.empty() && block.slot_names != own_slots) {
    if (!own_slots.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": the checkpoint has optimizer slots [", absl::StrJoin(block.slot_names, ", "),
          "] but the shard's optimizer has [", absl::StrJoin(own_slots, ", "), "]"));
    }
    block.slot_names.clear();  // a shard without an optimizer takes the values only
    block.slots.clear();
  }
  TESSERA_RETURN_IF_ERROR(Annotate(s.Restore(std::move(block)), what));
  return VersionOf(s);
}

// Whether an op carries an UpdateId (it updates rows).
template <class Op, class = void>
constexpr bool kUpdatesRows = false;
template <class Op>
constexpr bool kUpdatesRows<Op, std::void_t<decltype(&Op::update)>> = true;

}  // namespace

absl::string_view ShardOpName(const ShardOp& op) {
  return std::visit([](const auto& o) -> absl::string_view { return o.kName; }, op);
}

ShardSnapshot::~ShardSnapshot() {
  if (data != nullptr) data->Finish();
}

absl::StatusOr<SavedSlice> WriteSnapshot(const ShardSnapshot& snapshot, const SaveOp& op,
                                         const SliceStore& store) {
  TensorSliceView slice = snapshot.slice;
  slice.chunks = [data = snapshot.data](size_t tensor, int64_t chunk,
                                        absl::FunctionRef<absl::Status(absl::string_view)> use) {
    return data->ReadChunk(tensor, chunk, use);
  };
  absl::StatusOr<SavedSlice> saved = Write(slice, snapshot.spec, snapshot.optimizer, op, store);
  snapshot.data->Finish();  // the copies go now, not when the last reference does
  return saved;
}

std::shared_ptr<const ShardSnapshot> StartSnapshot(ShardState& shard) {
  auto snapshot = std::make_shared<ShardSnapshot>();
  snapshot->data = shard.StartSnapshot();
  TensorSliceView& slice = snapshot->slice;
  slice.variable = shard.spec().variable;
  slice.full_shape = shard.full_shape();
  slice.dtype = shard.spec().dtype;
  slice.row_offset = shard.row_offset();
  // The views only: shard.value() would initialize the rows the writer computes.
  const CowSnapshot& data = *snapshot->data;
  slice.value = data.tensor(0);
  if (shard.optimizer() != nullptr) slice.slot_names = shard.optimizer()->SlotNames();
  for (size_t i = 1; i < data.num_tensors(); ++i) slice.slots.push_back(data.tensor(i));
  slice.step = shard.slots().step;
  snapshot->spec = shard.spec();
  snapshot->optimizer = OptimizerOf(shard);
  return snapshot;
}

bool ChangesShard(const ShardOp& op) {
  return std::visit(
      [](const auto& o) {
        using Op = std::decay_t<decltype(o)>;
        return kUpdatesRows<Op> || std::is_same_v<Op, SetOptimizerOp> ||
               std::is_same_v<Op, RestoreOp> || std::is_same_v<Op, LoadOp>;
      },
      op);
}

int64_t RestorePartRows(const ShardState& shard, int64_t max_bytes) {
  const Shape& block = shard.block_shape();
  if (block.rank() == 0) return 1;
  const int64_t row_bytes = block.row_size() * static_cast<int64_t>(sizeof(float)) *
                            (1 + static_cast<int64_t>(shard.slots().tensors.size()));
  return std::max<int64_t>(1, max_bytes / std::max<int64_t>(1, row_bytes));
}

RestoreOp RestorePart(const ShardState& shard, int64_t begin, int64_t max_rows) {
  const int64_t rows = shard.spec().rows;  // 1 for a scalar
  RestoreOp part;
  if (begin == 0 && rows <= max_rows) {
    part.slice = shard.Snapshot();
  } else {
    part.slice = shard.SnapshotRows(begin, std::min(max_rows, rows - begin));
  }
  if (begin + max_rows >= rows) part.ledger = shard.RememberedUpdates();
  return part;
}

UpdateId* UpdateIdOf(ShardOp& op) {
  return std::visit(
      [](auto& o) -> UpdateId* {
        if constexpr (kUpdatesRows<std::decay_t<decltype(o)>>) {
          return &o.update;
        } else {
          return nullptr;
        }
      },
      op);
}

absl::StatusOr<ShardOpResult> ApplyShardOp(ShardState& shard, ShardOp op,
                                           const SliceStore* store) {
  const UpdateId* update = UpdateIdOf(op);
  if (update == nullptr || !update->tagged()) {
    return std::visit([&](auto& o) { return Apply(shard, o, store); }, op);
  }
  const UpdateId id = *update;
  if (shard.AlreadyApplied(id)) return VersionOf(shard);
  absl::StatusOr<ShardOpResult> result =
      std::visit([&](auto& o) { return Apply(shard, o, store); }, op);
  if (result.ok()) shard.RecordApplied(id);
  return result;
}

}  // namespace tessera
