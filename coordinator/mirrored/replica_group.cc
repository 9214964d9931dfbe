#include "coordinator/mirrored/replica_group.h"

#include <caf/event_based_actor.hpp>
#include <caf/scoped_actor.hpp>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "coordinator/ps/internal/await.h"
#include "core/variables/aggregation.h"
#include "tessera/model.h"
#include "tessera/status.h"

namespace tessera {
namespace {

bool IsAbort(const absl::Status& status) { return absl::IsAborted(status); }

}  // namespace

ReplicaGroup::ReplicaGroup(caf::actor_system& system, std::vector<ReplicaHandle> replicas,
                           int64_t batch_size, JobDescription job)
    : system_(system),
      replicas_(std::move(replicas)),
      batch_size_(batch_size),
      job_(std::move(job)) {}

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Create(
    caf::actor_system& system, std::vector<ReplicaHandle> replicas, int64_t batch_size,
    JobDescription job) {
  if (replicas.empty()) return absl::InvalidArgumentError("a mirrored strategy needs a replica");
  if (batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a replica's batch must hold >= 1 example, not ", batch_size));
  }
  std::unique_ptr<ReplicaGroup> group(
      new ReplicaGroup(system, std::move(replicas), batch_size, std::move(job)));
  TESSERA_RETURN_IF_ERROR(group->Link());
  return group;
}

ReplicaGroup::~ReplicaGroup() {
  for (const ReplicaHandle& replica : replicas_) {
    if (replica.address.empty())
      caf::anon_send_exit(replica.actor, caf::exit_reason::user_shutdown);
  }
}

void ReplicaGroup::EndRun() {
  for (const ReplicaHandle& replica : replicas_) {
    caf::anon_send_exit(replica.actor, caf::exit_reason::user_shutdown);
  }
}

template <class Reply, class Request>
absl::StatusOr<std::vector<Reply>> ReplicaGroup::AskAll(int64_t collective, Request request,
                                                        std::function<void()> on_sent) {
  std::vector<mirrored_replica_actor> actors;
  for (const ReplicaHandle& replica : replicas_) actors.push_back(replica.actor);
  using Done = std::function<void(absl::StatusOr<std::vector<Reply>>)>;
  return internal::Await<std::vector<Reply>>(system_, [actors, collective, request, on_sent](
                                                          caf::event_based_actor* self, Done done) {
    struct Gathered {
      std::vector<std::optional<Reply>> replies;
      std::vector<bool> answered;
      size_t pending = 0;
      std::optional<absl::Status> cause;    // the first error that is not an abort
      std::optional<absl::Status> aborted;  // the first abort
      bool abort_sent = false;
    };
    auto g = std::make_shared<Gathered>();
    g->replies.resize(actors.size());
    g->answered.assign(actors.size(), false);
    g->pending = actors.size();
    auto finish = [self, g, done]() {
      if (g->pending > 0) return;
      if (g->cause.has_value() || g->aborted.has_value()) {
        done(g->cause.has_value() ? *g->cause : *g->aborted);
      } else {
        std::vector<Reply> replies;
        for (std::optional<Reply>& reply : g->replies) replies.push_back(std::move(*reply));
        done(std::move(replies));
      }
      self->quit();
    };
    auto fail = [self, g, actors, collective, finish](size_t r, absl::Status status) {
      if (g->answered[r]) return;
      g->answered[r] = true;
      --g->pending;
      status = Annotate(status, absl::StrCat("replica ", r));
      if (IsAbort(status)) {
        if (!g->aborted.has_value()) g->aborted = status;
      } else if (!g->cause.has_value()) {
        g->cause = status;
      }
      if (!g->abort_sent && collective >= 0) {
        g->abort_sent = true;
        for (const auto& actor : actors) self->send(actor, mirror_abort_atom::value, collective);
      }
      finish();
    };
    // A replica that dies with the request in hand never answers it: its down message does.
    self->set_down_handler([actors, fail](caf::down_msg& down) {
      for (size_t r = 0; r < actors.size(); ++r) {
        if (down.source == actors[r].address()) {
          fail(r, absl::UnavailableError(absl::StrCat("lost (", caf::to_string(down.reason), ")")));
        }
      }
    });
    for (size_t r = 0; r < actors.size(); ++r) {
      self->monitor(actors[r]);
      request(self, actors[r], r)
          .then(
              [g, r, finish](Reply& reply) {
                if (g->answered[r]) return;
                g->answered[r] = true;
                --g->pending;
                g->replies[r] = std::move(reply);
                finish();
              },
              [r, fail](caf::error& error) {
                absl::Status status = ErrorToStatus(error);
                if (error.category() != kErrorCategory) {
                  status =
                      absl::UnavailableError(absl::StrCat("lost (", caf::to_string(error), ")"));
                }
                fail(r, status);
              });
    }
    if (on_sent) on_sent();
  });
}

absl::Status ReplicaGroup::Link() {
  const int32_t members = num_replicas_in_sync();
  std::vector<MirrorRing> rings(members);
  for (int32_t r = 0; r < members; ++r) {
    const ReplicaHandle& next = replicas_[(r + 1) % members];
    const mirrored_replica_actor& previous = replicas_[(r + members - 1) % members].actor;
    rings[r].previous_id = previous.id();
    rings[r].previous_node = previous.node();
    rings[r].rank = r;
    rings[r].members = members;
    rings[r].batch_size = batch_size_;
    rings[r].job = job_;
    rings[r].next_collective = next_collective_;
    if (next.address.empty()) {
      rings[r].next = caf::actor_cast<caf::actor>(next.actor);
    } else {
      rings[r].next_address = next.address;
    }
  }
  return AskAll<bool>(
             -1,
             [rings](caf::event_based_actor* self, const mirrored_replica_actor& a, size_t r) {
               return self->request(a, caf::infinite, mirror_link_atom::value, rings[r]);
             })
      .status();
}

absl::Status ReplicaGroup::CreateVariable(const MirroredVariableSpec& spec) {
  // What the replicas would refuse alike is refused here first, before any replica has it.
  if (spec.name.empty()) return absl::InvalidArgumentError("a variable needs a name");
  for (const MirroredVariableSpec& existing : variables_) {
    if (existing.name == spec.name) {
      return absl::AlreadyExistsError(absl::StrCat("a variable named '", spec.name, "' exists"));
    }
  }
  TESSERA_RETURN_IF_ERROR(ValidateAggregation(spec.synchronization, spec.aggregation, spec.dtype));
  TESSERA_RETURN_IF_ERROR(Shape::Make(spec.shape.dims()).status());
  TESSERA_RETURN_IF_ERROR(ValidateInitializer(spec.initializer));
  // A replica refuses now only a name a model parameter holds (each alike) or by being lost.
  TESSERA_RETURN_IF_ERROR(AskAll<bool>(-1, [spec](caf::event_based_actor* self,
                                                  const mirrored_replica_actor& a, size_t) {
                            return self->request(a, caf::infinite, mirror_create_atom::value, spec);
                          }).status());
  variables_.push_back(spec);
  return absl::OkStatus();
}

absl::StatusOr<TensorSlice> ReplicaGroup::ReadSlice(size_t rank, const std::string& name) {
  const mirrored_replica_actor replica = replicas_[rank].actor;
  return internal::Await<TensorSlice>(
      system_, [replica, name](caf::event_based_actor* self, auto done) {
        self->request(replica, caf::infinite, mirror_read_atom::value, name)
            .then([done](TensorSlice& slice) { done(std::move(slice)); },
                  [done](caf::error& error) { done(ErrorToStatus(error)); });
      });
}

const MirroredVariableSpec* ReplicaGroup::OnRead(const std::string& name) const {
  for (const MirroredVariableSpec& spec : variables_) {
    if (spec.name == name && spec.synchronization == VariableSynchronization::kOnRead) return &spec;
  }
  return nullptr;
}

Tensor ReplicaGroup::Share(const std::string& name, Tensor value) const {
  const MirroredVariableSpec* spec = OnRead(name);
  if (spec == nullptr) return value;
  return ReplicaShare(spec->aggregation, std::move(value), num_replicas_in_sync());
}

absl::StatusOr<std::vector<TensorSlice>> ReplicaGroup::ReadAll(const std::string& name) {
  return AskAll<TensorSlice>(
      -1, [name](caf::event_based_actor* self, const mirrored_replica_actor& a, size_t) {
        return self->request(a, caf::infinite, mirror_read_atom::value, name);
      });
}

absl::Status ReplicaGroup::LoadAll(const TensorSlice& slice) {
  return AskAll<bool>(
             -1,
             [&slice](caf::event_based_actor* self, const mirrored_replica_actor& a, size_t) {
               return self->request(a, caf::infinite, mirror_load_atom::value, slice);
             })
      .status();
}

absl::StatusOr<PerReplica<Tensor>> ReplicaGroup::ReadPerReplica(const std::string& name) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<TensorSlice> slices, ReadAll(name));
  PerReplica<Tensor> out;
  for (TensorSlice& slice : slices) out.values.push_back(std::move(slice.value));
  return out;
}

absl::StatusOr<Tensor> ReplicaGroup::Read(const std::string& name) {
  if (const MirroredVariableSpec* spec = OnRead(name); spec != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(PerReplica<Tensor> copies, ReadPerReplica(name));
    return AggregateReplicaValues(spec->aggregation, copies.values);
  }
  TESSERA_ASSIGN_OR_RETURN(TensorSlice slice, ReadSlice(0, name));
  return std::move(slice.value);
}

absl::Status ReplicaGroup::Assign(const std::string& name, const Tensor& value) {
  TensorSlice slice;
  slice.variable = name;
  slice.full_shape = value.shape();
  slice.value = Share(name, Tensor::Copy(value.view()));
  return LoadAll(slice);
}

absl::StatusOr<PerReplica<ClosureValues>> ReplicaGroup::Run(const std::string& function,
                                                            const ClosureValues& args) {
  const int64_t collective = next_collective_++;
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<ClosureValues> results,
      AskAll<ClosureValues>(collective, [collective, function, args](
                                            caf::event_based_actor* self,
                                            const mirrored_replica_actor& a, size_t) {
        return self->request(a, caf::infinite, mirror_run_atom::value, collective, function, args);
      }));
  return PerReplica<ClosureValues>{std::move(results)};
}

absl::StatusOr<std::vector<ReplicaGroup::StepResult>> ReplicaGroup::TrainSteps(
    int64_t first, int64_t count, std::function<void()> on_sent) {
  if (count < 1 || count > kMaxStepsPerRequest) {
    return absl::InvalidArgumentError(
        absl::StrCat("a request for ", count, " steps (1 to ", kMaxStepsPerRequest, ")"));
  }
  const int64_t collective = next_collective_;
  next_collective_ += count;
  // An abort of the request's last collective ends the one in progress too (Fail ends every
  // collective up to the one it names).
  const int64_t last = collective + count - 1;
  TESSERA_ASSIGN_OR_RETURN(std::vector<MirrorStepResult> shares,
                           AskAll<MirrorStepResult>(
                               last,
                               [collective, first, count](caf::event_based_actor* self,
                                                          const mirrored_replica_actor& a, size_t) {
                                 return self->request(a, caf::infinite, mirror_step_atom::value,
                                                      collective, first, count);
                               },
                               on_sent));
  std::vector<StepResult> results(count);
  for (int64_t k = 0; k < count; ++k) {
    double loss_sum = 0;
    for (const MirrorStepResult& share : shares) {
      if (share.loss_sums.size() != static_cast<size_t>(count) ||
          share.examples.size() != static_cast<size_t>(count)) {
        return absl::DataLossError("a replica answered with another number of steps");
      }
      loss_sum += share.loss_sums[k];
      results[k].examples += share.examples[k];
    }
    if (results[k].examples > 0)
      results[k].loss = loss_sum / static_cast<double>(results[k].examples);
  }
  return results;
}

absl::StatusOr<double> ReplicaGroup::ProbeRing(int64_t elements, int64_t rounds) {
  if (rounds < 1 || rounds > kMaxStepsPerRequest) {
    return absl::InvalidArgumentError(absl::StrCat("a ring probe of ", rounds, " rounds"));
  }
  const int64_t collective = next_collective_;
  next_collective_ += rounds;
  TESSERA_ASSIGN_OR_RETURN(
      std::vector<double> seconds,
      AskAll<double>(collective + rounds - 1,
                     [collective, elements, rounds](caf::event_based_actor* self,
                                                    const mirrored_replica_actor& a, size_t) {
                       return self->request(a, caf::infinite, mirror_probe_atom::value, collective,
                                            elements, rounds);
                     }));
  return *std::max_element(seconds.begin(), seconds.end());
}

absl::StatusOr<ReplicaGroup::StepResult> ReplicaGroup::TrainStep(int64_t step) {
  TESSERA_ASSIGN_OR_RETURN(std::vector<StepResult> results, TrainSteps(step, 1));
  return results[0];
}

absl::StatusOr<PerReplica<int64_t>> ReplicaGroup::AppliedSteps(const ModelSpec& model) {
  const ParamSpec* first = nullptr;
  for (const ParamSpec& param : model.params) {
    if (param.trainable) {
      first = &param;
      break;
    }
  }
  if (first == nullptr) return absl::FailedPreconditionError("the model has nothing to train");
  TESSERA_ASSIGN_OR_RETURN(std::vector<TensorSlice> slices, ReadAll(first->name));
  PerReplica<int64_t> steps;
  for (const TensorSlice& slice : slices) steps.values.push_back(slice.step);
  return steps;
}

absl::StatusOr<int64_t> ReplicaGroup::Resync(const ModelSpec& model) {
  TESSERA_ASSIGN_OR_RETURN(const PerReplica<int64_t> applied, AppliedSteps(model));
  const auto most = std::max_element(applied.values.begin(), applied.values.end());
  const size_t truth = static_cast<size_t>(most - applied.values.begin());
  if (std::all_of(applied.values.begin(), applied.values.end(),
                  [&](int64_t steps) { return steps == *most; })) {
    return *most;
  }
  for (const std::string& name : Names(model)) {
    // An ON_READ variable's copies are each replica's own (a step never writes them): copying
    // one onto all would change what the variable reads.
    if (OnRead(name) != nullptr) continue;
    TESSERA_ASSIGN_OR_RETURN(TensorSlice slice, ReadSlice(truth, name));
    TESSERA_RETURN_IF_ERROR(LoadAll(slice));
  }
  return *most;
}

absl::StatusOr<EvalResult> ReplicaGroup::Evaluate(const Model& model, int64_t test_examples) {
  EvalAccumulator eval(model);
  const int64_t batches = (test_examples + kEvalBatchSize - 1) / kEvalBatchSize;
  const int64_t n = num_replicas_in_sync();
  // A round evaluates batches first .. first + n - 1, one per replica (each on its own copy: the
  // same values), merged in batch order; a replica past the last batch answers with nothing.
  for (int64_t first = 0; first < batches; first += n) {
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<ClosureValues> outs,
        AskAll<ClosureValues>(
            -1, [first](caf::event_based_actor* self, const mirrored_replica_actor& a, size_t r) {
              return self->request(a, caf::infinite, mirror_eval_atom::value,
                                   first + static_cast<int64_t>(r));
            }));
    for (const ClosureValues& out : outs) {
      TESSERA_ASSIGN_OR_RETURN(const int64_t examples, out.Get<int64_t>("examples"));
      if (examples == 0) continue;
      TESSERA_ASSIGN_OR_RETURN(const double loss, out.Get<double>("loss"));
      TESSERA_ASSIGN_OR_RETURN(const Tensor labels, out.Get<Tensor>("labels"));
      std::optional<Tensor> logits;
      if (out.Has("logits")) {
        TESSERA_ASSIGN_OR_RETURN(logits, out.Get<Tensor>("logits"));
      }
      TESSERA_RETURN_IF_ERROR(eval.Add(static_cast<float>(loss), examples,
                                       logits.has_value() ? &*logits : nullptr, labels));
    }
  }
  return eval.Result();
}

std::vector<int32_t> ReplicaGroup::LostReplicas(absl::Duration timeout) {
  std::vector<int32_t> lost;
  caf::scoped_actor self{system_};
  for (size_t r = 0; r < replicas_.size(); ++r) {
    bool alive = false;
    self->request(replicas_[r].actor, absl::ToChronoMilliseconds(timeout), mirror_read_atom::value,
                  std::string())
        .receive([&](TensorSlice&) { alive = true; },
                 [&](caf::error& error) { alive = error.category() == kErrorCategory; });
    if (!alive) lost.push_back(static_cast<int32_t>(r));
  }
  return lost;
}

absl::Status ReplicaGroup::Replace(int32_t rank, ReplicaHandle replacement) {
  if (rank < 0 || rank >= num_replicas_in_sync()) {
    return absl::InvalidArgumentError(absl::StrCat("no replica ", rank));
  }
  replicas_[rank] = std::move(replacement);
  const mirrored_replica_actor actor = replicas_[rank].actor;
  for (const MirroredVariableSpec& spec : variables_) {
    TESSERA_RETURN_IF_ERROR(
        internal::AwaitStatus(system_, [actor, spec](caf::event_based_actor* self, auto done) {
          self->request(actor, caf::infinite, mirror_create_atom::value, spec)
              .then([done](bool) { done(absl::OkStatus()); },
                    [done](caf::error& e) { done(ErrorToStatus(e)); });
        }));
  }
  return Link();
}

absl::Status ReplicaGroup::Drop(const std::vector<int32_t>& ranks) {
  std::vector<ReplicaHandle> kept;
  for (int32_t r = 0; r < num_replicas_in_sync(); ++r) {
    if (std::find(ranks.begin(), ranks.end(), r) == ranks.end()) kept.push_back(replicas_[r]);
  }
  if (kept.empty()) {
    return absl::FailedPreconditionError("no replica would be left to train on");
  }
  replicas_ = std::move(kept);
  return Link();
}

}  // namespace tessera
