// Optimizers: pure update rules on a row block (a whole variable or one shard of it) and its
// slots, apart from any transport (ps-lite's good idea).
//
// A rule holds only hyperparameters. All state — the slot tensors and the step count — lives in
// an OptimizerSlots owned by whoever owns the row block: a shard actor next to its rows, or the
// local trainer. So one rule object can serve every shard, and slots travel with the shard into
// checkpoints.
//
// Thread-safety: an Optimizer is immutable after construction and safe to share; OptimizerSlots
// is a value that its owner mutates.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

// Names a rule and its hyperparameters, e.g. {"adagrad", {{"learning_rate", 0.1}}}. Serializable:
// checkpoints store it, and MakeOptimizer(spec) rebuilds the identical rule.
struct OptimizerSpec {
  std::string name;                      // "sgd", "momentum", "adagrad", "adam" or "ftrl"
  std::map<std::string, double> params;  // missing hyperparameters take the rule's defaults
};

// The optimizer state of one row block.
struct OptimizerSlots {
  std::vector<Tensor> tensors;  // one per Optimizer::SlotNames() entry, each of the block's shape
  int64_t step = 0;             // updates applied so far (Adam's bias correction uses it)
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // The hyperparameters with every default filled in.
  virtual const OptimizerSpec& spec() const = 0;
  // Slot names in the order of OptimizerSlots::tensors, e.g. {"accumulator"} for Adagrad.
  virtual std::vector<std::string> SlotNames() const = 0;
  // Fresh slots for a row block of `block_shape` (e.g. Adagrad's accumulator filled with 0.1).
  virtual OptimizerSlots CreateSlots(const Shape& block_shape) const = 0;

  // Applies a dense gradient of the block's shape. InvalidArgument on a shape mismatch (of the
  // gradient or of a slot), leaving `value` and `slots` unchanged.
  virtual absl::Status ApplyDense(TensorView value, OptimizerSlots& slots,
                                  ConstTensorView grad) const = 0;
  // Applies gradient rows to the block's rows `rows` (block-local ids) and touches nothing else.
  // Duplicate ids are summed first. Every id and width is validated before anything changes:
  // InvalidArgument leaves `value` and `slots` unchanged.
  virtual absl::Status ApplySparse(TensorView value, OptimizerSlots& slots,
                                   absl::Span<const int64_t> rows,
                                   ConstTensorView grad_rows) const = 0;
};

// Builds the rule `spec` names. InvalidArgument for an unknown name, an unknown hyperparameter
// or an out-of-range value (e.g. a negative learning rate).
absl::StatusOr<std::unique_ptr<Optimizer>> MakeOptimizer(const OptimizerSpec& spec);

}  // namespace tessera
