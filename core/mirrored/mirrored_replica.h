// MirroredReplica: one replica's copy of every variable under a mirrored strategy (TF's
// MirroredVariable and SyncOnReadVariable), and the rules for writing to it from a replica context,
// apart from any transport. The replica actor (actors/mirrored/mirrored_replica_actor.h) owns one
// and runs the all-reduce between the replicas.
//
// Every replica holds the model's parameters and optimizer slots (a LocalTrainer: the replicas
// start identical, since initial values depend only on the spec's seeds) and the variables the
// driver creates under the strategy. A train step computes the replica's gradients into one packed
// buffer (Note [Packed gradients] in core/training/local_trainer.h), the replicas all-reduce it,
// and each applies the same bits, so the copies stay bit-identical.
//
// A replica function reads its local copies and writes through a MirroredReplicaContext, by the
// rules of Note [Writes from a replica context] (tessera/mirrored.h): writes to an ON_WRITE
// variable are held and travel in one all-reduce (PackWrites: replica r contributes its value,
// scaled by 1/N for MEAN, or zeros for ONLY_FIRST_REPLICA unless r == 0; the sum is what each
// replica applies, ApplyWrites), writes to an ON_READ variable change the replica's own copy at
// once.
//
// Thread-safety: not synchronized; owned by one actor.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/save.h"
#include "core/training/local_trainer.h"
#include "core/variables/aggregation.h"
#include "tessera/closure.h"
#include "tessera/mirrored.h"
#include "tessera/model.h"
#include "tessera/tensor.h"

namespace tessera {

class MirroredReplica {
 public:
  // The model's parameters initialized from their specs, with fresh `optimizer` slots (as
  // LocalTrainer::Create, whose errors it returns).
  static absl::StatusOr<MirroredReplica> Create(ModelSpec model, const OptimizerSpec& optimizer);

  LocalTrainer& trainer() { return trainer_; }
  const LocalTrainer& trainer() const { return trainer_; }

  // Creates a variable on this replica, initialized from its spec (the same bits on every
  // replica). AlreadyExists for a name taken (a parameter's too); InvalidArgument for an empty
  // name, a bad shape or initializer, or a synchronization/aggregation pair ValidateAggregation
  // refuses.
  absl::Status CreateVariable(const MirroredVariableSpec& spec);
  // The variable's spec; NotFound for a parameter or an unknown name.
  absl::StatusOr<const MirroredVariableSpec*> VariableSpec(absl::string_view name) const;

  // This replica's copy of a parameter or variable. NotFound for an unknown name.
  absl::StatusOr<const Tensor*> Read(absl::string_view name) const;
  // A parameter's or variable's value, optimizer slots and step as a checkpoint slice (row
  // offset 0, the whole variable). NotFound for an unknown name.
  absl::StatusOr<TensorSlice> Slice(absl::string_view name) const;
  // Writes the same as a checkpoint's one slice file of the variable, straight from this
  // replica's memory (Note [One save path], core/checkpoint/save.h): the optimizer's spec goes
  // with a parameter. NotFound for an unknown name; the store's error, naming the variable.
  absl::StatusOr<SavedSlice> Save(absl::string_view name, const SaveOp& op,
                                  const SliceStore& store) const;
  // Restores a slice of the whole variable: value, and for a parameter its slots and step when
  // the slice carries the optimizer's slots (else the slots are kept). InvalidArgument for a
  // partial slice, another shape, or slots that are not the optimizer's; NotFound for an unknown
  // name. Nothing changes on error.
  absl::Status Load(const TensorSlice& slice);

  // Note [Writes from a replica context]: replica `rank` of `members`'s contribution to the
  // all-reduce of `writes` (summed over the replicas, it is what ApplyWrites applies).
  // InvalidArgument for a write that Assign would refuse.
  absl::StatusOr<std::vector<float>> PackWrites(const std::vector<MirroredWrite>& writes,
                                                int32_t rank, int32_t members) const;
  // Makes `writes` with the reduced values `reduced` (PackWrites's layout, summed).
  absl::Status ApplyWrites(const std::vector<MirroredWrite>& writes,
                           absl::Span<const float> reduced);

 private:
  friend class MirroredReplicaContext;
  // A parameter's or variable's value, slots and step, borrowed (Slice copies it, Save writes it).
  absl::StatusOr<TensorSliceView> View(absl::string_view name) const;
  explicit MirroredReplica(LocalTrainer trainer) : trainer_(std::move(trainer)) {}

  struct Variable {
    MirroredVariableSpec spec;
    Tensor value;
  };
  absl::StatusOr<Tensor*> MutableVariable(absl::string_view name);
  // InvalidArgument unless `write` names a variable (not a parameter) of its value's shape that
  // a replica context may write held (ON_WRITE with an aggregation).
  absl::Status CheckHeldWrite(const MirroredWrite& write) const;

  LocalTrainer trainer_;
  std::map<std::string, Variable, std::less<>> variables_;
};

}  // namespace tessera
