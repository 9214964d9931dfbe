// ParameterServerStrategy and its ShardPlacement: creating variables and placing their shards (Note
// [Creating shards at once], strategy.h), the requests that create and drop shards, and the
// checkpoint path's recreation of a lost PS's shards. The backups live in backups.cc, the
// re-adoption of a run's or a stalled coordinator's shards in readoption.cc.
#include "coordinator/ps/strategy.h"

#include <algorithm>
#include <caf/event_based_actor.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/error.h"
#include "coordinator/ps/internal/await.h"
#include "coordinator/ps/internal/ps_request_timeout.h"
#include "core/base/fan_in.h"
#include "tessera/status.h"

namespace tessera {

using internal::kPsRequestTimeout;

ShardPlacement::ShardPlacement(Cluster& cluster, Partitioner partitioner, int32_t shard_copies)
    : cluster_(cluster), partitioner_(std::move(partitioner)), shard_copies_(shard_copies) {}

ShardPlacement::~ShardPlacement() {
  if (!cluster_.networked()) return;
  std::vector<std::pair<int32_t, std::string>> created;
  for (const PlacedShard& placed : shards_) {
    created.emplace_back(placed.task, placed.name());
    if (placed.backup) created.emplace_back(placed.backup_task, placed.name());
  }
  DropShards(created);
}

const Partitioner& ShardPlacement::PartitionerFor(const VariableOptions& options) const {
  if (options.partitioner.has_value()) return *options.partitioner;
  if (!scopes_.empty()) return scopes_.back();
  return partitioner_;
}

std::string ShardPlacement::DescribePlacement(int32_t task) const {
  std::vector<std::string> names;
  for (const PlacedShard& placed : shards_) {
    if (placed.task == task) names.push_back(placed.name());
  }
  if (names.empty()) return "(none)";
  return absl::StrJoin(names, ", ");
}

std::optional<OptimizerSpec> ShardPlacement::OptimizerOf(const std::string& name) const {
  for (const PlacedShard& placed : shards_) {
    if (placed.variable == name) return placed.spec.optimizer;
  }
  return std::nullopt;
}

// A variable planned by Plan: its handle (ON_WRITE) or its per-worker copies (ON_READ), whose
// shards CreatePlanned fills in, and its shards' placement, in shard (copy) order.
struct ShardPlacement::PlannedVariable {
  std::string name;
  std::optional<VariableHandle> handle;
  std::optional<PerWorkerVariable> per_worker;
  std::vector<PlacedShard> shards;
};

absl::StatusOr<std::vector<shard_actor>> ShardPlacement::CreateShards(
    const std::vector<PlacedShard>& shards) {
  // Every reply, failed or not, is waited for: a shard created after another one failed must be
  // dropped too.
  struct Reply {
    absl::Status status;
    shard_actor shard;
  };
  std::vector<ps_node_actor> nodes;
  for (const PlacedShard& placed : shards) nodes.push_back(cluster_.actors().ps_node(placed.task));
  const caf::actor owner = cluster_.actors().session();
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Reply> replies,
      internal::Await<std::vector<Reply>>(
          cluster_.actors().system(),
          [&shards, &nodes, owner](caf::event_based_actor* self, auto done) {
            auto join = FanIn<Reply>::Start(
                shards.size(), [self, done](absl::StatusOr<std::vector<Reply>> all) {
                  self->quit();
                  done(std::move(all));
                });
            for (size_t k = 0; k < shards.size(); ++k) {
              const int32_t task = shards[k].task;
              self->request(nodes[k], kPsRequestTimeout, create_shard_atom::value,
                            shards[k].spec, owner)
                  .then([slot = join->Slot(k)](
                            shard_actor& shard) { slot(Reply{absl::OkStatus(), shard}); },
                        [slot = join->Slot(k), task](caf::error& err) {
                          absl::Status status = ErrorToStatus(err);
                          if (absl::IsUnavailable(status)) {
                            status = absl::UnavailableError(absl::StrCat(
                                "ps ", task, " is unavailable: ", status.message()));
                          }
                          slot(Reply{std::move(status), shard_actor()});
                        });
            }
          }));
  std::vector<shard_actor> created;
  std::vector<std::pair<int32_t, std::string>> to_drop;
  absl::Status first_error;
  for (size_t k = 0; k < shards.size(); ++k) {
    if (!replies[k].status.ok()) {
      if (first_error.ok()) first_error = replies[k].status;
      continue;
    }
    created.push_back(replies[k].shard);
    const ShardSpec& spec = shards[k].spec;
    to_drop.emplace_back(shards[k].task,
                         ShardName(spec.variable, spec.shard_index, spec.num_shards));
  }
  if (!first_error.ok()) {
    DropShards(to_drop);
    return first_error;
  }
  return created;
}

void ShardPlacement::DropShards(const std::vector<std::pair<int32_t, std::string>>& created) {
  if (created.empty()) return;
  // All at once, each PS node monitored: a request to a PS process that has died is dropped without
  // an error (Note [A restarted node behind a cached proxy], cluster/network/network.cc), so its
  // node's down message is what ends the wait for its shards (one request after another, each
  // waiting out its timeout, kept a coordinator whose PS was lost for a minute). A hung PS costs
  // one bounded wait.
  std::vector<std::pair<ps_node_actor, std::string>> drops;
  for (const auto& [task, name] : created)
    drops.emplace_back(cluster_.actors().ps_node(task), name);
  const caf::actor session = cluster_.actors().session();
  const absl::Status dropped = internal::AwaitStatus(
      cluster_.actors().system(), [drops, session](caf::event_based_actor* self, auto done) {
        auto answered = std::make_shared<std::vector<bool>>(drops.size(), false);
        auto left = std::make_shared<size_t>(drops.size());
        auto settle = [self, answered, left, done](size_t i) {
          if ((*answered)[i]) return;
          (*answered)[i] = true;
          if (--*left > 0) return;
          done(absl::OkStatus());
          self->quit();
        };
        self->set_down_handler([drops, settle](caf::down_msg& down) {
          for (size_t i = 0; i < drops.size(); ++i) {
            if (drops[i].first.address() == down.source) settle(i);
          }
        });
        for (size_t i = 0; i < drops.size(); ++i) {
          if (!drops[i].first) {
            settle(i);
            continue;
          }
          self->monitor(drops[i].first);
          self->request(drops[i].first, std::chrono::seconds(10), drop_shard_atom::value,
                        drops[i].second, session)
              .then([settle, i] { settle(i); }, [settle, i](caf::error&) { settle(i); });
        }
      });
  (void)dropped;  // always OK: a shard that could not be dropped dies with the session anyway
}

absl::StatusOr<ShardPlacement::PlannedVariable> ShardPlacement::Plan(
    const VariableOptions& options, const std::vector<PlannedVariable>& planned) {
  if (options.name.empty()) return absl::InvalidArgumentError("a variable needs a name");
  const bool planned_already =
      std::any_of(planned.begin(), planned.end(),
                  [&options](const PlannedVariable& p) { return p.name == options.name; });
  if (variables_.count(options.name) > 0 || planned_already) {
    return absl::InvalidArgumentError(absl::StrCat("a variable named ", options.name, " exists"));
  }
  TESSERA_RETURN_IF_ERROR(
      Annotate(ValidateAggregation(options.synchronization, options.aggregation, options.dtype),
               absl::StrCat("variable ", options.name)));
  TESSERA_ASSIGN_OR_RETURN(Shape shape, Shape::Make(options.shape.dims()));
  const int32_t num_ps = cluster_.num_ps();
  if (shard_copies_ != 1 && shard_copies_ != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard_copies must be 1 or 2 (a backup of every shard), not ", shard_copies_));
  }
  if (shard_copies_ == 2 && num_ps < 2) {
    return absl::InvalidArgumentError(
        "shard_copies = 2 needs at least 2 parameter servers: a shard's backup lives on another");
  }
  PlannedVariable plan;
  plan.name = options.name;

  if (options.synchronization == VariableSynchronization::kOnRead) {
    PerWorkerVariable per_worker{options.name, shape, options.aggregation, {}};
    for (int32_t k = 0; k < cluster_.num_workers(); ++k) {
      ShardSpec spec;
      spec.variable = absl::StrCat(options.name, "/worker_", k);
      spec.full_shape = shape;
      spec.rows = shape.rows();
      spec.dtype = options.dtype;
      spec.initializer = options.initializer;
      const int32_t task = static_cast<int32_t>(next_ps_++ % num_ps);
      VariableHandle copy;
      copy.name = spec.variable;
      copy.shape = shape;
      copy.dtype = options.dtype;
      TESSERA_ASSIGN_OR_RETURN(copy.layout, ShardLayout::Make(shape.rows(), 1));
      copy.ps_tasks = {task};
      copy.synchronization = VariableSynchronization::kOnRead;
      copy.aggregation = options.aggregation;
      copy.trainable = false;
      per_worker.copies.push_back(std::move(copy));
      plan.shards.push_back(PlacedShard{task, std::move(spec), options.name, k, true});
    }
    plan.per_worker = std::move(per_worker);
    return plan;
  }

  int64_t num_shards = 1;
  std::optional<int32_t> colocated_task;
  if (options.colocate_with != nullptr) {
    const std::vector<VariableShard> target = options.colocate_with->Variables();
    if (target.empty()) return absl::InvalidArgumentError("colocate_with names no variable");
    colocated_task = target[0].ps_task;
  } else {
    TESSERA_ASSIGN_OR_RETURN(num_shards, NumShards(PartitionerFor(options), shape, options.dtype));
  }
  TESSERA_ASSIGN_OR_RETURN(ShardLayout layout,
                           ShardLayout::Make(shape.rank() == 0 ? 1 : shape.rows(), num_shards));
  VariableHandle handle;
  handle.name = options.name;
  handle.shape = shape;
  handle.dtype = options.dtype;
  handle.layout = layout;
  handle.synchronization = options.synchronization;
  handle.aggregation = options.aggregation;
  handle.trainable = options.trainable;
  for (int64_t s = 0; s < num_shards; ++s) {
    ShardSpec spec;
    spec.variable = options.name;
    spec.shard_index = static_cast<int32_t>(s);
    spec.num_shards = static_cast<int32_t>(num_shards);
    spec.full_shape = shape;
    spec.row_offset = layout.ShardOffset(s);
    spec.rows = layout.ShardRows(s);
    spec.dtype = options.dtype;
    spec.initializer = options.initializer;
    spec.optimizer = options.optimizer;
    const int32_t task =
        colocated_task.has_value() ? *colocated_task : static_cast<int32_t>(next_ps_++ % num_ps);
    handle.ps_tasks.push_back(task);
    plan.shards.push_back(PlacedShard{task, std::move(spec), options.name, s, false});
  }
  plan.handle = std::move(handle);
  return plan;
}

absl::StatusOr<std::vector<ShardedVariable>> ShardPlacement::CreatePlanned(
    std::vector<PlannedVariable> planned, int64_t next_ps_before) {
  std::vector<PlacedShard> all;
  for (const PlannedVariable& plan : planned) {
    all.insert(all.end(), plan.shards.begin(), plan.shards.end());
  }
  // Note [Backups on the next PS]: each backup is created with its primary, from its spec.
  const size_t num_primaries = all.size();
  if (shard_copies_ == 2) {
    for (size_t k = 0; k < num_primaries; ++k) {
      PlacedShard backup = all[k];
      backup.task = (all[k].task + 1) % cluster_.num_ps();
      all.push_back(std::move(backup));
    }
  }
  if (std::optional<std::vector<shard_actor>> adopted = AdoptClaimed(all, num_primaries);
      adopted.has_value()) {
    return Register(std::move(planned), all, num_primaries, *std::move(adopted));
  }
  absl::StatusOr<std::vector<shard_actor>> created = CreateShards(all);
  if (created.ok() && shard_copies_ == 2) {
    const std::vector<PlacedShard> primaries(all.begin(), all.begin() + num_primaries);
    const std::vector<PlacedShard> placed_backups(all.begin() + num_primaries, all.end());
    const std::vector<shard_actor> backups(created->begin() + num_primaries, created->end());
    if (absl::Status attached = AttachBackups(primaries, placed_backups, backups, false);
        !attached.ok()) {
      std::vector<std::pair<int32_t, std::string>> to_drop;
      for (const PlacedShard& placed : all) to_drop.emplace_back(placed.task, placed.name());
      DropShards(to_drop);
      created = attached;
    }
  }
  if (!created.ok()) {
    next_ps_ = next_ps_before;
    return created.status();
  }
  return Register(std::move(planned), all, num_primaries, *std::move(created));
}

std::vector<ShardedVariable> ShardPlacement::Register(std::vector<PlannedVariable> planned,
                                                      const std::vector<PlacedShard>& all,
                                                      size_t num_primaries,
                                                      std::vector<shard_actor> created) {
  std::vector<ShardedVariable> out;
  size_t k = 0;
  for (PlannedVariable& plan : planned) {
    for (PlacedShard placed : plan.shards) {
      if (shard_copies_ == 2) {
        placed.backup = created[num_primaries + k];
        placed.backup_task = all[num_primaries + k].task;
      }
      shard_actor& shard = created[k++];
      if (plan.per_worker.has_value()) {
        plan.per_worker->copies[placed.index].shards = {std::move(shard)};
      } else {
        plan.handle->shards.push_back(std::move(shard));
      }
      shards_.push_back(std::move(placed));
    }
    ShardedVariable variable =
        plan.per_worker.has_value()
            ? ShardedVariableAccess::Make(&cluster_.actors().system(), *std::move(plan.per_worker))
            : ShardedVariableAccess::Make(&cluster_.actors().system(), *std::move(plan.handle));
    variables_.emplace(plan.name, variable);
    out.push_back(std::move(variable));
  }
  return out;
}

absl::StatusOr<ShardedVariable> ShardPlacement::CreateVariable(const VariableOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<ShardedVariable> created, CreateVariables({options}));
  return std::move(created.front());
}

absl::StatusOr<std::vector<ShardedVariable>> ShardPlacement::CreateVariables(
    const std::vector<VariableOptions>& options) {
  if (options.empty()) return std::vector<ShardedVariable>();
  const int64_t next_ps_before = next_ps_;
  std::vector<PlannedVariable> planned;
  for (const VariableOptions& variable : options) {
    absl::StatusOr<PlannedVariable> plan = Plan(variable, planned);
    if (!plan.ok()) {
      next_ps_ = next_ps_before;
      return plan.status();
    }
    planned.push_back(*std::move(plan));
  }
  return CreatePlanned(std::move(planned), next_ps_before);
}

absl::StatusOr<std::shared_ptr<const ModelVariables>> ShardPlacement::CreateModelVariables(
    std::shared_ptr<const Model> model, const OptimizerSpec& optimizer,
    ParameterServerStrategy::InitialValues values) {
  auto vars = std::make_shared<ModelVariables>();
  vars->model = model;
  static const Partitioner kNone;
  std::vector<VariableOptions> variables;
  for (const ParamSpec& param : model->spec().params) {
    VariableOptions options;
    options.name = param.name;
    options.shape = param.shape;
    options.initializer = param.initializer;
    if (values == ParameterServerStrategy::InitialValues::kRestoredNext)
      options.initializer = InitializerSpec{"zeros", {}, 0};
    options.trainable = param.trainable;
    if (param.trainable) options.optimizer = optimizer;
    if (!param.partitioned) options.partitioner = kNone;
    variables.push_back(std::move(options));
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<ShardedVariable> created, CreateVariables(variables));
  for (size_t i = 0; i < created.size(); ++i) {
    vars->by_param.emplace(model->spec().params[i].name, created[i].handle());
  }
  TESSERA_RETURN_IF_ERROR(vars->Validate());
  return std::shared_ptr<const ModelVariables>(std::move(vars));
}

void ShardPlacement::Repoint(const PlacedShard& placed, shard_actor actor, int32_t task) {
  ShardedVariable& variable = variables_.at(placed.variable);
  if (placed.per_worker_copy) {
    ShardedVariableAccess::ReplaceCopy(variable, placed.index, std::move(actor), task);
  } else {
    ShardedVariableAccess::ReplaceShard(variable, placed.index, std::move(actor), task);
  }
}

absl::StatusOr<std::vector<std::string>> ShardPlacement::RecreateShardsOn(int32_t task) {
  std::vector<PlacedShard> lost;
  for (const PlacedShard& placed : shards_) {
    if (placed.task == task) lost.push_back(placed);
  }
  TESSERA_ASSIGN_OR_RETURN(std::vector<shard_actor> created, CreateShards(lost));
  std::vector<std::string> touched;
  // The recreated shards' backups hold what the checkpoint will replace: they go, and
  // RebuildBackups makes new ones from the restored state.
  std::vector<std::pair<int32_t, std::string>> stale;
  for (size_t k = 0; k < lost.size(); ++k) {
    const PlacedShard& placed = lost[k];
    Repoint(placed, std::move(created[k]), task);
    if (touched.empty() || touched.back() != placed.variable) touched.push_back(placed.variable);
  }
  for (PlacedShard& placed : shards_) {
    if (placed.task != task) continue;
    if (placed.backup) stale.emplace_back(placed.backup_task, placed.name());
    placed.backup = shard_actor();
    placed.backup_task = -1;
  }
  DropShards(stale);
  return touched;
}

std::vector<VariableHandle> ShardPlacement::Handles() const {
  std::vector<VariableHandle> out;
  for (const auto& [name, variable] : variables_) {
    if (!variable.is_on_read()) {
      out.push_back(variable.handle());
      continue;
    }
    for (int32_t k = 0; k < cluster_.num_workers(); ++k) {
      if (absl::StatusOr<VariableHandle> copy = variable.ForWorker(k); copy.ok()) {
        out.push_back(*std::move(copy));
      }
    }
  }
  return out;
}

// -- ParameterServerStrategy, the public handle
// ------------------------------------------------------

ParameterServerStrategy::ParameterServerStrategy(Cluster& cluster, Partitioner partitioner,
                                                 int32_t shard_copies)
    : placement_(std::make_unique<ShardPlacement>(cluster, std::move(partitioner), shard_copies)) {}

ParameterServerStrategy::~ParameterServerStrategy() = default;

absl::StatusOr<ShardedVariable> ParameterServerStrategy::CreateVariable(
    const VariableOptions& options) {
  return placement_->CreateVariable(options);
}

absl::StatusOr<std::vector<ShardedVariable>> ParameterServerStrategy::CreateVariables(
    const std::vector<VariableOptions>& options) {
  return placement_->CreateVariables(options);
}

absl::StatusOr<std::shared_ptr<const ModelVariables>> ParameterServerStrategy::CreateModelVariables(
    std::shared_ptr<const Model> model, const OptimizerSpec& optimizer, InitialValues values) {
  return placement_->CreateModelVariables(std::move(model), optimizer, values);
}

ParameterServerStrategy::PartitionerScope::PartitionerScope(ParameterServerStrategy& strategy,
                                                            Partitioner partitioner)
    : strategy_(strategy) {
  strategy_.placement_->scopes().push_back(std::move(partitioner));
}

ParameterServerStrategy::PartitionerScope::~PartitionerScope() {
  strategy_.placement_->scopes().pop_back();
}

Cluster& ParameterServerStrategy::cluster() { return placement_->cluster(); }
const Partitioner& ParameterServerStrategy::partitioner() const {
  return placement_->partitioner();
}
int32_t ParameterServerStrategy::shard_copies() const { return placement_->shard_copies(); }
const std::map<std::string, ShardedVariable>& ParameterServerStrategy::variables() const {
  return placement_->variables();
}
std::string ParameterServerStrategy::DescribePlacement(int32_t task) const {
  return placement_->DescribePlacement(task);
}
std::optional<OptimizerSpec> ParameterServerStrategy::OptimizerOf(const std::string& name) const {
  return placement_->OptimizerOf(name);
}

}  // namespace tessera
