// One asynchronous training step of a Model against parameter-server variables, as a worker runs
// it (docs/design.md §1): gather the batch's unique embedding rows (one request per touched shard) and
// read every dense variable, all in flight at once; run forward and backward with Eigen; send one
// sparse gradient per touched shard and one dense gradient per dense variable; then report the
// loss. A step costs O(number of shards) calls, never O(number of rows); on a networked worker
// they travel as one request per PS node for the values and one for the gradients (Note [One
// request per PS node], actors/ps/shard_client.h).
//
// Thread-safety: runs on the calling actor; the ModelVariables are shared, immutable values.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include <caf/scheduled_actor.hpp>

#include "actors/ps/ps_node_actor.h"
#include "actors/ps/variable_ops.h"
#include "core/model/model.h"
#include "tessera/data.h"

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
// RowsNeeded to ForwardBackward), its result buffers, and the sparse gradients its last steps
// sent, shared with the shards' ops (Note [A step's gradient is split without a copy],
// core/variables/indexed_slices.h).
struct StepScratch {
  StepWorkspace workspace;
  StepResult result;
  std::map<std::string, std::shared_ptr<Tensor>> shared_gradients;  // by table

  // Hands table `table`'s `gradient` to the ops that share it, and leaves in `gradient` the memory
  // of the one sent before when no op holds that any more (else nothing), for the next step's
  // backward pass to write into.
  std::shared_ptr<const Tensor> Share(const std::string& table, Tensor& gradient);
};

// Note [Step scratch reuse]
// A step's workspace and result hold its activations, gradients and id plans — a few hundred
// KiB on small models, tens of MiB at a batch of 512 over 1000-wide embeddings — which a fresh
// pair allocates again on every step (and the carried lookup plan needs the workspace to
// outlive the gather anyway: see Note [Reused lookup plans]). The process keeps finished steps'
// scratch in one pool, taken and returned under a mutex (twice per step: no contention worth
// measuring). The pool never holds more scratch than the most steps that ran at once, which is
// what keeps a worker's memory O(concurrent steps x batch). Per-thread caches did worse: a step
// often finishes on another thread than it started on (work stealing moves actors), so scratch
// drifted between threads and every thread kept its own few — 40 MiB of idle scratch in a worker
// at the RFC's sizes. A step in flight owns its scratch alone, so concurrent steps (several
// workers, or several closures per worker) never share one.
std::unique_ptr<StepScratch> AcquireStepScratch();
void ReleaseStepScratch(std::unique_ptr<StepScratch> scratch);

}  // namespace internal

// A forward pass's outcome (evaluation): the model's outputs and the batch's mean loss, and the
// batch's labels, so whoever merges the metrics needs no copy of the data.
struct ForwardOutcome {
  ForwardResult result;
  int64_t examples = 0;
  Tensor labels;
};

// Runs one step on `batch` from actor `self`; `done` gets the batch's mean loss once every
// gradient has been applied by its shard (so a finished closure's updates are visible to later
// reads), or the first error (a bad batch, an unavailable shard). `updates` names the gradients
// (a closure's ReplicaContext::update_namer(), so that a re-run applies none twice); null: they
// go unnamed.
void TrainStepAsync(caf::scheduled_actor* self, std::shared_ptr<const ModelVariables> vars,
                    Batch batch, std::shared_ptr<UpdateNamer> updates, Done<StepOutcome> done);

// Forward only, as evaluation runs it: the same reads as TrainStepAsync (gathered rows, whole
// dense values), then Model::Forward; no gradient, no write. `done` gets the outcome or the first
// error (a bad batch, an unavailable shard).
void ForwardStepAsync(caf::scheduled_actor* self, std::shared_ptr<const ModelVariables> vars,
                      Batch batch, Done<ForwardOutcome> done);

}  // namespace tessera
