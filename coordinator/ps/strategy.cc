#include "coordinator/ps/strategy.h"

#include <algorithm>
#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <caf/system_messages.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/error.h"
#include "coordinator/ps/internal/await.h"
#include "core/base/fan_in.h"
#include "core/base/logging.h"
#include "core/base/status.h"

namespace tessera {
namespace {

// Creating or dropping a shard is quick (a large one is initialized in well under a minute, all
// of a node's at once); a PS process that dies in the middle never answers, so the wait is
// bounded.
constexpr auto kPsRequestTimeout = std::chrono::minutes(2);

}  // namespace

ParameterServerStrategy::ParameterServerStrategy(Cluster& cluster, Partitioner partitioner,
                                                 int32_t replicas)
    : cluster_(cluster), partitioner_(std::move(partitioner)), replicas_(replicas) {}

ParameterServerStrategy::~ParameterServerStrategy() {
  if (!cluster_.networked()) return;
  std::vector<std::pair<int32_t, std::string>> created;
  for (const PlacedShard& placed : shards_) {
    created.emplace_back(placed.task, placed.name());
    if (placed.backup) created.emplace_back(placed.backup_task, placed.name());
  }
  DropShards(created);
}

ParameterServerStrategy::PartitionerScope::PartitionerScope(ParameterServerStrategy& strategy,
                                                            Partitioner partitioner)
    : strategy_(strategy) {
  strategy_.scopes_.push_back(std::move(partitioner));
}

ParameterServerStrategy::PartitionerScope::~PartitionerScope() { strategy_.scopes_.pop_back(); }

const Partitioner& ParameterServerStrategy::PartitionerFor(const VariableOptions& options) const {
  if (options.partitioner.has_value()) return *options.partitioner;
  if (!scopes_.empty()) return scopes_.back();
  return partitioner_;
}

std::string ParameterServerStrategy::DescribePlacement(int32_t task) const {
  std::vector<std::string> names;
  for (const PlacedShard& placed : shards_) {
    if (placed.task == task) names.push_back(placed.name());
  }
  if (names.empty()) return "(none)";
  return absl::StrJoin(names, ", ");
}

std::optional<OptimizerSpec> ParameterServerStrategy::OptimizerOf(const std::string& name) const {
  for (const PlacedShard& placed : shards_) {
    if (placed.variable == name) return placed.spec.optimizer;
  }
  return std::nullopt;
}

// A variable planned by Plan: its handle (ON_WRITE) or its per-worker copies (ON_READ), whose
// shards CreatePlanned fills in, and its shards' placement, in shard (copy) order.
struct ParameterServerStrategy::PlannedVariable {
  std::string name;
  std::optional<VariableHandle> handle;
  std::optional<PerWorkerVariable> per_worker;
  std::vector<PlacedShard> shards;
};

absl::StatusOr<std::vector<shard_actor>> ParameterServerStrategy::CreateShards(
    const std::vector<PlacedShard>& shards) {
  // Every reply, failed or not, is waited for: a shard created after another one failed must be
  // dropped too.
  struct Reply {
    absl::Status status;
    shard_actor shard;
  };
  std::vector<ps_node_actor> nodes;
  for (const PlacedShard& placed : shards) nodes.push_back(cluster_.ps_node(placed.task));
  const caf::actor owner = cluster_.session();
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Reply> replies,
      internal::Await<std::vector<Reply>>(
          cluster_.system(), [&shards, &nodes, owner](caf::event_based_actor* self, auto done) {
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

void ParameterServerStrategy::DropShards(
    const std::vector<std::pair<int32_t, std::string>>& created) {
  if (created.empty()) return;
  // All at once, each PS node monitored: a request to a PS process that has died is dropped
  // without an error (Note [A restarted node behind a cached proxy], cluster/network/network.cc), so
  // its node's down message is what ends the wait for its shards (one request after another,
  // each waiting out its timeout, kept a coordinator whose PS was lost for a minute). A hung
  // PS costs one bounded wait.
  std::vector<std::pair<ps_node_actor, std::string>> drops;
  for (const auto& [task, name] : created) drops.emplace_back(cluster_.ps_node(task), name);
  const caf::actor session = cluster_.session();
  const absl::Status dropped = internal::AwaitStatus(cluster_.system(), [drops, session](
                                                         caf::event_based_actor* self, auto done) {
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

absl::StatusOr<ParameterServerStrategy::PlannedVariable> ParameterServerStrategy::Plan(
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
  if (replicas_ != 1 && replicas_ != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas must be 1 or 2 (a backup of every shard), not ", replicas_));
  }
  if (replicas_ == 2 && num_ps < 2) {
    return absl::InvalidArgumentError(
        "replicas = 2 needs at least 2 parameter servers: a shard's backup lives on another");
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

absl::StatusOr<std::vector<ShardedVariable>> ParameterServerStrategy::CreatePlanned(
    std::vector<PlannedVariable> planned, int64_t next_ps_before) {
  std::vector<PlacedShard> all;
  for (const PlannedVariable& plan : planned) {
    all.insert(all.end(), plan.shards.begin(), plan.shards.end());
  }
  // Note [Backups on the next PS]: each backup is created with its primary, from its spec.
  const size_t num_primaries = all.size();
  if (replicas_ == 2) {
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
  if (created.ok() && replicas_ == 2) {
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

std::vector<ShardedVariable> ParameterServerStrategy::Register(std::vector<PlannedVariable> planned,
                                                               const std::vector<PlacedShard>& all,
                                                               size_t num_primaries,
                                                               std::vector<shard_actor> created) {
  std::vector<ShardedVariable> out;
  size_t k = 0;
  for (PlannedVariable& plan : planned) {
    for (PlacedShard placed : plan.shards) {
      if (replicas_ == 2) {
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
            ? ShardedVariable(&cluster_.system(), *std::move(plan.per_worker))
            : ShardedVariable(&cluster_.system(), *std::move(plan.handle));
    variables_.emplace(plan.name, variable);
    out.push_back(std::move(variable));
  }
  return out;
}

absl::StatusOr<ShardedVariable> ParameterServerStrategy::CreateVariable(
    const VariableOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<ShardedVariable> created, CreateVariables({options}));
  return std::move(created.front());
}

absl::StatusOr<std::vector<ShardedVariable>> ParameterServerStrategy::CreateVariables(
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

absl::StatusOr<std::shared_ptr<const ModelVariables>>
ParameterServerStrategy::CreateModelVariables(std::shared_ptr<const Model> model,
                                              const OptimizerSpec& optimizer,
                                              InitialValues values) {
  auto vars = std::make_shared<ModelVariables>();
  vars->model = model;
  static const Partitioner kNone;
  std::vector<VariableOptions> variables;
  for (const ParamSpec& param : model->spec().params) {
    VariableOptions options;
    options.name = param.name;
    options.shape = param.shape;
    options.initializer = param.initializer;
    if (values == InitialValues::kRestoredNext) options.initializer = InitializerSpec{"zeros", {}, 0};
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

void ParameterServerStrategy::Repoint(const PlacedShard& placed, shard_actor actor, int32_t task) {
  ShardedVariable& variable = variables_.at(placed.variable);
  if (placed.per_worker_copy) {
    variable.ReplaceCopy(placed.index, std::move(actor), task);
  } else {
    variable.ReplaceShard(placed.index, std::move(actor), task);
  }
}

absl::StatusOr<std::vector<std::string>> ParameterServerStrategy::RecreateShardsOn(int32_t task) {
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

absl::StatusOr<std::vector<std::string>> ParameterServerStrategy::PromoteBackupsOf(int32_t task) {
  std::vector<std::string> unbacked;
  for (const PlacedShard& placed : shards_) {
    if (placed.task == task && (!placed.backup || placed.backup_task == task)) {
      unbacked.push_back(placed.name());
    }
  }
  if (!unbacked.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no backup to promote for ", absl::StrJoin(unbacked, ", ")));
  }
  std::vector<std::string> touched;
  for (PlacedShard& placed : shards_) {
    if (placed.backup_task == task) {  // a backup the lost node held
      placed.backup = shard_actor();
      placed.backup_task = -1;
      EndReplication(placed);
      continue;
    }
    if (placed.task != task) continue;
    Repoint(placed, placed.backup, placed.backup_task);
    placed.task = placed.backup_task;
    placed.backup = shard_actor();
    placed.backup_task = -1;
    if (touched.empty() || touched.back() != placed.variable) touched.push_back(placed.variable);
  }
  return touched;
}

void ParameterServerStrategy::EndReplication(const PlacedShard& primary) {
  caf::anon_send(cluster_.ps_node(primary.task), replicate_atom::value, primary.name(),
                 caf::actor(), std::string(), false);
}

absl::StatusOr<int32_t> ParameterServerStrategy::StrikeBackup(const std::string& shard,
                                                              const caf::actor_addr& backup) {
  for (PlacedShard& placed : shards_) {
    if (placed.name() != shard || !placed.backup || placed.backup.address() != backup) continue;
    const int32_t task = placed.backup_task;
    placed.backup = shard_actor();
    placed.backup_task = -1;
    EndReplication(placed);
    DropShards({{task, shard}});
    return task;
  }
  return absl::NotFoundError(
      absl::StrCat("the failed backup is not shard ", shard, "'s backup (any more)"));
}

std::optional<caf::actor_addr> ParameterServerStrategy::BackupOf(const std::string& shard,
                                                                 int32_t task) const {
  for (const PlacedShard& placed : shards_) {
    if (placed.task == task && placed.name() == shard && placed.backup) {
      return placed.backup.address();
    }
  }
  return std::nullopt;
}

int32_t ParameterServerStrategy::ShardsWithoutBackup() const {
  if (replicas_ < 2) return 0;
  return static_cast<int32_t>(std::count_if(shards_.begin(), shards_.end(),
                                            [](const PlacedShard& p) { return !p.backup; }));
}

absl::StatusOr<int32_t> ParameterServerStrategy::RebuildBackups(
    const std::vector<int32_t>& unavailable) {
  if (replicas_ < 2) return 0;
  const int32_t num_ps = cluster_.num_ps();
  auto usable = [&unavailable](int32_t t) {
    return std::find(unavailable.begin(), unavailable.end(), t) == unavailable.end();
  };
  std::vector<size_t> rebuilt;  // indices into shards_
  std::vector<PlacedShard> planned;
  std::vector<std::string> nowhere;
  for (size_t i = 0; i < shards_.size(); ++i) {
    const PlacedShard& placed = shards_[i];
    if (placed.backup) continue;
    std::optional<int32_t> chosen;
    for (int32_t step = 1; step < num_ps && !chosen.has_value(); ++step) {
      const int32_t t = (placed.task + step) % num_ps;
      if (usable(t)) chosen = t;
    }
    if (!chosen.has_value()) {
      nowhere.push_back(placed.name());
      continue;
    }
    PlacedShard backup = placed;
    backup.task = *chosen;
    planned.push_back(std::move(backup));
    rebuilt.push_back(i);
  }
  if (!planned.empty()) {
    TESSERA_ASSIGN_OR_RETURN(std::vector<shard_actor> backups, CreateShards(planned));
    std::vector<PlacedShard> primaries;
    for (size_t i : rebuilt) primaries.push_back(shards_[i]);
    if (absl::Status attached = AttachBackups(primaries, planned, backups, true); !attached.ok()) {
      std::vector<std::pair<int32_t, std::string>> to_drop;
      for (const PlacedShard& backup : planned) to_drop.emplace_back(backup.task, backup.name());
      DropShards(to_drop);
      return attached;
    }
    for (size_t k = 0; k < rebuilt.size(); ++k) {
      shards_[rebuilt[k]].backup = backups[k];
      shards_[rebuilt[k]].backup_task = planned[k].task;
    }
  }
  if (!nowhere.empty()) {
    return absl::UnavailableError(absl::StrCat("no live parameter server besides their own for ",
                                               "the backups of ", absl::StrJoin(nowhere, ", ")));
  }
  return static_cast<int32_t>(planned.size());
}

// Note [Two PS nodes never connect to each other at once]
// Across processes a primary's node first connects to its backup's node (Note [Backups reached
// directly], actors/ps/ps_node_actor.h). With backups on the next task, node t connects to t + 1
// while t + 1 connects to t. CAF 0.17's middleman mishandles two connections opened in opposite
// directions at the same moment: when both server handshakes arrive before either client
// handshake, each node keeps a different connection as its route and sends heartbeats only on
// the other, so after a quiet spell longer than the connection timeout one side closes a
// connection it thinks is the node's last, drops every proxy of a live node — each shard's
// backup reported down — and loses its route to it (a two-node program that connects both ways
// at once, then idles 3.5 s, saw it in 1 of 12 rounds; connecting one way first, 0 of 16). The
// CI run that found lost updates under replication had such a quiet spell: its workers spent
// seconds generating their data between the backups' attachment and the first step. So the
// backups are attached in two rounds, the second once the first is done: first every primary
// whose backup's task is higher than its own, then the rest; within a round all connections go
// the same way between any two nodes, and in the second round each pair is connected already (a
// second connection to a connected node is closed at once as redundant, harmlessly).
absl::Status ParameterServerStrategy::AttachBackups(const std::vector<PlacedShard>& primaries,
                                                    const std::vector<PlacedShard>& placed_backups,
                                                    const std::vector<shard_actor>& backups,
                                                    bool send_state) {
  const std::vector<std::string> addresses =
      cluster_.networked() ? cluster_.ps_addresses() : std::vector<std::string>{};
  for (const bool upward : {true, false}) {
    std::vector<size_t> round;
    for (size_t k = 0; k < primaries.size(); ++k) {
      if ((primaries[k].task < placed_backups[k].task) == upward) round.push_back(k);
    }
    if (round.empty()) continue;
    std::vector<ps_node_actor> nodes;
    std::vector<std::string> backup_addresses;
    for (size_t k : round) {
      nodes.push_back(cluster_.ps_node(primaries[k].task));
      backup_addresses.push_back(addresses.empty() ? std::string()
                                                   : addresses.at(placed_backups[k].task));
    }
    TESSERA_RETURN_IF_ERROR(internal::AwaitStatus(
        cluster_.system(), [&round, &primaries, &backups, &nodes, &backup_addresses, send_state](
                               caf::event_based_actor* self, auto done) {
          auto join = FanIn<int64_t>::Start(round.size(),
                                            [self, done](absl::StatusOr<std::vector<int64_t>> all) {
                                              self->quit();
                                              done(all.status());
                                            });
          for (size_t j = 0; j < round.size(); ++j) {
            const size_t k = round[j];
            self->request(nodes[j], kPsRequestTimeout, replicate_atom::value, primaries[k].name(),
                          caf::actor_cast<caf::actor>(backups[k]), backup_addresses[j], send_state)
                .then([slot = join->Slot(j)](int64_t version) { slot(version); },
                      [slot = join->Slot(j)](caf::error& err) {
                        slot(Annotate(ErrorToStatus(err), "giving a shard its backup"));
                      });
          }
        }));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ParameterServerStrategy::ClaimShardsOfRun(const std::string& run) {
  if (!cluster_.networked()) return 0;
  const int32_t num_ps = cluster_.num_ps();
  std::vector<ps_node_actor> nodes;
  for (int32_t task = 0; task < num_ps; ++task) nodes.push_back(cluster_.ps_node(task));
  const caf::actor owner = cluster_.session();
  using Claim = std::vector<HeldShard>;
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<Claim> claims,
      internal::Await<std::vector<Claim>>(
          cluster_.system(), [&nodes, owner, &run](caf::event_based_actor* self, auto done) {
            auto join = FanIn<Claim>::Start(nodes.size(),
                                            [self, done](absl::StatusOr<std::vector<Claim>> all) {
                                              self->quit();
                                              done(std::move(all));
                                            });
            for (size_t task = 0; task < nodes.size(); ++task) {
              self->request(nodes[task], kPsRequestTimeout, reclaim_atom::value, owner, run)
                  .then([slot = join->Slot(task)](Claim& held) { slot(std::move(held)); },
                        [slot = join->Slot(task), task](caf::error& err) {
                          slot(Annotate(ErrorToStatus(err),
                                        absl::StrCat("claiming the run's shards on ps ", task)));
                        });
            }
          }));
  int64_t claimed = 0;
  claimed_.clear();
  for (int32_t task = 0; task < num_ps; ++task) {
    claimed += static_cast<int64_t>(claims[task].size());
    if (!claims[task].empty()) claimed_[task] = std::move(claims[task]);
  }
  return claimed;
}

namespace {

// Whether a claimed shard's spec is the planned one's, the initializer aside (Note [A restarted
// coordinator re-adopts its run's shards]).
bool SameShard(const ShardSpec& held, const ShardSpec& planned) {
  const auto same_optimizer = [](const std::optional<OptimizerSpec>& a,
                                 const std::optional<OptimizerSpec>& b) {
    if (a.has_value() != b.has_value()) return false;
    return !a.has_value() || (a->name == b->name && a->params == b->params);
  };
  return held.variable == planned.variable && held.shard_index == planned.shard_index &&
         held.num_shards == planned.num_shards &&
         held.full_shape.dims() == planned.full_shape.dims() &&
         held.row_offset == planned.row_offset && held.rows == planned.rows &&
         held.dtype == planned.dtype && same_optimizer(held.optimizer, planned.optimizer);
}

}  // namespace

std::optional<std::vector<shard_actor>> ParameterServerStrategy::AdoptClaimed(
    const std::vector<PlacedShard>& all, size_t num_primaries) {
  if (claimed_.empty()) return std::nullopt;
  std::map<int32_t, std::vector<HeldShard>> claimed = std::move(claimed_);
  claimed_.clear();
  size_t total = 0;
  for (const auto& [task, held] : claimed) total += held.size();
  std::vector<shard_actor> adopted;
  std::string mismatch;
  for (size_t k = 0; k < all.size() && mismatch.empty(); ++k) {
    const PlacedShard& placed = all[k];
    const std::string name = placed.name();
    const bool forwards = replicas_ == 2 && k < num_primaries;
    const std::vector<HeldShard>& held = claimed[placed.task];
    auto it = std::find_if(held.begin(), held.end(),
                           [&name](const HeldShard& h) { return h.name == name; });
    if (it == held.end()) {
      mismatch = absl::StrCat("ps ", placed.task, " holds no ", name);
    } else if (!SameShard(it->spec, placed.spec)) {
      mismatch = absl::StrCat(name, " on ps ", placed.task, " is not the shard planned");
    } else if (it->replicated != forwards) {
      mismatch = absl::StrCat(
          name, " on ps ", placed.task, " is ",
          it->replicated ? "a primary, not the backup planned" : "not a primary with a backup");
    } else {
      adopted.push_back(it->shard);
    }
  }
  if (mismatch.empty() && adopted.size() == total) {
    adopted_shards_ = static_cast<int64_t>(adopted.size());
    return adopted;
  }
  if (mismatch.empty()) {
    mismatch = absl::StrCat(total - adopted.size(),
                            " more than planned; a run's variables are adopted only when "
                            "created in one call, CreateVariables or CreateModelVariables");
  }
  Log().warn(
      "the lost coordinator's {} shard(s) are not this run's layout ({}): dropping them "
      "to create the shards afresh",
      total, mismatch);
  std::vector<std::pair<int32_t, std::string>> to_drop;
  for (const auto& [task, held] : claimed) {
    for (const HeldShard& shard : held) to_drop.emplace_back(task, shard.name);
  }
  DropShards(to_drop);
  return std::nullopt;
}

absl::Status ParameterServerStrategy::AdoptShardsOn(
    int32_t task, const std::map<std::string, shard_actor>& held) {
  std::vector<std::string> missing;
  for (const PlacedShard& placed : shards_) {
    const std::string name =
        ShardName(placed.spec.variable, placed.spec.shard_index, placed.spec.num_shards);
    if (placed.task == task && held.count(name) == 0) missing.push_back(name);
  }
  if (!missing.empty()) {
    return absl::NotFoundError(
        absl::StrCat("ps ", task, " no longer holds ", absl::StrJoin(missing, ", ")));
  }
  for (const PlacedShard& placed : shards_) {
    if (placed.task != task) continue;
    Repoint(placed, held.at(placed.name()), task);
  }
  return absl::OkStatus();
}

std::vector<VariableHandle> ParameterServerStrategy::Handles() const {
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

}  // namespace tessera
