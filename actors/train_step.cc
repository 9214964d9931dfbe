#include "actors/train_step.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/shard_client.h"
#include "core/fan_in.h"

namespace tessera {
namespace internal {
namespace {

// Enough for the steps one thread has in flight at once in practice (workers x closures per
// worker, spread over the threads); more are freed.
constexpr size_t kMaxCachedScratch = 4;

std::vector<std::unique_ptr<StepScratch>>& ThreadScratch() {
  thread_local std::vector<std::unique_ptr<StepScratch>> cache;
  return cache;
}

}  // namespace

std::unique_ptr<StepScratch> AcquireStepScratch() {
  std::vector<std::unique_ptr<StepScratch>>& cache = ThreadScratch();
  if (cache.empty()) return std::make_unique<StepScratch>();
  std::unique_ptr<StepScratch> scratch = std::move(cache.back());
  cache.pop_back();
  return scratch;
}

void ReleaseStepScratch(std::unique_ptr<StepScratch> scratch) {
  std::vector<std::unique_ptr<StepScratch>>& cache = ThreadScratch();
  if (scratch != nullptr && cache.size() < kMaxCachedScratch) cache.push_back(std::move(scratch));
}

}  // namespace internal

namespace {

// What a step carries from its gathers to its compute phase.
struct StepFetch {
  Batch batch;
  std::unique_ptr<internal::StepScratch> scratch;  // holds the batch's lookup plan
  std::map<std::string, SortedIds> needed;  // per embedding table
};

// Phase 2: forward/backward on the fetched values (`values[k]` belongs to the k-th parameter of
// vars.by_param), then one gradient op per touched shard, all in one flush.
void ComputeAndApply(caf::scheduled_actor* self, std::shared_ptr<const ModelVariables> vars,
                     std::shared_ptr<StepFetch> fetch, std::vector<Tensor> values,
                     Done<StepOutcome> done) {
  StepParams params;
  size_t k = 0;
  for (const auto& [name, handle] : vars->by_param) {
    auto ids = fetch->needed.find(name);
    if (ids != fetch->needed.end()) {
      params.gathered[name] = EmbeddingRows{ids->second, values[k].view()};
    } else {
      params.full[name] = values[k].view();
    }
    ++k;
  }
  StepResult& result = fetch->scratch->result;
  if (absl::Status s =
          vars->model->ForwardBackward(fetch->batch, params, fetch->scratch->workspace, result);
      !s.ok()) {
    return done(s);
  }
  const StepOutcome outcome{result.loss, fetch->batch.size};
  auto acks = FanIn<bool>::Start(
      result.dense_gradients.size() + result.sparse_gradients.size(),
      [outcome, done = std::move(done)](absl::StatusOr<std::vector<bool>> applied) {
        if (!applied.ok()) return done(applied.status());
        done(outcome);
      });
  size_t slot = 0;
  auto ack = [&](size_t k) {
    return [arrived = acks->Slot(k)](absl::Status s) {
      if (!s.ok()) return arrived(s);
      arrived(true);
    };
  };
  {
    ShardClient gradients(self, vars->ps_nodes);
    for (auto& [name, grad] : result.dense_gradients) {
      ApplyDenseGradientAsync(gradients, vars->by_param.at(name), std::move(grad), ack(slot++));
    }
    for (const auto& [name, grad] : result.sparse_gradients) {
      ApplySparseGradientAsync(gradients, vars->by_param.at(name), grad, ack(slot++));
    }
  }  // flushed: the requests own copies of the gradients now
  internal::ReleaseStepScratch(std::move(fetch->scratch));  // the buffers can serve the next step
}

}  // namespace

void TrainStepAsync(caf::scheduled_actor* self, std::shared_ptr<const ModelVariables> vars,
                    Batch batch, Done<StepOutcome> done) {
  auto fetch = std::make_shared<StepFetch>();
  fetch->batch = std::move(batch);
  fetch->scratch = internal::AcquireStepScratch();
  // Plans the lookups into the workspace, so ForwardBackward does not sort the ids again.
  absl::StatusOr<std::map<std::string, SortedIds>> needed =
      vars->model->RowsNeeded(fetch->batch, fetch->scratch->workspace);
  if (!needed.ok()) return done(needed.status());
  fetch->needed = *std::move(needed);

  // Phase 1: every parameter's value (gathered rows or the whole variable), all in one flush.
  auto values = FanIn<Tensor>::Start(
      vars->by_param.size(),
      [self, vars, fetch, done = std::move(done)](absl::StatusOr<std::vector<Tensor>> values) {
        if (!values.ok()) return done(values.status());
        ComputeAndApply(self, vars, fetch, *std::move(values), done);
      });
  ShardClient client(self, vars->ps_nodes);
  size_t k = 0;
  for (const auto& [name, handle] : vars->by_param) {
    auto ids = fetch->needed.find(name);
    if (ids != fetch->needed.end()) {
      GatherAsync(client, handle, ids->second, values->Slot(k++));
    } else {
      ReadAsync(client, handle, values->Slot(k++));
    }
  }
}

absl::Status ModelVariables::Validate() const {
  if (!model) return absl::InvalidArgumentError("ModelVariables: no model");
  for (const ParamSpec& param : model->spec().params) {
    auto it = by_param.find(param.name);
    if (it == by_param.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ModelVariables: parameter ", param.name, " has no variable"));
    }
    if (it->second.shape != param.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ModelVariables: variable ", it->second.name, " has shape ",
          it->second.shape.ToString(), " but parameter ", param.name, " needs ",
          param.shape.ToString()));
    }
  }
  if (by_param.size() != model->spec().params.size()) {
    return absl::InvalidArgumentError("ModelVariables: a variable for an unknown parameter");
  }
  return absl::OkStatus();
}

}  // namespace tessera
