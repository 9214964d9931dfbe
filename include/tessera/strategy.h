// ParameterServerStrategy: creates variables on a cluster's parameter servers, sharded along
// their first axis by a partitioner (TF's tf.distribute.experimental.ParameterServerStrategy and
// its variable_partitioner).
//
// A variable's number of shards comes from the partitioner in force — the variable's own
// (VariableOptions::partitioner), else the innermost open PartitionerScope, else the strategy's —
// and a scalar, a variable with no rows, or one colocated with another variable is never
// partitioned. Shards are named "name/part_i" and placed round-robin over the PS tasks with one
// counter for the whole strategy (4 shards on 2 PS -> ps 0, 1, 0, 1). Each shard initializes its
// own rows on its PS node from the initializer, so a shard's values do not depend on how the
// variable is split, and the driver never builds the whole value. An ON_READ variable gets one
// unpartitioned copy per worker slot ("name/worker_k"). With two shard copies every shard has a
// backup on the next PS task, which takes over when its primary's PS is lost.
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(auto cluster, Cluster::StartInProcess({.num_ps = 2, .num_workers =
//   2})); ParameterServerStrategy strategy(*cluster, *FixedShardsPartitioner(4));
//   TESSERA_ASSIGN_OR_RETURN(ShardedVariable emb, strategy.CreateVariable(
//       {.name = "emb", .shape = Shape{100000, 32},
//        .initializer = {"random_uniform", {{"minval", -0.05}, {"maxval", 0.05}}, 1}}));
//
// Thread-safety: not synchronized: create variables from one thread (the driver's). The
// variables' operations are safe from any thread (tessera/variables.h).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "tessera/cluster.h"
#include "tessera/model.h"
#include "tessera/optimizer.h"
#include "tessera/partitioner.h"
#include "tessera/tensor.h"
#include "tessera/variables.h"

namespace tessera {

struct VariableOptions {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  InitializerSpec initializer{"zeros", {}, 0};
  std::optional<OptimizerSpec> optimizer;  // the rule its shards apply gradients with
  VariableSynchronization synchronization = VariableSynchronization::kAuto;
  VariableAggregation aggregation = VariableAggregation::kNone;
  bool trainable = true;
  std::optional<Partitioner> partitioner;          // overrides scopes and the strategy's
  const ShardedVariable* colocate_with = nullptr;  // unpartitioned, on that variable's first PS
};

class Model;            // internal: a model ready to run (core/model/model.h)
struct ModelVariables;  // internal: a model's variables (actors/ps/train_step.h)
class ShardPlacement;   // internal: what stands behind the strategy (coordinator/ps/strategy.h)

class ParameterServerStrategy {
 public:
  // `partitioner`: the default for variables created under this strategy ("none" by default).
  // `shard_copies`: 1, or 2 for a backup of every shard (needs two PS tasks or more, else
  // creating a variable is InvalidArgument).
  explicit ParameterServerStrategy(Cluster& cluster, Partitioner partitioner = {},
                                   int32_t shard_copies = 1);
  // On a networked cluster, drops every shard it created from the PS processes (which outlive
  // the job), so the next job on them starts clean. In process, the shards die with the cluster.
  ~ParameterServerStrategy();
  ParameterServerStrategy(const ParameterServerStrategy&) = delete;
  ParameterServerStrategy& operator=(const ParameterServerStrategy&) = delete;

  // Creates the variable, all its shards at once. InvalidArgument for an empty or duplicate name,
  // a bad shape, dtype, synchronization / aggregation pair (an ON_READ variable needs an
  // aggregation, MEAN a floating dtype), initializer or optimizer (the PS node's message names the
  // shard); Unavailable when a PS node is gone; ResourceExhausted when a PS node cannot allocate
  // a shard. On error no shard of the variable is left behind.
  absl::StatusOr<ShardedVariable> CreateVariable(const VariableOptions& options);
  // Creates several variables, every shard of all of them at once, in `options`' order; errors
  // as CreateVariable's, and on error no shard of any of them is left behind.
  absl::StatusOr<std::vector<ShardedVariable>> CreateVariables(
      const std::vector<VariableOptions>& options);

  // Internal, for the library's training loop: one variable per parameter of `model`,
  // partitioned when the ParamSpec asks for it (else never), all trained by `optimizer`. Errors
  // as CreateVariable's; on error no shard of any of the model's variables is left behind. With
  // kRestoredNext the shards start as zeros rather than initialized (a resumed run: a checkpoint
  // restore overwrites every value next).
  enum class InitialValues { kInitialized, kRestoredNext };
  absl::StatusOr<std::shared_ptr<const ModelVariables>> CreateModelVariables(
      std::shared_ptr<const Model> model, const OptimizerSpec& optimizer,
      InitialValues values = InitialValues::kInitialized);

  // While a scope lives, variables without their own partitioner use `partitioner`.
  class PartitionerScope {
   public:
    PartitionerScope(ParameterServerStrategy& strategy, Partitioner partitioner);
    ~PartitionerScope();
    PartitionerScope(const PartitionerScope&) = delete;
    PartitionerScope& operator=(const PartitionerScope&) = delete;

   private:
    ParameterServerStrategy& strategy_;
  };

  Cluster& cluster();
  const Partitioner& partitioner() const;
  int32_t shard_copies() const;
  // The variables by name.
  const std::map<std::string, ShardedVariable>& variables() const;
  // "emb/part_0, w" for every shard placed on PS `task`, in creation order; "(none)".
  std::string DescribePlacement(int32_t task) const;
  // The optimizer variable `name`'s shards were created with (as given, defaults not filled in);
  // nullopt without one, or for no such variable.
  std::optional<OptimizerSpec> OptimizerOf(const std::string& name) const;

  // Internal, for the library: the shards' placement, backups and recovery.
  ShardPlacement& placement() const { return *placement_; }

 private:
  std::unique_ptr<ShardPlacement> placement_;
};

}  // namespace tessera
