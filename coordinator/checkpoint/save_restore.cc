#include "coordinator/checkpoint/save_restore.h"

#include <algorithm>
#include <caf/system_messages.hpp>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "actors/base/error.h"
#include "actors/ps/shard_client.h"
#include "coordinator/ps/internal/await.h"
#include "core/base/fan_in.h"
#include "core/base/logging.h"
#include "core/checkpoint/save.h"
#include "core/serving/exported_model.h"
#include "core/variables/aggregation.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tessera/status.h"
#include "tessera/version.h"

namespace tessera {

std::string CheckpointSliceFileName(size_t variable_index, const std::string& name, int64_t shard,
                                    int64_t num_shards) {
  std::string safe = name;
  for (char& c : safe) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) c = '_';
  }
  return absl::StrCat("v", variable_index, ".", safe, ".part-", shard, "-of-", num_shards,
                      ".slice");
}

absl::Status SaveReducedValues(const std::vector<ReducedValue>& values, const std::string& dir,
                               const CheckpointId& checkpoint, size_t first_index,
                               CheckpointManifest& manifest, Env* env) {
  const FileSliceStore store(env);
  for (size_t i = 0; i < values.size(); ++i) {
    const ReducedValue& v = values[i];
    TensorSliceView slice;
    slice.variable = v.name;
    slice.full_shape = v.value.shape();
    slice.dtype = v.dtype;
    slice.value = v.value.view();
    const SaveOp op{dir, CheckpointSliceFileName(first_index + i, v.name, 0, 1), checkpoint};
    TESSERA_ASSIGN_OR_RETURN(
        SavedSlice saved,
        WriteSlice(slice, std::nullopt, op, store, absl::StrCat("ON_READ variable ", v.name)));
    manifest.variables.push_back(ManifestEntry(v.name, slice.full_shape, v.dtype, {saved}));
  }
  return absl::OkStatus();
}

namespace {

// The ON_WRITE variables (or, `on_read`, the ON_READ ones), in name order.
std::vector<const ShardedVariable*> VariablesOf(const ParameterServerStrategy& s,
                                                bool on_read = false) {
  std::vector<const ShardedVariable*> out;
  for (const auto& [name, variable] : s.variables()) {
    if (variable.is_on_read() == on_read) out.push_back(&variable);
  }
  return out;
}

// Note [ON_READ variables in checkpoints]
// TF saves a sync-on-read variable as its reduced value (the SUM, the MEAN or the first
// replica's copy) under the variable's name, and a restore gives each replica its share: the
// value divided by the number of replicas for SUM (so the sum reads back unchanged), the value
// itself otherwise. Tessera does the same, whatever the number of workers on either side: the
// coordinator reads the reduced value (ON_READ variables are per-worker metrics and counters,
// small, and read whole by every Read anyway), writes it as the variable's one slice file
// (no slots, step 0), and on restore assigns every worker's copy its share. Being an ordinary
// manifest entry, the value also restores into an ON_WRITE variable of the same name and shape,
// and an ON_WRITE variable's entry into an ON_READ one (its slots are ignored). A checkpoint
// written before ON_READ variables were saved lacks them: the copies keep their values, with a
// warning. A PS node recovered from a checkpoint (RestoreShardsOf) brings back its ON_WRITE
// shards only: a lost node's ON_READ copies start again from their initial value.

// The reduced values of the ON_READ `variables`, read now (at the checkpoint's cut).
absl::StatusOr<std::vector<ReducedValue>> ReadOnRead(
    const std::vector<const ShardedVariable*>& variables) {
  std::vector<ReducedValue> values;
  for (const ShardedVariable* v : variables) {
    TESSERA_ASSIGN_OR_RETURN(Tensor value, v->Read());
    values.push_back({v->name(), v->dtype(), std::move(value)});
  }
  return values;
}

// Sends `make_op(i, handle, s)` (an Op) to every shard s of every variable i (with `only`: to
// each shard it accepts) from one actor and joins the results; a shard not asked leaves its
// result default-constructed. With `on_cut`, each op is followed by an InfoOp to its shard, and
// `on_cut` runs once every shard has answered its InfoOp (or failed to): by then each shard has
// taken up its op (one sender, one mailbox: in order), though its result may come later.
using ShardFilter = std::function<bool(const VariableHandle&, size_t shard)>;
template <class Op, class MakeOp>
absl::StatusOr<std::vector<std::vector<typename Op::Result>>> AskEveryShard(
    caf::actor_system& system, const std::vector<const ShardedVariable*>& variables, MakeOp make_op,
    ShardFilter only = nullptr, std::function<void()> on_cut = nullptr) {
  using Result = typename Op::Result;
  struct Asked {
    size_t variable;
    size_t shard;
  };
  std::vector<Asked> asked;
  for (size_t i = 0; i < variables.size(); ++i) {
    for (size_t s = 0; s < variables[i]->handle().shards.size(); ++s) {
      if (!only || only(variables[i]->handle(), s)) asked.push_back({i, s});
    }
  }
  using Results = std::vector<std::vector<Result>>;
  return internal::Await<Results>(system, [&variables, &asked, make_op, on_cut](
                                              caf::event_based_actor* self, auto done) {
    auto join = FanIn<Result>::Start(
        asked.size(), [self, done, asked, &variables](absl::StatusOr<std::vector<Result>> all) {
          self->quit();
          if (!all.ok()) return done(all.status());
          Results by_variable;
          for (const ShardedVariable* v : variables) {
            by_variable.emplace_back(v->handle().shards.size());
          }
          for (size_t k = 0; k < asked.size(); ++k) {
            by_variable[asked[k].variable][asked[k].shard] = std::move((*all)[k]);
          }
          done(std::move(by_variable));
        });
    if (join->finished()) return;
    // A shard on a PS process that dies never answers (a request already on the wire is not
    // bounced), so every shard asked is watched: its death fails the whole operation at once.
    self->set_down_handler([join](caf::down_msg& down) {
      join->Arrive(0, absl::UnavailableError(
                          absl::StrCat("a shard became unavailable (", to_string(down.reason), ")")));
    });
    std::shared_ptr<FanIn<ShardInfo>> cut;
    if (on_cut) {
      cut = FanIn<ShardInfo>::Start(asked.size(),
                                    [on_cut](absl::StatusOr<std::vector<ShardInfo>>) { on_cut(); });
    }
    ShardClient client(self);
    for (size_t k = 0; k < asked.size(); ++k) {
      const VariableHandle& h = variables[asked[k].variable]->handle();
      self->monitor(h.shards[asked[k].shard]);
      client.Call<Op>(h, static_cast<int64_t>(asked[k].shard),
                      make_op(asked[k].variable, h, asked[k].shard), join->Slot(k));
      if (cut) client.Call<InfoOp>(h, static_cast<int64_t>(asked[k].shard), InfoOp{}, cut->Slot(k));
    }
  });
}

// Restores every variable from an exported model's unsharded values: each shard gets its row
// block, values only (an export has no slots, so the optimizer starts fresh).
absl::StatusOr<int64_t> RestoreFromExport(const std::vector<const ShardedVariable*>& variables,
                                          caf::actor_system& system, const ExportedModel& model,
                                          const std::string& dir) {
  std::vector<std::vector<TensorSlice>> blocks;
  for (const ShardedVariable* v : variables) {
    auto it = model.variables.find(v->name());
    if (it == model.variables.end()) {
      return absl::NotFoundError(absl::StrCat("the model exported in ", dir,
                                              " has no variable ", v->name()));
    }
    TESSERA_RETURN_IF_ERROR(CheckSameShape(it->second.shape(), v->shape(),
                                           absl::StrCat("variable ", v->name(), " in ", dir)));
    std::vector<TensorSlice> per_shard;
    for (int64_t s = 0; s < v->num_shards(); ++s) {
      TensorSlice slice;  // the shard's rows, values only
      slice.variable = v->name();
      slice.full_shape = v->shape();
      slice.dtype = v->dtype();
      if (v->shape().rank() == 0) {
        slice.value = it->second;
      } else {
        const ShardExtent e = v->handle().layout.Extent(s);
        slice.row_offset = e.offset;
        slice.value = Tensor::Copy(it->second.RowBlock(e.offset, e.rows));
      }
      per_shard.push_back(std::move(slice));
    }
    blocks.push_back(std::move(per_shard));
  }
  TESSERA_RETURN_IF_ERROR(
      AskEveryShard<RestoreOp>(system, variables,
                               [&blocks](size_t i, const VariableHandle&, size_t s) {
                                 return RestoreOp{std::move(blocks[i][s])};
                               })
          .status());
  return model.step;
}

}  // namespace

// Note [Checkpoints without pausing]
// A checkpoint is a cut: the state after exactly the closures before its step. The driver joins
// the coordinator (the closures in flight finish; workers go idle only for that tail), and then,
// instead of keeping dispatch stopped while every shard writes its file (seconds for gigabytes),
// it waits only for the cut: each shard gets a SaveOp::in_background, marks its block, slots and
// step in its mailbox (a copy-on-write snapshot: Note [Copy-on-write snapshots],
// core/ps/cow_snapshot.h) and hands it to a writer thread of its own, which answers the SaveOp once
// the file is written; an InfoOp sent right behind it from the same actor is answered once the
// mark is made (one sender, one mailbox: in order, across processes too), so when every InfoOp
// is answered no later update can reach what the writers read and training resumes (`on_cut`).
// ON_READ values are read before that. The manifest is written once every file is, while
// training runs; a save that fails leaves no manifest (an incomplete checkpoint, removed by the
// next save). The price is memory: a shard holds a copy of each page it updates before its
// writer has written it.
absl::Status SaveCheckpoint(const ParameterServerStrategy& strategy, const std::string& dir,
                            int64_t global_step, const RunId& run, std::function<void()> on_cut,
                            Env* env) {
  // Whatever happens, a caller waiting for the cut is released, once.
  auto once = std::make_shared<std::once_flag>();
  const std::function<void()> release = [on_cut, once] {
    if (on_cut) std::call_once(*once, on_cut);
  };
  struct Release {
    std::function<void()> run;
    ~Release() { run(); }
  } release_on_exit{release};
  TESSERA_RETURN_IF_ERROR(Annotate(env->CreateDirectories(dir), absl::StrCat("creating ", dir)));
  if (env->FileExists(absl::StrCat(dir, "/", kManifestFile))) {
    return absl::FailedPreconditionError(absl::StrCat(
        dir, " already holds a checkpoint: a complete checkpoint is never overwritten in place"));
  }
  const CheckpointId checkpoint{run, global_step};
  const std::vector<const ShardedVariable*> variables = VariablesOf(strategy);
  const std::vector<const ShardedVariable*> on_read = VariablesOf(strategy, /*on_read=*/true);
  TESSERA_ASSIGN_OR_RETURN(std::vector<ReducedValue> on_read_values, ReadOnRead(on_read));
  const bool in_background = static_cast<bool>(on_cut);
  TESSERA_ASSIGN_OR_RETURN(
      auto saved,
      AskEveryShard<SaveOp>(
          strategy.placement().system(), variables,
          [dir, checkpoint, in_background](size_t i, const VariableHandle& h, size_t s) {
            return SaveOp{dir, CheckpointSliceFileName(i, h.name, s, h.num_shards()), checkpoint,
                          in_background};
          },
          nullptr, on_cut ? release : nullptr));
  CheckpointManifest manifest;
  manifest.global_step = global_step;
  manifest.run_id = run;
  for (size_t i = 0; i < variables.size(); ++i) {
    const ShardedVariable& v = *variables[i];
    manifest.variables.push_back(ManifestEntry(v.name(), v.shape(), v.dtype(), saved[i]));
  }
  TESSERA_RETURN_IF_ERROR(
      SaveReducedValues(on_read_values, dir, checkpoint, variables.size(), manifest, env));
  return WriteManifest(dir, manifest, env);
}

absl::Status SaveCheckpoint(const ParameterServerStrategy& strategy, const std::string& dir,
                            int64_t global_step) {
  return SaveCheckpoint(strategy, dir, global_step, RunId::Random());
}

namespace {

// Note [Resuming an optimizer]
// A checkpoint's slots mean something only to the rule that wrote them: Adagrad's accumulator is
// no Adam moment. So when both the checkpoint and the variable have an optimizer, the rule's name
// must be the same — and with it the slot names, which ValidateManifest ties to the rule — or the
// restore fails naming both. Hyperparameters may differ: a learning rate lowered on resume is a
// deliberate choice, so the run keeps its own values and a warning names each difference (once
// per restore, not per variable). A checkpoint saved without an optimizer restores the values
// and gives fresh slots; a variable without one takes the values only.

// The rule's full hyperparameters (defaults filled in); `spec` itself when it builds no rule.
OptimizerSpec Resolved(const OptimizerSpec& spec) {
  absl::StatusOr<std::unique_ptr<Optimizer>> rule = MakeOptimizer(spec);
  return rule.ok() ? (*rule)->spec() : spec;
}

// Note [Resuming an optimizer]: InvalidArgument for another rule; adds each changed
// hyperparameter to `changed` ("adagrad learning_rate: 0.1 in the checkpoint, 0.05 now").
absl::Status CheckOptimizer(const CheckpointVariable& entry,
                            const std::optional<OptimizerSpec>& own, const std::string& dir,
                            std::set<std::string>& changed) {
  if (!entry.optimizer.has_value() || !own.has_value()) return absl::OkStatus();
  if (entry.optimizer->name != own->name) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variable ", entry.name, ": the checkpoint in ", dir, " was trained with optimizer '",
        entry.optimizer->name, "' (slots [", absl::StrJoin(entry.slot_names, ", "),
        "]), but this run's optimizer is '", own->name,
        "': its slots cannot carry over; train with '", entry.optimizer->name,
        "' or start a fresh run"));
  }
  const OptimizerSpec saved = Resolved(*entry.optimizer);
  const OptimizerSpec now = Resolved(*own);
  std::set<std::string> names;
  for (const auto& [name, value] : saved.params) names.insert(name);
  for (const auto& [name, value] : now.params) names.insert(name);
  for (const std::string& name : names) {
    auto was = saved.params.find(name);
    auto is = now.params.find(name);
    if (was != saved.params.end() && is != now.params.end() && was->second == is->second) {
      continue;
    }
    changed.insert(absl::StrCat(
        own->name, " ", name, ": ",
        was == saved.params.end() ? "unset" : absl::StrCat(was->second), " in the checkpoint, ",
        is == now.params.end() ? "unset" : absl::StrCat(is->second), " now"));
  }
  return absl::OkStatus();
}

// The manifest entry of every checkpointed variable, checked against the variable.
absl::StatusOr<std::vector<CheckpointVariable>> MatchManifest(
    const ParameterServerStrategy& strategy, const std::vector<const ShardedVariable*>& variables,
    const CheckpointManifest& manifest, const std::string& dir) {
  std::vector<CheckpointVariable> entries;
  std::set<std::string> changed;
  for (const ShardedVariable* v : variables) {
    TESSERA_ASSIGN_OR_RETURN(const CheckpointVariable* entry, FindVariable(manifest, v->name()));
    if (entry->shape != v->shape()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "variable ", v->name(), ": the checkpoint in ", dir, " has shape ",
          entry->shape.ToString(), " but the variable has ", v->shape().ToString()));
    }
    if (entry->dtype != v->dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable ", v->name(), ": the checkpoint has dtype ",
                       DTypeName(entry->dtype), ", the variable ", DTypeName(v->dtype())));
    }
    TESSERA_RETURN_IF_ERROR(CheckOptimizer(*entry, strategy.OptimizerOf(v->name()), dir, changed));
    entries.push_back(*entry);
  }
  for (const std::string& change : changed) {
    Log().warn("restoring {}: optimizer hyperparameter {}; training continues with the new value",
               dir, change);
  }
  return entries;
}

// Every (accepted) shard loads its rows from the checkpoint in `dir`.
absl::Status LoadShards(const ParameterServerStrategy& strategy,
                        const std::vector<const ShardedVariable*>& variables,
                        const CheckpointManifest& manifest, const std::string& dir,
                        ShardFilter only) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<CheckpointVariable> entries,
                           MatchManifest(strategy, variables, manifest, dir));
  if (manifest.run_id.empty()) {
    Log().warn("{} has no run id (written before run ids): its slice files cannot be checked to "
               "belong to it", dir);
  }
  if (manifest.writer_version != Version()) {
    Log().info("{} was written by {}; this is tessera {}", dir,
               manifest.writer_version.empty()
                   ? "an unknown version (before versions were recorded)"
                   : "tessera " + manifest.writer_version,
               Version());
  }
  return AskEveryShard<LoadOp>(
             strategy.placement().system(), variables,
             [dir, &entries](size_t i, const VariableHandle&, size_t) {
               return LoadOp{dir, entries[i]};
             },
             std::move(only))
      .status();
}

// Note [ON_READ variables in checkpoints]: every worker's copy of each variable gets its share
// of the saved value. Every ON_READ value is read and checked before any copy changes.
absl::Status RestoreOnRead(const ParameterServerStrategy& strategy,
                           const CheckpointManifest& manifest, const std::string& dir) {
  std::vector<ShardedVariable> copies;  // one single-shard variable per worker copy
  std::vector<Tensor> shares;           // what each of them gets
  for (const ShardedVariable* v : VariablesOf(strategy, /*on_read=*/true)) {
    const auto entry =
        std::find_if(manifest.variables.begin(), manifest.variables.end(),
                     [v](const CheckpointVariable& e) { return e.name == v->name(); });
    if (entry == manifest.variables.end()) {
      Log().warn(
          "restoring {}: the checkpoint has no ON_READ variable {} (saved before ON_READ "
          "variables were checkpointed?); its copies keep their values",
          dir, v->name());
      continue;
    }
    if (entry->shape != v->shape() || entry->dtype != v->dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("variable ", v->name(), ": the checkpoint in ", dir, " has ",
                       entry->shape.ToString(), " ", DTypeName(entry->dtype),
                       " but the variable is ", v->shape().ToString(), " ", DTypeName(v->dtype())));
    }
    TESSERA_ASSIGN_OR_RETURN(TensorSlice saved, ReadSliceBlock(dir, *entry, 0, v->shape().rows()));
    const int64_t n = static_cast<int64_t>(v->Variables().size());
    const Tensor share = ReplicaShare(v->aggregation(), std::move(saved.value), n);
    for (int32_t k = 0; k < n; ++k) {
      TESSERA_ASSIGN_OR_RETURN(VariableHandle copy, v->ForWorker(k));
      copies.push_back(
          ShardedVariableAccess::Make(&strategy.placement().system(), std::move(copy)));
      shares.push_back(share);
    }
  }
  std::vector<const ShardedVariable*> targets;
  for (const ShardedVariable& c : copies) targets.push_back(&c);
  return AskEveryShard<RestoreOp>(strategy.placement().system(), targets,
                                  [&shares](size_t i, const VariableHandle&, size_t) {
                                    TensorSlice slice;  // no name: the copy's own
                                    slice.value = std::move(shares[i]);
                                    return RestoreOp{std::move(slice)};
                                  })
      .status();
}

}  // namespace

absl::StatusOr<int64_t> RestoreCheckpoint(const ParameterServerStrategy& strategy,
                                          const std::string& dir) {
  const std::vector<const ShardedVariable*> variables = VariablesOf(strategy);
  caf::actor_system& system = strategy.placement().system();
  absl::StatusOr<CheckpointManifest> manifest = ReadManifest(dir);
  if (absl::IsNotFound(manifest.status())) {
    absl::StatusOr<ExportedModel> model = ReadExportedModel(dir);
    if (absl::IsNotFound(model.status())) {
      return absl::NotFoundError(
          absl::StrCat(dir, " holds neither a checkpoint nor an exported model"));
    }
    if (!model.ok()) return model.status();
    return RestoreFromExport(variables, system, *model, dir);
  }
  if (!manifest.ok()) return manifest.status();
  TESSERA_RETURN_IF_ERROR(LoadShards(strategy, variables, *manifest, dir, nullptr));
  TESSERA_RETURN_IF_ERROR(RestoreOnRead(strategy, *manifest, dir));
  return manifest->global_step;
}

absl::StatusOr<int64_t> RestoreShardsOf(const ParameterServerStrategy& strategy,
                                        const std::string& dir, int32_t ps_task,
                                        const RunId& run) {
  const std::vector<const ShardedVariable*> variables = VariablesOf(strategy);
  TESSERA_ASSIGN_OR_RETURN(CheckpointManifest manifest, ReadManifest(dir));
  if (!run.empty() && !manifest.run_id.empty() && manifest.run_id != run) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint in ", dir, " belongs to run ", manifest.run_id.ToString(),
                     ", not to this run (", run.ToString(), ")"));
  }
  TESSERA_RETURN_IF_ERROR(LoadShards(
      strategy, variables, manifest, dir,
      [ps_task](const VariableHandle& h, size_t s) { return h.ps_tasks[s] == ps_task; }));
  return manifest.global_step;
}

}  // namespace tessera
