// One asynchronous training step of a Model against parameter-server variables, as a worker runs
// it (DESIGN.md §1): gather the batch's unique embedding rows (one request per touched shard) and
// read every dense variable, all in flight at once; run forward and backward with Eigen; send one
// sparse gradient per touched shard and one dense gradient per dense variable; then report the
// loss. A step costs O(number of shards) calls, never O(number of rows); on a networked worker
// they travel as one request per PS node for the values and one for the gradients (Note [One
// request per PS node], actors/shard_call.h).
//
// Thread-safety: runs on the calling actor; the ModelVariables are shared, immutable values.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/variable_ops.h"
#include "core/batch.h"
#include "core/model.h"

namespace tessera {

// A model and the variable holding each of its parameters.
struct ModelVariables {
  std::shared_ptr<const Model> model;
  std::map<std::string, VariableHandle> by_param;  // every ModelSpec parameter, by name
  // A networked worker's PS nodes by task: a step batches its calls per node. Empty in one
  // process, where every call goes straight to its shard.
  std::vector<ps_node_actor> ps_nodes;

  // InvalidArgument unless every parameter of the model has a variable of its shape.
  absl::Status Validate() const;
};

struct StepOutcome {
  float loss = 0;
  int64_t examples = 0;
};

namespace internal {

// A step's scratch memory: the model's workspace (which also carries the lookup plan from
// RowsNeeded to ForwardBackward) and its result buffers.
struct StepScratch {
  StepWorkspace workspace;
  StepResult result;
};

// Note [Step scratch reuse]
// A step's workspace and result hold a few hundred KiB of activations, gradients and id plans,
// which a fresh pair allocates again on every step (and the carried lookup plan needs the
// workspace to outlive the gather anyway: see Note [Reused lookup plans]). Each scheduler
// thread keeps a few finished steps' scratch for the next step it starts. A step may finish on
// another thread than it started on (work stealing moves actors), which only moves the scratch
// to that thread's list; a step in flight owns its scratch alone, so concurrent steps (several
// workers, or several closures per worker) never share one.
std::unique_ptr<StepScratch> AcquireStepScratch();
void ReleaseStepScratch(std::unique_ptr<StepScratch> scratch);

// The parameter values of one step, gathered from the shards.
struct StepFetch {
  Batch batch;
  std::unique_ptr<StepScratch> scratch;    // holds the batch's lookup plan
  std::map<std::string, Ids> needed;       // per embedding table: sorted unique ids
  std::map<std::string, Tensor> values;    // per parameter: whole value or gathered rows
  size_t pending = 0;
  bool finished = false;
};


}  // namespace internal

// Runs one step on `batch`; `done` gets the batch's mean loss once every gradient has been
// applied by its shard (so a finished closure's updates are visible to later reads), or the first
// error (a bad batch, an unavailable shard).
template <class Self>
void TrainStepAsync(Self* self, std::shared_ptr<const ModelVariables> vars, Batch batch,
                    Done<StepOutcome> done) {
  const Model& model = *vars->model;
  auto fetch = std::make_shared<internal::StepFetch>();
  fetch->batch = std::move(batch);
  fetch->scratch = internal::AcquireStepScratch();
  // Plans the lookups into the workspace, so ForwardBackward does not sort the ids again.
  absl::StatusOr<std::map<std::string, Ids>> needed =
      model.RowsNeeded(fetch->batch, fetch->scratch->workspace);
  if (!needed.ok()) return done(needed.status());
  fetch->needed = *std::move(needed);
  auto finish = std::make_shared<Done<StepOutcome>>(std::move(done));

  // Phase 2: forward/backward, then the gradients; runs when every value has arrived.
  auto compute = [self, vars, fetch, finish]() {
    const Model& m = *vars->model;
    StepParams params;
    for (const auto& [name, value] : fetch->values) {
      auto ids = fetch->needed.find(name);
      if (ids != fetch->needed.end()) {
        params.gathered[name] = EmbeddingRows{ids->second, value.view()};
      } else {
        params.full[name] = value.view();
      }
    }
    StepResult& result = fetch->scratch->result;
    if (absl::Status s = m.ForwardBackward(fetch->batch, params, fetch->scratch->workspace, result);
        !s.ok()) {
      return (*finish)(s);
    }
    struct Acks {
      size_t pending = 0;
      bool finished = false;
    };
    auto acks = std::make_shared<Acks>();
    acks->pending = result.dense_gradients.size() + result.sparse_gradients.size();
    const StepOutcome outcome{result.loss, fetch->batch.size};
    if (acks->pending == 0) return (*finish)(outcome);
    // The gradients go into the requests before each call returns; only the acks are awaited.
    auto ack = [acks, finish, outcome](absl::Status s) {
      if (acks->finished) return;
      if (!s.ok()) {
        acks->finished = true;
        return (*finish)(s);
      }
      if (--acks->pending > 0) return;
      acks->finished = true;
      (*finish)(outcome);
    };
    ShardBatch gradients(vars->ps_nodes);
    for (auto& [name, grad] : result.dense_gradients) {
      ApplyDenseGradientAsync(self, vars->by_param.at(name), std::move(grad), ack, &gradients);
    }
    for (const auto& [name, grad] : result.sparse_gradients) {
      ApplySparseGradientAsync(self, vars->by_param.at(name), grad, ack, &gradients);
    }
    gradients.Flush(self);
    // The requests own copies of the gradients now: the buffers can serve the next step.
    internal::ReleaseStepScratch(std::move(fetch->scratch));
  };

  // Phase 1: every parameter's value, all requests in flight at once.
  fetch->pending = vars->by_param.size();
  ShardBatch values(vars->ps_nodes);
  for (const auto& [name, handle] : vars->by_param) {
    auto arrived = [fetch, finish, compute, name = name](absl::StatusOr<Tensor> value) {
      if (fetch->finished) return;
      if (!value.ok()) {
        fetch->finished = true;
        return (*finish)(value.status());
      }
      fetch->values[name] = *std::move(value);
      if (--fetch->pending > 0) return;
      fetch->finished = true;
      compute();
    };
    auto ids = fetch->needed.find(name);
    if (ids != fetch->needed.end()) {
      GatherAsync(self, handle, ids->second, ShardingStrategy::kDiv, arrived, &values);
    } else {
      ReadAsync(self, handle, arrived, &values);
    }
  }
  values.Flush(self);
}

}  // namespace tessera
