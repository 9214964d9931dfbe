// ReplicaGroup's checkpoints (coordinator/mirrored/replica_group.h): the parameter-server
// strategy's format, written by the replicas that hold the values (Note [One save path]) and
// restored into every replica, whatever layout the checkpoint was saved in.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/mirrored/replica_group.h"
#include "coordinator/ps/internal/await.h"
#include "core/base/fan_in.h"
#include "core/checkpoint/save.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "tessera/status.h"

namespace tessera {

std::vector<std::string> ReplicaGroup::Names(const ModelSpec& model) const {
  std::vector<std::string> names;
  for (const ParamSpec& param : model.params) names.push_back(param.name);
  for (const MirroredVariableSpec& spec : variables_) names.push_back(spec.name);
  return names;
}

absl::Status ReplicaGroup::Save(const std::string& dir, const CheckpointId& checkpoint,
                                const ModelSpec& model, Env* env) {
  // Note [One save path]: every replica holds the same bits of a parameter or ON_WRITE variable,
  // so the i-th is written by replica i mod N (in parallel); an ON_READ variable's reduced value
  // has no one holder, so it is written from here.
  struct Saved {
    std::string name;
    Shape shape;
    DType dtype;
  };
  std::vector<Saved> saved;
  std::vector<SaveOp> ops;
  std::vector<ReducedValue> reduced;
  for (const ParamSpec& param : model.params) {
    saved.push_back({param.name, param.shape, DType::kFloat32});
  }
  for (const MirroredVariableSpec& spec : variables_) {
    if (spec.synchronization != VariableSynchronization::kOnRead) {
      saved.push_back({spec.name, spec.shape, spec.dtype});
      continue;
    }
    TESSERA_ASSIGN_OR_RETURN(Tensor value, Read(spec.name));
    reduced.push_back({spec.name, spec.dtype, std::move(value)});
  }
  for (size_t i = 0; i < saved.size(); ++i) {
    ops.push_back(SaveOp{dir, CheckpointSliceFileName(i, saved[i].name, 0, 1), checkpoint});
  }
  std::vector<mirrored_replica_actor> replicas;
  for (const ReplicaHandle& replica : replicas_) replicas.push_back(replica.actor);
  using Done = std::function<void(absl::StatusOr<std::vector<SavedSlice>>)>;
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<SavedSlice> slices,
      internal::Await<std::vector<SavedSlice>>(
          system_, [&saved, &ops, &replicas](caf::event_based_actor* self, Done done) {
            auto join = FanIn<SavedSlice>::Start(ops.size(), std::move(done));
            for (size_t i = 0; i < ops.size(); ++i) {
              self->request(replicas[i % replicas.size()], caf::infinite, mirror_save_atom::value,
                            saved[i].name, ops[i])
                  .then([slot = join->Slot(i)](SavedSlice& slice) { slot(std::move(slice)); },
                        [slot = join->Slot(i)](caf::error& e) { slot(ErrorToStatus(e)); });
            }
          }));
  CheckpointManifest manifest;
  manifest.global_step = checkpoint.global_step;
  manifest.run_id = checkpoint.run;
  for (size_t i = 0; i < saved.size(); ++i) {
    manifest.variables.push_back(
        ManifestEntry(saved[i].name, saved[i].shape, saved[i].dtype, {std::move(slices[i])}));
  }
  TESSERA_RETURN_IF_ERROR(SaveReducedValues(reduced, dir, checkpoint, saved.size(), manifest, env));
  return WriteManifest(dir, manifest, env);
}

absl::StatusOr<int64_t> ReplicaGroup::Restore(const std::string& dir, const ModelSpec& model,
                                              const OptimizerSpec& optimizer) {
  TESSERA_ASSIGN_OR_RETURN(const CheckpointManifest manifest, ReadManifest(dir));
  TESSERA_RETURN_IF_ERROR(ValidateManifest(manifest));
  // Every block is read and checked before any replica changes.
  std::vector<TensorSlice> slices;
  for (const std::string& name : Names(model)) {
    TESSERA_ASSIGN_OR_RETURN(const CheckpointVariable* entry, FindVariable(manifest, name));
    if (entry->optimizer.has_value() && entry->optimizer->name != optimizer.name) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable ", name, ": the checkpoint in ", dir, " was trained with optimizer '",
          entry->optimizer->name, "', but this run's optimizer is '", optimizer.name,
          "': its slots cannot carry over"));
    }
    TESSERA_ASSIGN_OR_RETURN(TensorSlice slice,
                             ReadSliceBlock(dir, *entry, 0, entry->shape.rows()));
    slice.value = Share(name, std::move(slice.value));
    slice.variable = name;
    slice.row_offset = 0;
    slices.push_back(std::move(slice));
  }
  for (const TensorSlice& slice : slices) TESSERA_RETURN_IF_ERROR(LoadAll(slice));
  return manifest.global_step;
}

}  // namespace tessera
