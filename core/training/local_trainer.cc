#include "core/training/local_trainer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/model.h"
#include "tessera/status.h"

namespace tessera {

absl::StatusOr<LocalTrainer> LocalTrainer::Create(ModelSpec spec, const OptimizerSpec& optimizer) {
  TESSERA_ASSIGN_OR_RETURN(Model model, Model::Create(std::move(spec)));
  LocalTrainer trainer;
  trainer.model_ = std::make_unique<const Model>(std::move(model));
  TESSERA_ASSIGN_OR_RETURN(trainer.optimizer_, MakeOptimizer(optimizer));
  const std::vector<ParamSpec>& params = trainer.model_->spec().params;
  for (const ParamSpec& p : params) {
    absl::StatusOr<Tensor> value = MakeInitializedBlock(p.initializer, p.shape, 0, p.shape.rows());
    if (!value.ok()) return Annotate(value.status(), absl::StrCat("initializing '", p.name, "'"));
    Tensor& stored = trainer.variables_.emplace(p.name, *std::move(value)).first->second;
    OptimizerSlots& slots =
        trainer.slots_.emplace(p.name, trainer.optimizer_->CreateSlots(p.shape)).first->second;
    trainer.params_.full.emplace(p.name, stored.view());
    trainer.variable_by_index_.push_back(&stored);
    trainer.slots_by_index_.push_back(&slots);
  }
  for (size_t p = 0; p < params.size(); ++p) {
    if (!params[p].trainable) continue;
    trainer.packed_size_ += params[p].shape.num_elements();
    if (trainer.model_->IsEmbedding(static_cast<int>(p)))
      trainer.packed_size_ += params[p].shape.rows();
  }
  trainer.workspace_ = std::make_unique<StepWorkspace>();
  trainer.result_ = std::make_unique<StepResult>();
  trainer.eval_result_ = std::make_unique<ForwardResult>();
  return trainer;
}

absl::StatusOr<float> LocalTrainer::TrainStep(const Batch& batch) {
  TESSERA_RETURN_IF_ERROR(model_->ForwardBackward(batch, params_, *workspace_, *result_));
  const std::vector<ParamSpec>& params = model_->spec().params;
  for (size_t p = 0; p < params.size(); ++p) {
    if (!params[p].trainable) continue;
    Tensor& value = *variable_by_index_[p];
    OptimizerSlots& slots = *slots_by_index_[p];
    if (model_->IsEmbedding(static_cast<int>(p))) {
      const IndexedSlices& grad = result_->sparse_gradients.at(params[p].name);
      TESSERA_RETURN_IF_ERROR(
          optimizer_->ApplySparse(value.view(), slots, grad.indices, grad.values));
    } else {
      TESSERA_RETURN_IF_ERROR(
          optimizer_->ApplyDense(value.view(), slots, result_->dense_gradients.at(params[p].name)));
    }
  }
  ++steps_;
  return result_->loss;
}

absl::StatusOr<float> LocalTrainer::ComputeGradients(const Batch& batch, float scale,
                                                     absl::Span<float> packed) {
  if (static_cast<int64_t>(packed.size()) != packed_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed gradients of ", packed.size(), " floats, not ", packed_size_));
  }
  // Dense gradients go straight to their place in `packed`, already scaled; tables' rows are
  // spread into their blocks after.
  const std::vector<ParamSpec>& params = model_->spec().params;
  sink_.scale = scale;
  sink_.dense.assign(params.size(), nullptr);
  float* at = packed.data();
  for (size_t p = 0; p < params.size(); ++p) {
    if (!params[p].trainable) continue;
    const int64_t size = params[p].shape.num_elements();
    if (model_->IsEmbedding(static_cast<int>(p))) {
      at += size + params[p].shape.rows();
    } else {
      sink_.dense[p] = at;
      at += size;
    }
  }
  TESSERA_RETURN_IF_ERROR(model_->ForwardBackward(batch, params_, *workspace_, *result_, sink_));
  at = packed.data();
  for (size_t p = 0; p < params.size(); ++p) {
    if (!params[p].trainable) continue;
    const int64_t size = params[p].shape.num_elements();
    if (!model_->IsEmbedding(static_cast<int>(p))) {
      at += size;
      continue;
    }
    // A table: its block of rows, zero but for the batch's rows, then the marks.
    const int64_t rows = params[p].shape.rows();
    const int64_t width = params[p].shape.row_size();
    std::fill(at, at + size + rows, 0.0f);
    const IndexedSlices& grad = result_->sparse_gradients.at(params[p].name);
    float* marks = at + size;
    for (size_t k = 0; k < grad.indices.size(); ++k) {
      const int64_t row = grad.indices[k];
      const float* from = grad.values.data() + static_cast<int64_t>(k) * width;
      float* to = at + row * width;
      for (int64_t j = 0; j < width; ++j) to[j] += from[j];
      marks[row] = 1.0f;
    }
    at += size + rows;
  }
  return result_->loss;
}

absl::Status LocalTrainer::ApplyPackedGradients(absl::Span<const float> packed) {
  if (static_cast<int64_t>(packed.size()) != packed_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("packed gradients of ", packed.size(), " floats, not ", packed_size_));
  }
  const std::vector<ParamSpec>& params = model_->spec().params;
  const float* at = packed.data();
  for (size_t p = 0; p < params.size(); ++p) {
    if (!params[p].trainable) continue;
    const Shape& shape = params[p].shape;
    const int64_t size = shape.num_elements();
    Tensor& value = *variable_by_index_[p];
    OptimizerSlots& slots = *slots_by_index_[p];
    if (!model_->IsEmbedding(static_cast<int>(p))) {
      TESSERA_RETURN_IF_ERROR(
          optimizer_->ApplyDense(value.view(), slots, ConstTensorView(at, shape)));
      at += size;
      continue;
    }
    const int64_t rows = shape.rows();
    const int64_t width = shape.row_size();
    const float* marks = at + size;
    marked_rows_.clear();
    marked_values_.clear();
    for (int64_t row = 0; row < rows; ++row) {
      if (marks[row] == 0.0f) continue;
      marked_rows_.push_back(row);
      marked_values_.insert(marked_values_.end(), at + row * width, at + (row + 1) * width);
    }
    const int64_t marked = static_cast<int64_t>(marked_rows_.size());
    TESSERA_RETURN_IF_ERROR(
        optimizer_->ApplySparse(value.view(), slots, marked_rows_,
                                ConstTensorView(marked_values_.data(), shape.WithRows(marked))));
    at += size + rows;
  }
  ++steps_;
  return absl::OkStatus();
}

absl::StatusOr<TrainProgress> LocalTrainer::Train(BatchIterator& batches, int64_t max_steps) {
  TrainProgress progress;
  double loss_sum = 0;
  while (max_steps < 0 || progress.steps < max_steps) {
    TESSERA_ASSIGN_OR_RETURN(std::optional<Batch> batch, batches.Next());
    if (!batch) {
      progress.exhausted = true;
      break;
    }
    TESSERA_ASSIGN_OR_RETURN(const float loss, TrainStep(*batch));
    loss_sum += static_cast<double>(loss) * static_cast<double>(batch->size);
    ++progress.steps;
    progress.examples += batch->size;
  }
  if (progress.examples > 0) progress.mean_loss = loss_sum / progress.examples;
  return progress;
}

absl::Status LocalTrainer::Forward(const Batch& batch, ForwardResult& result) {
  return model_->Forward(batch, params_, *workspace_, result);
}

absl::StatusOr<EvalResult> LocalTrainer::Evaluate(const Dataset& dataset, int64_t batch_size) {
  BatchOptions options;
  options.batch_size = batch_size;
  TESSERA_ASSIGN_OR_RETURN(BatchIterator batches, BatchIterator::Create(dataset, options));
  EvalAccumulator eval(*model_);
  while (true) {
    TESSERA_ASSIGN_OR_RETURN(std::optional<Batch> batch, batches.Next());
    if (!batch) break;
    TESSERA_RETURN_IF_ERROR(model_->Forward(*batch, params_, *workspace_, *eval_result_));
    if (!eval_result_->loss.has_value()) {
      return absl::InvalidArgumentError("evaluate: the dataset has no labels");
    }
    TESSERA_RETURN_IF_ERROR(eval.Add(*eval_result_->loss, batch->size,
                                     eval.Logits(eval_result_->outputs), batch->labels));
  }
  return eval.Result();
}

absl::StatusOr<const Tensor*> LocalTrainer::variable(absl::string_view name) const {
  auto it = variables_.find(std::string(name));
  if (it == variables_.end()) {
    return absl::NotFoundError(absl::StrCat("no variable '", name, "'"));
  }
  return &it->second;
}

absl::StatusOr<const OptimizerSlots*> LocalTrainer::slots(absl::string_view name) const {
  auto it = slots_.find(std::string(name));
  if (it == slots_.end()) return absl::NotFoundError(absl::StrCat("no variable '", name, "'"));
  return &it->second;
}

absl::Status LocalTrainer::SetVariable(absl::string_view name, const Tensor& value) {
  auto it = variables_.find(std::string(name));
  if (it == variables_.end()) return absl::NotFoundError(absl::StrCat("no variable '", name, "'"));
  TESSERA_RETURN_IF_ERROR(
      CheckSameShape(value.shape(), it->second.shape(), absl::StrCat("SetVariable '", name, "'")));
  // Copy in place: params_ holds views onto the stored tensor.
  std::copy(value.data(), value.data() + value.size(), it->second.data());
  return absl::OkStatus();
}

absl::Status LocalTrainer::SetSlots(absl::string_view name, OptimizerSlots slots) {
  auto it = slots_.find(std::string(name));
  if (it == slots_.end()) return absl::NotFoundError(absl::StrCat("no variable '", name, "'"));
  const Shape& shape = variables_.at(it->first).shape();
  if (slots.tensors.size() != it->second.tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "' has ", it->second.tensors.size(),
                                                   " optimizer slots, not ", slots.tensors.size()));
  }
  for (const Tensor& slot : slots.tensors) {
    TESSERA_RETURN_IF_ERROR(
        CheckSameShape(slot.shape(), shape, absl::StrCat("a slot of '", name, "'")));
  }
  if (slots.step < 0) {
    return absl::InvalidArgumentError(absl::StrCat("'", name, "': negative step ", slots.step));
  }
  // Copy in place, as SetVariable: the slots' addresses stay those slots_by_index_ holds.
  for (size_t i = 0; i < slots.tensors.size(); ++i) {
    std::copy(slots.tensors[i].data(), slots.tensors[i].data() + slots.tensors[i].size(),
              it->second.tensors[i].data());
  }
  it->second.step = slots.step;
  return absl::OkStatus();
}

}  // namespace tessera
