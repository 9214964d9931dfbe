// Model: the runtime of a ModelSpec (tessera/model.h): forward and backward over a Batch
// given the current parameter values, for a local trainer (variables as whole tensors) and for a
// distributed worker (dense variables read whole, embedding tables read only at the rows the
// batch needs, fetched from parameter-server shards).
//
// One step, as a distributed worker runs it:
//   TESSERA_ASSIGN_OR_RETURN(auto needed, model.RowsNeeded(batch));  // sorted unique ids per table
//   ... gather needed["user_embedding"] from the shards into `user_rows` ...
//   StepParams params;
//   params.full["hidden/kernel"] = kernel_value;           // dense variables: whole values
//   params.gathered["user_embedding"] = {needed["user_embedding"], {user_rows}};
//   TESSERA_RETURN_IF_ERROR(model.ForwardBackward(batch, params, workspace, result));
//   ... send result.dense_gradients / result.sparse_gradients (global ids) to the shards ...
// A local trainer passes embedding tables whole in `full` instead, and the model gathers their
// rows straight into its activations.
//
// Thread-safety: a Model is immutable after Create; any number of threads may call its const
// methods concurrently, each with its own StepWorkspace and StepResult.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/base/sorted_ids.h"
#include "core/model/lookup_plan.h"
#include "core/variables/indexed_slices.h"
#include "tessera/data.h"
#include "tessera/model.h"
#include "tessera/tensor.h"

namespace tessera {

// An embedding table's rows for one step: the rows of `ids`, in order, in consecutive row
// blocks (the first block's rows first). A worker passes each shard's gather reply as a block of
// its own, so nothing joins them into one tensor first.
struct EmbeddingRows {
  absl::Span<const int64_t> ids;        // exactly Model::RowsNeeded's ids for this table
  std::vector<ConstTensorView> blocks;  // each [rows, dim]; their rows add up to ids.size()
};

// The parameter values one step reads. Every parameter of the model appears in exactly one map;
// the views must stay valid for the call.
struct StepParams {
  // Whole values by parameter name: every dense parameter, and embedding tables held whole.
  std::map<std::string, ConstTensorView> full;
  // Embedding tables given as the rows the batch needs.
  std::map<std::string, EmbeddingRows> gathered;
};

struct ForwardResult {
  // The mean loss over the batch; set when the batch has labels.
  std::optional<float> loss;
  // The spec's outputs by name, each [B, width].
  std::map<std::string, Tensor> outputs;
};

struct StepResult {
  float loss = 0;                         // mean over the batch
  std::map<std::string, Tensor> outputs;  // the spec's outputs by name, each [B, width]
  // dLoss/dparam of every trainable dense parameter, of the parameter's shape.
  std::map<std::string, Tensor> dense_gradients;
  // dLoss/dparam of every trainable embedding table: the rows of the batch's unique ids, which
  // are GLOBAL row ids in ascending order (duplicate ids in the batch are already summed).
  // A trainable parameter the loss does not depend on gets a zero gradient.
  std::map<std::string, IndexedSlices> sparse_gradients;
};

// Where ForwardBackward leaves its gradients, when not all in StepResult's own tensors (for
// example straight in an all-reduce buffer, scaled by the share of the batch: no copy after).
struct GradientSink {
  // Multiplies every gradient, dense and sparse: they are the gradients of `scale` x the mean
  // loss. StepResult::loss stays the unscaled mean.
  float scale = 1;
  // By parameter index (spec().params order): memory of the parameter's shape that its dense
  // gradient is written to instead of StepResult::dense_gradients, where it then has no entry.
  // Null, or past the end: into dense_gradients. Must stay valid for the call.
  std::vector<float*> dense;
};

// Per-call scratch memory (activations, their gradients, id plans), owned by the caller and
// reused across calls so that steady-state steps barely allocate. Any workspace works with any
// model; it grows to the largest batch seen. Not thread-safe: one per concurrent caller.
class StepWorkspace {
 public:
  StepWorkspace() = default;

 private:
  friend class Model;

  // Per node: its [B, width] output, and dLoss/d(output) when backpropagated; both empty for a
  // node whose output lives in a concat's (Note [Concat in place] in model.cc).
  std::vector<RowMatrix> activations;
  std::vector<RowMatrix> gradients;
  // Which rows each embedding table's lookups read (core/model/lookup_plan.h).
  LookupPlan plan;
  // Per node (embedding bags only): each example's combiner scale.
  std::vector<std::vector<float>> bag_scales;
  // Per parameter: its whole value for this call (empty for a gathered table).
  std::vector<ConstTensorView> param_values;
  std::vector<const EmbeddingRows*> param_gathered;  // null unless gathered
  // Per parameter: a gathered table's rows by position among its ids (RowAddresses).
  std::vector<std::vector<const float*>> gathered_rows;
  std::vector<const float*> lookup_rows;  // scratch: the rows one lookup reads
  std::vector<float*> dense_gradients;  // per parameter: where backward writes its gradient
};

class Model {
 public:
  // Validates `spec` (see ResolveModelSpec for every InvalidArgument it returns) and builds the
  // runtime.
  static absl::StatusOr<Model> Create(ModelSpec spec);

  const ModelSpec& spec() const { return spec_; }
  const ResolvedGraph& graph() const { return graph_; }
  // The index of parameter `name` in spec().params; NotFound when there is none.
  absl::StatusOr<int> ParamIndex(absl::string_view name) const;
  // True for embedding tables: read by rows, sparse gradients. Precondition: valid index.
  bool IsEmbedding(int param_index) const { return graph_.param_is_embedding[param_index]; }

  // For every embedding table, the sorted unique rows the batch looks up in it (the rows a
  // worker must gather: for a hashed input, the buckets of its ids). InvalidArgument when an ids
  // or id_list feature is missing or malformed (the wrong number of ids or rows, row_splits not
  // from 0 to the id count or decreasing, weights not one finite number per id), or holds an id
  // outside the table's rows (naming the feature, the example and id).
  absl::StatusOr<std::map<std::string, SortedIds>> RowsNeeded(const Batch& batch) const;
  // The same, and leaves the batch's lookup plan in `workspace`: a ForwardBackward or Forward of
  // the same batch with that workspace then checks the plan in linear time instead of sorting
  // the batch's ids again (what a distributed worker does between its gather and its compute).
  absl::StatusOr<std::map<std::string, SortedIds>> RowsNeeded(const Batch& batch,
                                                        StepWorkspace& workspace) const;

  // Forward and backward over `batch`. Reuses `result`'s tensors when their shapes fit (keep one
  // StepResult per loop so steps do not reallocate). InvalidArgument, leaving `result`
  // unspecified, when: the batch is empty or a feature is missing or mis-shaped (naming it and
  // both shapes); an id is out of range; labels are not [B, 1] or are invalid for the loss; a
  // parameter is missing from `params`, given twice or unknown, or its value has the wrong
  // shape; a gathered table's ids differ from RowsNeeded's.
  absl::Status ForwardBackward(const Batch& batch, const StepParams& params,
                               StepWorkspace& workspace, StepResult& result) const;
  // The same, with the gradients scaled and placed as `sink` says.
  absl::Status ForwardBackward(const Batch& batch, const StepParams& params,
                               StepWorkspace& workspace, StepResult& result,
                               const GradientSink& sink) const;
  // Convenience: a fresh workspace and result.
  absl::StatusOr<StepResult> ForwardBackward(const Batch& batch, const StepParams& params) const;

  // Forward only (evaluation, serving): the outputs, and the loss when the batch has labels
  // (labels empty: no loss). The same errors as ForwardBackward; only the parameters the
  // outputs and loss need are read, but every parameter must still be given.
  absl::Status Forward(const Batch& batch, const StepParams& params, StepWorkspace& workspace,
                       ForwardResult& result) const;
  absl::StatusOr<ForwardResult> Forward(const Batch& batch, const StepParams& params) const;

 private:
  Model(ModelSpec spec, ResolvedGraph graph);

  absl::Status CheckBatch(const Batch& batch, bool need_labels) const;
  absl::Status BindParams(const StepParams& params, StepWorkspace& ws) const;
  absl::Status CheckGathered(const StepWorkspace& ws) const;
  void RunForward(const Batch& batch, StepWorkspace& ws) const;
  // A registry op's view of node n's inputs, parameters and attributes.
  OpForwardArgs OpArgs(const Batch& batch, const StepWorkspace& ws, int n) const;
  void RunBackward(const Batch& batch, StepWorkspace& ws, StepResult& result,
                   const GradientSink& sink) const;
  void CopyOutputs(const StepWorkspace& ws, std::map<std::string, Tensor>& outputs) const;
  // The [B, width] matrix of value `v` (a dense input or a node's output).
  using ValueMap = Eigen::Map<const RowMatrix, 0, Eigen::OuterStride<>>;
  ValueMap Value(const Batch& batch, const StepWorkspace& ws, int v) const;
  // Node n's output and its gradient: its own matrices, or its columns of a concat's.
  MatrixRef Output(StepWorkspace& ws, int n) const;
  MatrixRef OutputGradient(StepWorkspace& ws, int n) const;
  // True when node n is in place in node `concat`'s output.
  bool InPlaceIn(int n, int concat) const { return in_concat_[n].concat == concat; }

  ModelSpec spec_;
  ResolvedGraph graph_;
  // backprop_[n]: node n's output gradient is computed (the loss depends on it through a
  // path that reaches a trainable parameter).
  std::vector<bool> backprop_;
  LookupPlanner planner_;  // after spec_ and graph_, which it is built from
  // Per node: the concat whose output holds its output as the columns from `offset` (concat
  // -1: none; Note [Concat in place]).
  struct ColumnBlock {
    int concat = -1;
    int64_t offset = 0;
  };
  std::vector<ColumnBlock> in_concat_;
  std::map<std::string, int, std::less<>> param_index_;
};

}  // namespace tessera
