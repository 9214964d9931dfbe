#include "actors/ps/train_step.h"

#include <atomic>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "actors/ps/shard_client.h"
#include "core/base/fan_in.h"

namespace tessera {
namespace internal {
namespace {

// Scratch of finished steps, ready for the next (Note [Step scratch reuse]).
struct ScratchPool {
  absl::Mutex mu;
  std::vector<std::unique_ptr<StepScratch>> free ABSL_GUARDED_BY(mu);
};

ScratchPool& Pool() {
  static ScratchPool* pool = new ScratchPool;  // never destroyed: steps may end during exit
  return *pool;
}

}  // namespace

std::shared_ptr<const Tensor> StepScratch::Share(const std::string& table, Tensor& gradient) {
  std::shared_ptr<Tensor>& shared = shared_gradients[table];
  if (shared == nullptr || shared.use_count() != 1) {
    shared = std::make_shared<Tensor>();
  } else {
    // No op holds it any more: their reads happened before the count fell to one.
    std::atomic_thread_fence(std::memory_order_acquire);
  }
  std::swap(*shared, gradient);
  return shared;
}

std::unique_ptr<StepScratch> AcquireStepScratch() {
  ScratchPool& pool = Pool();
  absl::MutexLock lock(&pool.mu);
  if (pool.free.empty()) return std::make_unique<StepScratch>();
  std::unique_ptr<StepScratch> scratch = std::move(pool.free.back());
  pool.free.pop_back();
  return scratch;
}

void ReleaseStepScratch(std::unique_ptr<StepScratch> scratch) {
  if (scratch == nullptr) return;
  ScratchPool& pool = Pool();
  absl::MutexLock lock(&pool.mu);
  pool.free.push_back(std::move(scratch));
}

}  // namespace internal

namespace {

// What a step carries from its gathers to its compute phase.
struct StepFetch {
  Batch batch;
  std::unique_ptr<internal::StepScratch> scratch;  // holds the batch's lookup plan
  std::map<std::string, SortedIds> needed;  // per embedding table
  // Each table's ids grouped by shard, once for the gather and the gradient.
  std::map<std::string, std::shared_ptr<const IdGrouping>> groupings;
};

// The step's parameters: the fetched `values` (in vars.by_param order) as gathered rows (the
// shards' reply blocks) or whole values (one block). The views point into `values`, which must
// outlive them.
StepParams BindValues(const ModelVariables& vars, const StepFetch& fetch,
                      const std::vector<std::vector<Tensor>>& values) {
  StepParams params;
  size_t k = 0;
  for (const auto& [name, handle] : vars.by_param) {
    auto ids = fetch.needed.find(name);
    if (ids != fetch.needed.end()) {
      EmbeddingRows& rows = params.gathered[name];
      rows.ids = ids->second;
      for (const Tensor& block : values[k]) rows.blocks.push_back(block.view());
    } else {
      params.full[name] = values[k][0].view();
    }
    ++k;
  }
  return params;
}

// Phase 2: forward/backward on the fetched values (`values[k]` belongs to the k-th parameter of
// vars.by_param), then one gradient op per touched shard, all in one flush.
void ComputeAndApply(caf::scheduled_actor* self, std::shared_ptr<const ModelVariables> vars,
                     std::shared_ptr<StepFetch> fetch, std::vector<std::vector<Tensor>> values,
                     std::shared_ptr<UpdateNamer> updates, Done<StepOutcome> done) {
  const StepParams params = BindValues(*vars, *fetch, values);
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
    gradients.NameUpdates(std::move(updates));
    for (auto& [name, grad] : result.dense_gradients) {
      ApplyDenseGradientAsync(gradients, vars->by_param.at(name), std::move(grad), ack(slot++));
    }
    for (auto& [name, grad] : result.sparse_gradients) {
      auto grouping = fetch->groupings.find(name);
      if (grouping == fetch->groupings.end()) {
        ack(slot++)(absl::InternalError(
            absl::StrCat("sparse gradient of ", name, ", a table the step did not gather")));
        continue;
      }
      ApplyStepGradientAsync(gradients, vars->by_param.at(name), *grouping->second,
                             fetch->scratch->Share(name, grad.values), ack(slot++));
    }
  }  // flushed: the requests own copies of the gradients now
  internal::ReleaseStepScratch(std::move(fetch->scratch));  // the buffers can serve the next step
}

// Phase 1 of a step, training or forward-only: plans the batch's lookups into a scratch
// workspace, then fetches every parameter's value (the gathered rows of each embedding table, the
// whole value of each dense variable), all in one flush; `then` gets the fetch and the values in
// vars->by_param order, each as row blocks: a table's rows as its shards replied, unjoined
// (EmbeddingRows), a dense value as one block.
void FetchStepValues(
    caf::scheduled_actor* self, std::shared_ptr<const ModelVariables> vars, Batch batch,
    std::function<void(
        absl::StatusOr<std::pair<std::shared_ptr<StepFetch>, std::vector<std::vector<Tensor>>>>)>
        then) {
  auto fetch = std::make_shared<StepFetch>();
  fetch->batch = std::move(batch);
  fetch->scratch = internal::AcquireStepScratch();
  // Plans the lookups into the workspace, so the compute phase does not sort the ids again.
  absl::StatusOr<std::map<std::string, SortedIds>> needed =
      vars->model->RowsNeeded(fetch->batch, fetch->scratch->workspace);
  if (!needed.ok()) return then(needed.status());
  fetch->needed = *std::move(needed);

  auto values = FanIn<std::vector<Tensor>>::Start(
      vars->by_param.size(),
      [fetch, then = std::move(then)](absl::StatusOr<std::vector<std::vector<Tensor>>> values) {
        if (!values.ok()) return then(values.status());
        then(std::make_pair(fetch, *std::move(values)));
      });
  ShardClient client(self, vars->ps_nodes);
  size_t k = 0;
  for (const auto& [name, handle] : vars->by_param) {
    auto ids = fetch->needed.find(name);
    if (ids != fetch->needed.end()) {
      absl::StatusOr<std::shared_ptr<const IdGrouping>> grouping =
          GroupStepIds(handle, ids->second);
      if (!grouping.ok()) {
        values->Slot(k++)(grouping.status());
        continue;
      }
      fetch->groupings[name] = *grouping;
      GatherBlocksAsync(client, handle, *std::move(grouping), values->Slot(k++));
    } else {
      ReadAsync(client, handle, [arrived = values->Slot(k++)](absl::StatusOr<Tensor> value) {
        if (!value.ok()) return arrived(value.status());
        std::vector<Tensor> whole;
        whole.push_back(*std::move(value));
        arrived(std::move(whole));
      });
    }
  }
}

}  // namespace

void TrainStepAsync(caf::scheduled_actor* self, std::shared_ptr<const ModelVariables> vars,
                    Batch batch, std::shared_ptr<UpdateNamer> updates, Done<StepOutcome> done) {
  FetchStepValues(self, vars, std::move(batch),
                  [self, vars, updates = std::move(updates), done = std::move(done)](auto fetched) {
                    if (!fetched.ok()) return done(fetched.status());
                    ComputeAndApply(self, vars, std::move(fetched->first),
                                    std::move(fetched->second), updates, done);
                  });
}

void ForwardStepAsync(caf::scheduled_actor* self, std::shared_ptr<const ModelVariables> vars,
                      Batch batch, Done<ForwardOutcome> done) {
  FetchStepValues(
      self, vars, std::move(batch), [vars, done = std::move(done)](auto fetched) {
        if (!fetched.ok()) return done(fetched.status());
        auto& [fetch, values] = *fetched;
        const StepParams params = BindValues(*vars, *fetch, values);
        ForwardOutcome outcome;
        absl::Status s =
            vars->model->Forward(fetch->batch, params, fetch->scratch->workspace, outcome.result);
        internal::ReleaseStepScratch(std::move(fetch->scratch));
        if (!s.ok()) return done(s);
        outcome.examples = fetch->batch.size;
        outcome.labels = std::move(fetch->batch.labels);
        done(std::move(outcome));
      });
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
