// LocalTrainer: trains a Model in one process on one thread, variables as plain Tensors — the
// baseline every distributed mode is measured against.
//
// Each step runs Model::ForwardBackward with the embedding tables passed whole (the model
// gathers the batch's rows straight into its activations), then applies the gradients in place:
// a dense apply per dense variable, a sparse apply touching only the batch's unique rows per
// embedding table. Workspace and gradient buffers are reused, so steady-state steps allocate
// almost nothing.
//
// Example:
//   TESSERA_ASSIGN_OR_RETURN(ModelSpec spec, RecsysModelSpec({}));
//   TESSERA_ASSIGN_OR_RETURN(LocalTrainer trainer,
//                    LocalTrainer::Create(spec, {"adagrad", {{"learning_rate", 0.1}}}));
//   TESSERA_ASSIGN_OR_RETURN(BatchIterator batches, BatchIterator::Create(data.train, {512}));
//   TESSERA_ASSIGN_OR_RETURN(TrainProgress progress, trainer.Train(batches));
//   TESSERA_ASSIGN_OR_RETURN(EvalResult eval, trainer.Evaluate(data.test));
//
// Thread-safety: not synchronized; one thread at a time. Its Model may be shared (model()).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/model/model.h"
#include "core/training/evaluation.h"
#include "tessera/data.h"
#include "tessera/optimizer.h"
#include "tessera/tensor.h"

namespace tessera {

struct TrainProgress {
  int64_t steps = 0;       // steps taken by this call
  int64_t examples = 0;    // examples seen by this call
  double mean_loss = 0;    // example-weighted mean of the step losses (0 when no step ran)
  bool exhausted = false;  // the iterator ran out
};

class LocalTrainer {
 public:
  // Validates `spec` (as Model::Create) and `optimizer` (as MakeOptimizer), initializes every
  // variable from its ParamSpec initializer and creates its optimizer slots.
  static absl::StatusOr<LocalTrainer> Create(ModelSpec spec, const OptimizerSpec& optimizer);

  LocalTrainer(LocalTrainer&&) = default;
  LocalTrainer& operator=(LocalTrainer&&) = default;

  // One step on `batch`; returns its mean loss. InvalidArgument as Model::ForwardBackward
  // (then no variable has changed).
  absl::StatusOr<float> TrainStep(const Batch& batch);

  // -- A step in two halves around an all-reduce (the mirrored strategy, docs/design.md §3.14) --
  // Note [Packed gradients]
  // A replica of a mirrored strategy computes its gradients, the replicas combine them with one
  // all-reduce of one flat buffer, and each applies the result. The buffer holds every trainable
  // dense parameter's gradient, then for every trainable embedding table its gradient as a
  // whole [rows, dim] block followed by one mark per row (non-zero for a row the batch looked
  // up), in the order of the spec's params. Combined, a table's marks name the rows some
  // replica looked up, and only those rows are applied (sparsely, as TrainStep applies them):
  // so N replicas with batches of B examples, each scaled by its share of the N*B examples and
  // summed, apply exactly what one TrainStep over the N*B examples applies, lazy optimizers
  // included. A table costs its whole size in the buffer: the mirrored strategy is for dense
  // models, the parameter-server strategy for large tables.

  // The packed gradient's length in floats.
  int64_t packed_gradients_size() const { return packed_size_; }
  // Forward and backward over `batch`, the gradients multiplied by `scale` and written into
  // `packed` (whose length must be packed_gradients_size()); returns the batch's mean loss.
  // Applies nothing. InvalidArgument as Model::ForwardBackward, or for a buffer of another size.
  absl::StatusOr<float> ComputeGradients(const Batch& batch, float scale, absl::Span<float> packed);
  // Applies combined packed gradients: every dense parameter's, and each table's at its marked
  // rows. Counts a step. InvalidArgument for a buffer of another size (nothing applied).
  absl::Status ApplyPackedGradients(absl::Span<const float> packed);

  // A forward pass over `batch` with the current values (its loss when it has labels), as
  // Evaluate runs it, into `result`. InvalidArgument as Model::Forward.
  absl::Status Forward(const Batch& batch, ForwardResult& result);

  // Steps over `batches` until it is exhausted or `max_steps` steps were taken (-1: no limit).
  // Stops at the first error, returning it (earlier steps stay applied).
  absl::StatusOr<TrainProgress> Train(BatchIterator& batches, int64_t max_steps = -1);

  // Forward passes over all of `dataset` in batches of `batch_size` (>= 1, else
  // InvalidArgument); the dataset must carry labels.
  absl::StatusOr<EvalResult> Evaluate(const Dataset& dataset, int64_t batch_size = kEvalBatchSize);

  const Model& model() const { return *model_; }
  // Every variable by parameter name (the values a distributed run is compared against).
  const std::map<std::string, Tensor>& variables() const { return variables_; }
  // NotFound when the model has no parameter `name`.
  absl::StatusOr<const Tensor*> variable(absl::string_view name) const;
  absl::StatusOr<const OptimizerSlots*> slots(absl::string_view name) const;
  // Replaces a variable's value (e.g. to start from a checkpoint). NotFound for an unknown
  // name, InvalidArgument for a shape other than the parameter's. Slots are kept.
  absl::Status SetVariable(absl::string_view name, const Tensor& value);
  // Replaces a variable's slots and step (a restore). NotFound for an unknown name,
  // InvalidArgument unless the slots are the optimizer's, each of the variable's shape.
  absl::Status SetSlots(absl::string_view name, OptimizerSlots slots);
  const Optimizer& optimizer() const { return *optimizer_; }
  int64_t steps() const { return steps_; }

 private:
  LocalTrainer() = default;

  std::unique_ptr<const Model> model_;
  std::unique_ptr<Optimizer> optimizer_;
  // std::map nodes never move, so the views in params_ stay valid when the trainer moves.
  std::map<std::string, Tensor> variables_;
  std::map<std::string, OptimizerSlots> slots_;
  StepParams params_;
  std::vector<Tensor*> variable_by_index_;  // per spec().params entry
  std::vector<OptimizerSlots*> slots_by_index_;
  std::unique_ptr<StepWorkspace> workspace_;
  std::unique_ptr<StepResult> result_;
  GradientSink sink_;  // ComputeGradients': its dense gradients' places in the packed buffer
  std::unique_ptr<ForwardResult> eval_result_;
  int64_t steps_ = 0;
  int64_t packed_size_ = 0;
  // ApplyPackedGradients' scratch: a table's marked rows and their gradient rows.
  std::vector<int64_t> marked_rows_;
  std::vector<float> marked_values_;
};

}  // namespace tessera
