#include "core/model/model.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/ops.h"
#include "tessera/status.h"

namespace tessera {
namespace {

void CopyToTensor(Eigen::Map<const RowMatrix> value, Tensor& t) {
  const Shape shape{value.rows(), value.cols()};
  if (t.shape() != shape) t = Tensor(shape);
  t.matrix() = value;
}

}  // namespace

Model::Model(ModelSpec spec, ResolvedGraph graph)
    : spec_(std::move(spec)), graph_(std::move(graph)), planner_(spec_, graph_) {
  const int num_nodes = static_cast<int>(graph_.nodes.size());
  for (int p = 0; p < static_cast<int>(spec_.params.size()); ++p) {
    param_index_.emplace(spec_.params[p].name, p);
  }
  // upstream[n]: a trainable parameter feeds node n (through n itself or its inputs).
  std::vector<bool> upstream(num_nodes, false);
  for (int n = 0; n < num_nodes; ++n) {
    const ResolvedGraph::Node& node = graph_.nodes[n];
    for (int p : node.params) upstream[n] = upstream[n] || spec_.params[p].trainable;
    for (int v : node.inputs) {
      if (v >= graph_.num_inputs) upstream[n] = upstream[n] || upstream[v - graph_.num_inputs];
    }
  }
  // Note [Concat in place]: an embedding read only by one concat (an op whose output holds its
  // inputs) writes into the concat's columns.
  std::vector<int> uses(num_nodes, 0);
  for (const ResolvedGraph::Node& node : graph_.nodes) {
    for (int v : node.inputs) {
      if (v >= graph_.num_inputs) ++uses[v - graph_.num_inputs];
    }
  }
  for (const auto& [name, v] : graph_.output_values) ++uses[v - graph_.num_inputs];
  ++uses[graph_.loss_value - graph_.num_inputs];
  in_concat_.assign(num_nodes, ColumnBlock());
  for (int c = 0; c < num_nodes; ++c) {
    const ResolvedGraph::Node& node = graph_.nodes[c];
    if (node.is_embedding() || !node.op->output_holds_inputs) continue;
    int64_t offset = 0;
    for (int v : node.inputs) {
      const int n = v - graph_.num_inputs;
      if (n >= 0 && graph_.nodes[n].is_embedding() && uses[n] == 1) {
        in_concat_[n] = {c, offset};
      }
      offset += graph_.value_widths[v];
    }
  }
  backprop_.assign(num_nodes, false);
  const int loss_node = graph_.loss_value - graph_.num_inputs;
  backprop_[loss_node] = upstream[loss_node];
  for (int n = num_nodes - 1; n >= 0; --n) {
    if (!backprop_[n]) continue;
    for (int v : graph_.nodes[n].inputs) {
      if (v >= graph_.num_inputs && upstream[v - graph_.num_inputs]) {
        backprop_[v - graph_.num_inputs] = true;
      }
    }
  }
}

absl::StatusOr<Model> Model::Create(ModelSpec spec) {
  TESSERA_ASSIGN_OR_RETURN(ResolvedGraph graph, ResolveModelSpec(spec));
  return Model(std::move(spec), std::move(graph));
}

absl::StatusOr<int> Model::ParamIndex(absl::string_view name) const {
  auto it = param_index_.find(name);
  if (it == param_index_.end()) {
    return absl::NotFoundError(absl::StrCat("model has no parameter '", name, "'"));
  }
  return it->second;
}

absl::Status Model::BindParams(const StepParams& params, StepWorkspace& ws) const {
  const size_t num_params = spec_.params.size();
  ws.param_values.assign(num_params, ConstTensorView());
  ws.param_gathered.assign(num_params, nullptr);
  ws.gathered_rows.resize(num_params);
  std::vector<bool> bound(num_params, false);
  for (const auto& [name, value] : params.full) {
    auto it = param_index_.find(name);
    if (it == param_index_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("params: unknown parameter '", name, "'"));
    }
    const ParamSpec& param = spec_.params[it->second];
    TESSERA_RETURN_IF_ERROR(
        CheckSameShape(value.shape(), param.shape, absl::StrCat("params: parameter '", name, "'")));
    ws.param_values[it->second] = value;
    bound[it->second] = true;
  }
  for (const auto& [name, gathered] : params.gathered) {
    auto it = param_index_.find(name);
    if (it == param_index_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("params: unknown parameter '", name, "'"));
    }
    const int p = it->second;
    if (!graph_.param_is_embedding[p]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "params: '", name, "' is a dense parameter; only embedding tables can be gathered"));
    }
    if (bound[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat("params: parameter '", name, "' is given both whole and gathered"));
    }
    const Shape& table = spec_.params[p].shape;
    std::vector<const float*>& rows = ws.gathered_rows[p];
    rows.clear();
    for (size_t k = 0; k < gathered.blocks.size(); ++k) {
      const ConstTensorView& block = gathered.blocks[k];
      const int64_t block_rows = block.shape().rank() == 0 ? 0 : block.rows();
      TESSERA_RETURN_IF_ERROR(
          CheckSameShape(block.shape(), table.WithRows(block_rows),
                         absl::StrCat("params: gathered rows of '", name, "', block ", k)));
      for (int64_t r = 0; r < block_rows; ++r) {
        rows.push_back(block.data() + r * block.row_size());
      }
    }
    if (rows.size() != gathered.ids.size()) {
      return absl::InvalidArgumentError(absl::StrCat("params: gathered rows of '", name,
                                                     "': ", rows.size(), " rows for ",
                                                     gathered.ids.size(), " ids"));
    }
    ws.param_gathered[p] = &gathered;
    bound[p] = true;
  }
  for (size_t p = 0; p < num_params; ++p) {
    if (!bound[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat("params: parameter '", spec_.params[p].name, "' is missing"));
    }
  }
  return absl::OkStatus();
}

absl::Status Model::CheckGathered(const StepWorkspace& ws) const {
  for (size_t p = 0; p < spec_.params.size(); ++p) {
    const EmbeddingRows* gathered = ws.param_gathered[p];
    if (gathered == nullptr) continue;
    TESSERA_RETURN_IF_ERROR(planner_.CheckGathered(static_cast<int>(p), gathered->ids, ws.plan));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, SortedIds>> Model::RowsNeeded(const Batch& batch) const {
  StepWorkspace ws;
  return RowsNeeded(batch, ws);
}

absl::StatusOr<std::map<std::string, SortedIds>> Model::RowsNeeded(const Batch& batch,
                                                             StepWorkspace& ws) const {
  TESSERA_RETURN_IF_ERROR(CheckBatch(batch, /*need_labels=*/false));
  planner_.HashInputs(batch, ws.plan);
  const std::vector<bool> plan(spec_.params.size(), true);
  TESSERA_RETURN_IF_ERROR(planner_.Plan(batch, plan, ws.plan));
  std::map<std::string, SortedIds> needed;
  for (size_t p = 0; p < spec_.params.size(); ++p) {
    if (planner_.HasLookups(static_cast<int>(p))) {
      needed.emplace(spec_.params[p].name, ws.plan.unique_ids[p]);
    }
  }
  return needed;
}

Model::ValueMap Model::Value(const Batch& batch, const StepWorkspace& ws, int v) const {
  const int64_t width = graph_.value_widths[v];
  if (v < graph_.num_inputs) {
    const Tensor& t = batch.dense.at(spec_.inputs[v].name);
    return ValueMap(t.data(), batch.size, width, Eigen::OuterStride<>(width));
  }
  const ColumnBlock& block = in_concat_[v - graph_.num_inputs];
  if (block.concat >= 0) {
    const RowMatrix& m = ws.activations[block.concat];
    return ValueMap(m.data() + block.offset, m.rows(), width, Eigen::OuterStride<>(m.cols()));
  }
  const RowMatrix& m = ws.activations[v - graph_.num_inputs];
  return ValueMap(m.data(), m.rows(), m.cols(), Eigen::OuterStride<>(m.cols()));
}

MatrixRef Model::Output(StepWorkspace& ws, int n) const {
  const ColumnBlock& block = in_concat_[n];
  if (block.concat < 0) return ws.activations[n];
  return ws.activations[block.concat].middleCols(block.offset, graph_.nodes[n].width);
}

MatrixRef Model::OutputGradient(StepWorkspace& ws, int n) const {
  const ColumnBlock& block = in_concat_[n];
  if (block.concat < 0) return ws.gradients[n];
  return ws.gradients[block.concat].middleCols(block.offset, graph_.nodes[n].width);
}

// Note [Concat in place]
// An embedding node whose output only a concat reads (the usual way an embedding joins the dense
// part of a model) writes its rows straight into its columns of the concat's output, and its
// backward reads its gradient from the concat's gradient there. The concat (any op declaring
// OpDef::output_holds_inputs) then copies only its other inputs forward, and gets a null
// gradient backward for these: at a batch of 512 over 1000-wide
// tables that is a copy, a zero-fill and an addition of 2 MB per table and step saved, with
// the same bits computed (the gradient block is exactly what the concat's backward would have
// added to zeros).
void Model::RunForward(const Batch& batch, StepWorkspace& ws) const {
  const int num_nodes = static_cast<int>(graph_.nodes.size());
  ws.activations.resize(num_nodes);
  ws.bag_scales.resize(num_nodes);
  // Every output's memory first: a node in place writes into a concat defined after it.
  for (int n = 0; n < num_nodes; ++n) {
    if (in_concat_[n].concat < 0) ws.activations[n].resize(batch.size, graph_.nodes[n].width);
  }
  for (int n = 0; n < num_nodes; ++n) {
    const ResolvedGraph::Node& node = graph_.nodes[n];
    MatrixRef y = Output(ws, n);
    if (!node.is_embedding()) {
      node.op->forward(OpArgs(batch, ws, n), y);
      continue;
    }
    const int p = node.params[0];
    const Lookup lookup = planner_.LookupOf(batch, ws.plan, n);
    // A whole table is read at the id's row, gathered rows at its slot.
    std::vector<const float*>& rows = ws.lookup_rows;
    if (ws.param_gathered[p] != nullptr) {
      const std::vector<const float*>& gathered = ws.gathered_rows[p];
      rows.resize(ws.plan.slots[n].size());
      for (size_t k = 0; k < rows.size(); ++k) rows[k] = gathered[ws.plan.slots[n][k]];
    } else {
      RowAddresses(ws.param_values[p].matrix(), lookup.rows, rows);
    }
    if (lookup.row_splits.empty()) {
      EmbeddingForward(rows, y);
      continue;
    }
    std::vector<float>& scales = ws.bag_scales[n];
    scales.resize(static_cast<size_t>(batch.size));
    for (int64_t b = 0; b < batch.size; ++b) {
      double sum = 0;
      for (int64_t k = lookup.row_splits[b]; k < lookup.row_splits[b + 1]; ++k) {
        const double w = lookup.weights.empty() ? 1.0 : lookup.weights[k];
        sum += node.combiner == Combiner::kSqrtN ? w * w : w;
      }
      // An empty bag (or weights summing to 0) is a zero row, never a division by 0.
      scales[b] = node.combiner == Combiner::kSum ? 1.0f
                  : sum == 0                       ? 0.0f
                  : node.combiner == Combiner::kMean
                      ? static_cast<float>(1.0 / sum)
                      : static_cast<float>(1.0 / std::sqrt(sum));
    }
    EmbeddingBagForward(rows, lookup.row_splits, lookup.weights, scales, y);
  }
}

OpForwardArgs Model::OpArgs(const Batch& batch, const StepWorkspace& ws, int n) const {
  const ResolvedGraph::Node& node = graph_.nodes[n];
  const NodeSpec& spec = spec_.nodes[n];
  OpForwardArgs args;
  for (int v : node.inputs) args.inputs.emplace_back(Value(batch, ws, v));
  for (int p : node.params) args.params.emplace_back(ws.param_values[p].matrix());
  args.attrs = {&spec.attrs, &spec.string_attrs};
  return args;
}

void Model::RunBackward(const Batch& batch, StepWorkspace& ws, StepResult& result,
                        const GradientSink& sink) const {
  // Each dense gradient's memory: the sink's, or result's.
  std::vector<float*>& dense = ws.dense_gradients;
  dense.assign(spec_.params.size(), nullptr);
  // Zero every trainable parameter's gradient: shared parameters accumulate into them.
  for (size_t p = 0; p < spec_.params.size(); ++p) {
    const ParamSpec& param = spec_.params[p];
    if (!param.trainable) continue;
    if (graph_.param_is_embedding[p]) {
      IndexedSlices& slices = result.sparse_gradients[param.name];
      slices.indices.assign(ws.plan.unique_ids[p].begin(), ws.plan.unique_ids[p].end());
      // In the memory of the step before (the row count changes every step).
      slices.values.ResizeToZeros(
          param.shape.WithRows(static_cast<int64_t>(ws.plan.unique_ids[p].size())));
    } else if (p < sink.dense.size() && sink.dense[p] != nullptr) {
      dense[p] = sink.dense[p];
      std::fill(dense[p], dense[p] + param.shape.num_elements(), 0.0f);
      result.dense_gradients.erase(param.name);
    } else {
      Tensor& gradient = result.dense_gradients[param.name];
      gradient.ResizeToZeros(param.shape);
      dense[p] = gradient.data();
    }
  }
  const int num_nodes = static_cast<int>(graph_.nodes.size());
  const int loss_node = graph_.loss_value - graph_.num_inputs;
  for (int n = 0; n < num_nodes; ++n) {
    if (backprop_[n] && n != loss_node && in_concat_[n].concat < 0) {
      ws.gradients[n].setZero(batch.size, graph_.nodes[n].width);
    }
  }
  // Views of the gradient buffers a node adds to (null: no gradient wanted).
  std::vector<std::optional<MatrixRef>> input_grads;
  std::vector<std::optional<MatrixRef>> param_grads;
  for (int n = num_nodes - 1; n >= 0; --n) {
    if (!backprop_[n]) continue;
    const ResolvedGraph::Node& node = graph_.nodes[n];
    MatrixRef dy = OutputGradient(ws, n);
    if (node.is_embedding()) {
      const ParamSpec& table = spec_.params[node.params[0]];
      if (!table.trainable) continue;
      MatrixRef grad_rows(result.sparse_gradients[table.name].values.matrix());
      const Lookup lookup = planner_.LookupOf(batch, ws.plan, n);
      if (lookup.row_splits.empty()) {
        EmbeddingBackward(ws.plan.slots[n], dy, grad_rows);
      } else {
        EmbeddingBagBackward(ws.plan.slots[n], lookup.row_splits, lookup.weights,
                             ws.bag_scales[n], dy, grad_rows);
      }
      continue;
    }
    OpBackwardArgs args(OpArgs(batch, ws, n), ws.activations[n], dy);
    input_grads.clear();
    input_grads.reserve(node.inputs.size());
    for (int v : node.inputs) {
      // An input in place in this concat has its gradient there already.
      if (v >= graph_.num_inputs && backprop_[v - graph_.num_inputs] &&
          !InPlaceIn(v - graph_.num_inputs, n)) {
        input_grads.emplace_back(ws.gradients[v - graph_.num_inputs]);
        args.input_grads.push_back(&*input_grads.back());
      } else {
        input_grads.emplace_back(std::nullopt);
        args.input_grads.push_back(nullptr);
      }
    }
    param_grads.clear();
    param_grads.reserve(node.params.size());
    for (int p : node.params) {
      const ParamSpec& param = spec_.params[p];
      if (param.trainable) {
        param_grads.emplace_back(TensorView(dense[p], param.shape).matrix());
        args.param_grads.push_back(&*param_grads.back());
      } else {
        param_grads.emplace_back(std::nullopt);
        args.param_grads.push_back(nullptr);
      }
    }
    node.op->backward(args);
  }
}

void Model::CopyOutputs(const StepWorkspace& ws, std::map<std::string, Tensor>& outputs) const {
  for (const auto& [name, v] : graph_.output_values) {
    const RowMatrix& m = ws.activations[v - graph_.num_inputs];
    CopyToTensor(Eigen::Map<const RowMatrix>(m.data(), m.rows(), m.cols()), outputs[name]);
  }
}

absl::Status Model::ForwardBackward(const Batch& batch, const StepParams& params, StepWorkspace& ws,
                                    StepResult& result) const {
  return ForwardBackward(batch, params, ws, result, GradientSink());
}

absl::Status Model::ForwardBackward(const Batch& batch, const StepParams& params, StepWorkspace& ws,
                                    StepResult& result, const GradientSink& sink) const {
  TESSERA_RETURN_IF_ERROR(CheckBatch(batch, /*need_labels=*/true));
  planner_.HashInputs(batch, ws.plan);
  TESSERA_RETURN_IF_ERROR(BindParams(params, ws));
  // Unique ids are needed to read gathered rows and to build sparse gradients.
  std::vector<bool> plan(spec_.params.size());
  for (size_t p = 0; p < plan.size(); ++p) {
    plan[p] = ws.param_gathered[p] != nullptr || spec_.params[p].trainable;
  }
  TESSERA_RETURN_IF_ERROR(planner_.Plan(batch, plan, ws.plan));
  TESSERA_RETURN_IF_ERROR(CheckGathered(ws));
  RunForward(batch, ws);
  const int loss_node = graph_.loss_value - graph_.num_inputs;
  ws.gradients.resize(graph_.nodes.size());
  RowMatrix& dlogits = ws.gradients[loss_node];
  dlogits.resize(batch.size, graph_.nodes[loss_node].width);
  MatrixRef dlogits_ref(dlogits);
  TESSERA_ASSIGN_OR_RETURN(result.loss,
                           ComputeLoss(graph_.loss, Value(batch, ws, graph_.loss_value),
                                       batch.labels.matrix(), &dlogits_ref));
  // Backpropagation is linear in dLoss/dlogits: scaling it scales every gradient.
  if (sink.scale != 1.0f) dlogits *= sink.scale;
  RunBackward(batch, ws, result, sink);
  CopyOutputs(ws, result.outputs);
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Model::ForwardBackward(const Batch& batch,
                                                  const StepParams& params) const {
  StepWorkspace ws;
  StepResult result;
  TESSERA_RETURN_IF_ERROR(ForwardBackward(batch, params, ws, result));
  return result;
}

absl::Status Model::Forward(const Batch& batch, const StepParams& params, StepWorkspace& ws,
                            ForwardResult& result) const {
  const bool with_labels = batch.labels.size() > 0;
  TESSERA_RETURN_IF_ERROR(CheckBatch(batch, with_labels));
  planner_.HashInputs(batch, ws.plan);
  TESSERA_RETURN_IF_ERROR(BindParams(params, ws));
  std::vector<bool> plan(spec_.params.size());
  for (size_t p = 0; p < plan.size(); ++p) plan[p] = ws.param_gathered[p] != nullptr;
  TESSERA_RETURN_IF_ERROR(planner_.Plan(batch, plan, ws.plan));
  TESSERA_RETURN_IF_ERROR(CheckGathered(ws));
  RunForward(batch, ws);
  result.loss.reset();
  if (with_labels) {
    TESSERA_ASSIGN_OR_RETURN(const float loss,
                             ComputeLoss(graph_.loss, Value(batch, ws, graph_.loss_value),
                                         batch.labels.matrix(), nullptr));
    result.loss = loss;
  }
  CopyOutputs(ws, result.outputs);
  return absl::OkStatus();
}

absl::StatusOr<ForwardResult> Model::Forward(const Batch& batch, const StepParams& params) const {
  StepWorkspace ws;
  ForwardResult result;
  TESSERA_RETURN_IF_ERROR(Forward(batch, params, ws, result));
  return result;
}

}  // namespace tessera
