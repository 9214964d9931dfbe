#include "actors/ps/sharded_variable_state.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace tessera {

namespace {

// What an empty ShardedVariable answers with.
const ShardedVariable::State& NoVariable() {
  static const auto* none = new ShardedVariable::State();
  return *none;
}

}  // namespace

ShardedVariable ShardedVariableAccess::Make(caf::actor_system* system, VariableHandle handle) {
  auto state = std::make_shared<ShardedVariable::State>();
  state->system = system;
  state->handle = std::move(handle);
  return ShardedVariable(std::move(state));
}

ShardedVariable ShardedVariableAccess::Make(caf::actor_system* system,
                                            PerWorkerVariable per_worker) {
  auto state = std::make_shared<ShardedVariable::State>();
  state->system = system;
  state->handle.name = per_worker.name;
  state->handle.shape = per_worker.shape;
  state->handle.synchronization = VariableSynchronization::kOnRead;
  state->handle.aggregation = per_worker.aggregation;
  if (!per_worker.copies.empty()) state->handle.dtype = per_worker.copies[0].dtype;
  state->per_worker = std::move(per_worker);
  return ShardedVariable(std::move(state));
}

void ShardedVariableAccess::ReplaceShard(ShardedVariable& v, int64_t shard, shard_actor actor,
                                         int32_t task) {
  auto next = std::make_shared<ShardedVariable::State>(*v.state_);
  next->handle.shards[shard] = std::move(actor);
  next->handle.ps_tasks[shard] = task;
  v.state_ = std::move(next);
}

void ShardedVariableAccess::ReplaceCopy(ShardedVariable& v, int64_t copy, shard_actor actor,
                                        int32_t task) {
  auto next = std::make_shared<ShardedVariable::State>(*v.state_);
  next->per_worker->copies[copy].shards[0] = std::move(actor);
  next->per_worker->copies[copy].ps_tasks[0] = task;
  v.state_ = std::move(next);
}

ShardedVariable::ShardedVariable() = default;

ShardedVariable::ShardedVariable(std::shared_ptr<const State> state) : state_(std::move(state)) {}

const VariableHandle& ShardedVariable::handle() const {
  return (state_ ? *state_ : NoVariable()).handle;
}
const std::string& ShardedVariable::name() const { return handle().name; }
const Shape& ShardedVariable::shape() const { return handle().shape; }
DType ShardedVariable::dtype() const { return handle().dtype; }
VariableSynchronization ShardedVariable::synchronization() const {
  return handle().synchronization;
}
VariableAggregation ShardedVariable::aggregation() const { return handle().aggregation; }
bool ShardedVariable::is_on_read() const { return state_ && state_->per_worker.has_value(); }
int64_t ShardedVariable::num_shards() const { return handle().num_shards(); }

std::vector<VariableShard> ShardedVariable::Variables() const {
  std::vector<VariableShard> out;
  const VariableHandle& h = handle();
  if (is_on_read()) {
    for (const VariableHandle& copy : state_->per_worker->copies) {
      out.push_back({copy.name, 0, copy.shape, copy.ps_tasks.empty() ? 0 : copy.ps_tasks[0]});
    }
    return out;
  }
  for (int64_t s = 0; s < h.num_shards(); ++s) {
    const ShardExtent e = h.layout.Extent(s);
    out.push_back({h.ShardNameOf(s), e.offset,
                   h.shape.rank() == 0 ? h.shape : h.shape.WithRows(e.rows), h.ps_tasks[s]});
  }
  return out;
}

absl::StatusOr<const VariableHandle*> ShardedVariableAccess::HandleFor(const ShardedVariable& v,
                                                                      int32_t slot) {
  if (!v.is_on_read()) return &v.handle();
  const std::vector<VariableHandle>& copies = v.state_->per_worker->copies;
  if (slot < 0 || slot >= static_cast<int32_t>(copies.size())) {
    return absl::InvalidArgumentError(absl::StrCat(v.name(), " has no copy for worker ", slot));
  }
  return &copies[slot];
}

absl::StatusOr<VariableHandle> ShardedVariable::ForWorker(int32_t slot) const {
  absl::StatusOr<const VariableHandle*> h = ShardedVariableAccess::HandleFor(*this, slot);
  if (!h.ok()) return h.status();
  return **h;
}

}  // namespace tessera
