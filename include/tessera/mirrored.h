// MirroredStrategy: synchronous data-parallel training with a copy of every variable on each
// replica (TF's tf.distribute.MirroredStrategy; docs/design.md §3.14).
//
// A cluster's worker slots each hold a replica: the model's parameters and optimizer slots, and
// every variable created under the strategy. A step runs on all replicas at once, each on its
// share of the global batch (batch_size examples), and their gradients are summed by a ring
// all-reduce before each applies the same result, so the copies stay bit-identical. Variables are
// MirroredVariables (ON_WRITE: one value, copied on every replica) or SyncOnReadVariables (ON_READ:
// a copy per replica, reduced with the variable's aggregation when the driver reads it).
//
//   Run(function, args)      a registered replica function on every replica at once: one result
//                            per replica (a PerReplica value, TF's strategy.run)
//   Reduce(op, per_replica)  their SUM or MEAN (strategy.reduce)
//   LocalResults(value)      the per-replica values (strategy.experimental_local_results)
//   Gather(per_replica)      concatenated along the first axis (strategy.gather)
//
// Note [Writes from a replica context]
// A replica function reads its local copies and writes through its MirroredReplicaContext. Writes
// to an ON_WRITE variable are held until the function returns and then made on every replica with
// the variable's aggregation, as TF's MirroredVariable.assign in a replica context does: SUM adds
// the replicas' values, MEAN averages them, ONLY_FIRST_REPLICA takes replica 0's, and NONE is an
// error ("an update from a replica context needs an aggregation"); MEAN on a non-floating variable
// is refused when it is created. All the held writes of one call travel in one all-reduce, and
// every replica applies the same reduced bits, so the copies stay identical. Writes to an ON_READ
// variable (a metric, a counter) change only the replica's own copy, at once.
//
// Example:
//   auto functions = std::make_shared<MirroredFunctions>();
//   (*functions)["count"] = [](MirroredReplicaContext& ctx, const ClosureValues&)
//       -> absl::StatusOr<ClosureValues> {
//     TESSERA_RETURN_IF_ERROR(ctx.AssignAdd("seen", Tensor(Shape{}, 1.0f)));
//     return ClosureValues{};
//   };
//   TESSERA_ASSIGN_OR_RETURN(auto cluster, Cluster::StartInProcess({.num_workers = 2}));
//   TESSERA_ASSIGN_OR_RETURN(auto strategy, MirroredStrategy::Create(*cluster,
//       {.model = spec, .optimizer = {"sgd", {{"learning_rate", 0.1}}}, .train = train,
//        .batch_size = 32, .functions = functions}));
//   TESSERA_ASSIGN_OR_RETURN(MirroredStrategy::StepResult step, strategy->TrainStep(0));
//
// Training a TrainingJob with --strategy=mirrored (tessera/training.h) runs the same replicas, in
// this process or one per worker process, with checkpoints, evaluation and a lost replica's
// recovery; this handle is the strategy a program drives itself.
//
// Thread-safety: not synchronized; the driver's thread. Calls block that thread.
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
#include "tessera/closure.h"
#include "tessera/cluster.h"
#include "tessera/data.h"
#include "tessera/evaluation.h"
#include "tessera/model.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"
#include "tessera/variables.h"

namespace tessera {

// How per-replica values combine (TF's tf.distribute.ReduceOp). The numeric values are part of
// the wire format: never renumber.
enum class ReduceOp : int32_t { kSum = 0, kMean = 1 };

// One value per replica, in replica order (TF's PerReplica).
template <class T>
struct PerReplica {
  std::vector<T> values;
};

// TF's experimental_local_results.
template <class T>
const std::vector<T>& LocalResults(const PerReplica<T>& value) {
  return value.values;
}

// A variable created under the mirrored strategy, besides the model's parameters.
struct MirroredVariableSpec {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  InitializerSpec initializer{"zeros", {}, 0};
  VariableSynchronization synchronization = VariableSynchronization::kAuto;
  VariableAggregation aggregation = VariableAggregation::kNone;
};

// Internal: one held write (Note [Writes from a replica context]).
struct MirroredWrite {
  std::string variable;
  bool add = false;  // assign_add rather than assign
  Tensor value;
};

class MirroredReplica;  // internal: one replica's copies (core/mirrored/mirrored_replica.h)

// What a replica function sees: its replica, the local copies, and the writes it makes.
class MirroredReplicaContext {
 public:
  // Internal: the replica makes one for each call.
  MirroredReplicaContext(MirroredReplica& replica, int32_t replica_id, int32_t num_replicas)
      : replica_(replica), replica_id_(replica_id), num_replicas_(num_replicas) {}

  int32_t replica_id() const { return replica_id_; }      // TF's replica_id_in_sync_group
  int32_t num_replicas() const { return num_replicas_; }  // num_replicas_in_sync
  // This replica's copy of `name` (a parameter or a variable). NotFound for an unknown name.
  absl::StatusOr<const Tensor*> Read(absl::string_view name) const;
  // assign / assign_add from the replica context (Note [Writes from a replica context]).
  // InvalidArgument, holding nothing, for an unknown variable (NotFound), a value of another
  // shape, or an ON_WRITE variable whose aggregation is NONE.
  absl::Status Assign(absl::string_view name, Tensor value);
  absl::Status AssignAdd(absl::string_view name, Tensor value);

  // Internal: the writes held for the all-reduce, in the order they were made.
  std::vector<MirroredWrite>& held_writes() { return held_; }

 private:
  absl::Status Write(absl::string_view name, Tensor value, bool add);

  MirroredReplica& replica_;
  int32_t replica_id_;
  int32_t num_replicas_;
  std::vector<MirroredWrite> held_;
};

// A replica function: registered by name in every process that hosts replicas; args are the
// same on every replica, the result is the replica's own (a PerReplica value on the driver).
using MirroredFunction = std::function<absl::StatusOr<ClosureValues>(MirroredReplicaContext& ctx,
                                                                     const ClosureValues& args)>;
using MirroredFunctions = std::map<std::string, MirroredFunction, std::less<>>;

// What every replica is built from.
struct MirroredOptions {
  ModelSpec model;
  OptimizerSpec optimizer;
  Dataset train;                                       // each step's global batch is drawn from it
  Dataset test;                                        // what Evaluate evaluates on (may be empty)
  int64_t batch_size = 32;                             // each replica's examples per step (>= 1)
  uint64_t seed = 1;                                   // the training data's shuffling
  std::shared_ptr<const MirroredFunctions> functions;  // may be null: no replica functions
};

class ReplicaGroup;  // internal: what stands behind the strategy (coordinator/mirrored/)
class Model;         // internal: a model ready to run (core/model/model.h)

class MirroredStrategy {
 public:
  // One replica in each of `cluster`'s worker slots, in this process, its model initialized from
  // the spec's seeds (so every replica starts identical), joined in a ring (rank = slot).
  // InvalidArgument for batch_size < 1 or a model or optimizer that does not validate;
  // FailedPrecondition on a networked cluster (its workers serve replicas when a TrainingJob
  // runs with --strategy=mirrored --mode=net).
  static absl::StatusOr<std::unique_ptr<MirroredStrategy>> Create(Cluster& cluster,
                                                                  MirroredOptions options);
  // Stops the replicas. Destroy the strategy before the cluster.
  ~MirroredStrategy();
  MirroredStrategy(const MirroredStrategy&) = delete;
  MirroredStrategy& operator=(const MirroredStrategy&) = delete;

  int32_t num_replicas_in_sync() const;
  int64_t global_batch_size() const;  // batch_size * num_replicas_in_sync()

  // -- Variables --------------------------------------------------------------------------------
  // A variable on every replica (MirroredVariable, or SyncOnReadVariable with kOnRead).
  // AlreadyExists for a name taken (a parameter's too); InvalidArgument for an empty name, a bad
  // shape or initializer, or a synchronization / aggregation pair TF refuses. On error no replica
  // keeps it.
  absl::Status CreateVariable(const MirroredVariableSpec& spec);
  // A parameter's or ON_WRITE variable's value (every copy is the same), or an ON_READ
  // variable's copies reduced with its aggregation. NotFound for an unknown name.
  absl::StatusOr<Tensor> Read(const std::string& name);
  // Every replica's copy (an ON_WRITE variable's are bit-identical).
  absl::StatusOr<PerReplica<Tensor>> ReadPerReplica(const std::string& name);
  // Sets a parameter or variable to `value` (optimizer slots kept): every replica's copy, except
  // that an ON_READ SUM variable's copies each get value / num_replicas_in_sync(), so that it
  // reads `value` (TF's assign from the cross-replica context; a restore does the same). NotFound
  // for an unknown name; InvalidArgument for a value of another shape.
  absl::Status Assign(const std::string& name, const Tensor& value);

  // -- Replica functions ------------------------------------------------------------------------
  // Runs `function` (of the options' functions) on every replica with `args`; its held writes
  // are made on every replica before the results come back. NotFound for an unknown function;
  // the first replica's error otherwise.
  absl::StatusOr<PerReplica<ClosureValues>> Run(const std::string& function,
                                                const ClosureValues& args);
  // The replicas' values summed or averaged elementwise. InvalidArgument for no values or
  // values of different shapes.
  static absl::StatusOr<Tensor> Reduce(ReduceOp op, const PerReplica<Tensor>& value);
  // The replicas' values concatenated along the first axis. InvalidArgument for no values, a
  // scalar, or values whose other dimensions differ.
  static absl::StatusOr<Tensor> Gather(const PerReplica<Tensor>& value);

  // -- Training ---------------------------------------------------------------------------------
  struct StepResult {
    double loss = 0;       // the global batch's mean loss
    int64_t examples = 0;  // the global batch's size
  };
  // One synchronous step on global batch `step` of the training data (a pure function of the
  // data, the seed and the global batch size). A replica's error.
  absl::StatusOr<StepResult> TrainStep(int64_t step);
  // The options' test set evaluated on the replicas (the same figures as a local evaluation of
  // the same values; no examples for an empty test set). A replica's error.
  absl::StatusOr<EvalResult> Evaluate();

  // Internal, for the library: the replicas' ring, checkpoints and a lost replica's recovery.
  ReplicaGroup& group() const { return *group_; }

 private:
  MirroredStrategy(std::unique_ptr<ReplicaGroup> group, std::shared_ptr<const Model> model,
                   int64_t test_examples);

  std::unique_ptr<ReplicaGroup> group_;
  std::shared_ptr<const Model> model_;  // for Evaluate
  int64_t test_examples_;
};

}  // namespace tessera
