// The public MirroredStrategy (tessera/mirrored.h): replicas spawned in an in-process cluster's
// actor system, one per worker slot, and the ReplicaGroup that drives them.
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/mirrored/mirrored_replica_actor.h"
#include "cluster/base/cluster.h"
#include "coordinator/mirrored/replica_group.h"
#include "core/mirrored/collective.h"
#include "core/model/model.h"
#include "tessera/mirrored.h"
#include "tessera/status.h"

namespace tessera {

MirroredStrategy::MirroredStrategy(std::unique_ptr<ReplicaGroup> group,
                                   std::shared_ptr<const Model> model, int64_t test_examples)
    : group_(std::move(group)), model_(std::move(model)), test_examples_(test_examples) {}

MirroredStrategy::~MirroredStrategy() = default;

absl::StatusOr<std::unique_ptr<MirroredStrategy>> MirroredStrategy::Create(
    Cluster& cluster, MirroredOptions options) {
  if (cluster.networked()) {
    return absl::FailedPreconditionError(
        "a MirroredStrategy on a networked cluster: its workers serve replicas when a "
        "TrainingJob runs with --strategy=mirrored --mode=net");
  }
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a replica's batch must hold >= 1 example, not ", options.batch_size));
  }
  TESSERA_ASSIGN_OR_RETURN(Model model, Model::Create(options.model));
  caf::actor_system& system = cluster.actors().system();
  std::vector<ReplicaHandle> replicas;
  for (int32_t rank = 0; rank < cluster.num_workers(); ++rank) {
    MirroredReplicaOptions replica;
    replica.model = options.model;
    replica.optimizer = options.optimizer;
    replica.train = options.train;
    replica.test = options.test;
    replica.seed = options.seed;
    replica.functions = options.functions;
    replica.cpu = InProcessReplicaCpu(rank);  // Note [Replicas on cores of their own]
    absl::StatusOr<mirrored_replica_actor> actor = SpawnMirroredReplica(system, std::move(replica));
    if (!actor.ok()) {
      for (const ReplicaHandle& spawned : replicas)
        caf::anon_send_exit(spawned.actor, caf::exit_reason::user_shutdown);
      return actor.status();
    }
    replicas.push_back({*std::move(actor), ""});
  }
  // The group stops the replicas it was given, whether it forms or not.
  TESSERA_ASSIGN_OR_RETURN(
      std::unique_ptr<ReplicaGroup> group,
      ReplicaGroup::Create(system, std::move(replicas), options.batch_size, JobDescription{}));
  const int64_t test_examples = options.test.size();
  return std::unique_ptr<MirroredStrategy>(new MirroredStrategy(
      std::move(group), std::make_shared<const Model>(std::move(model)), test_examples));
}

int32_t MirroredStrategy::num_replicas_in_sync() const { return group_->num_replicas_in_sync(); }
int64_t MirroredStrategy::global_batch_size() const { return group_->global_batch_size(); }

absl::Status MirroredStrategy::CreateVariable(const MirroredVariableSpec& spec) {
  return group_->CreateVariable(spec);
}
absl::StatusOr<Tensor> MirroredStrategy::Read(const std::string& name) {
  return group_->Read(name);
}
absl::StatusOr<PerReplica<Tensor>> MirroredStrategy::ReadPerReplica(const std::string& name) {
  return group_->ReadPerReplica(name);
}
absl::Status MirroredStrategy::Assign(const std::string& name, const Tensor& value) {
  return group_->Assign(name, value);
}

absl::StatusOr<PerReplica<ClosureValues>> MirroredStrategy::Run(const std::string& function,
                                                                const ClosureValues& args) {
  return group_->Run(function, args);
}
absl::StatusOr<Tensor> MirroredStrategy::Reduce(ReduceOp op, const PerReplica<Tensor>& value) {
  return ReducePerReplica(op, value.values);
}
absl::StatusOr<Tensor> MirroredStrategy::Gather(const PerReplica<Tensor>& value) {
  return GatherPerReplica(value.values);
}

absl::StatusOr<MirroredStrategy::StepResult> MirroredStrategy::TrainStep(int64_t step) {
  return group_->TrainStep(step);
}
absl::StatusOr<EvalResult> MirroredStrategy::Evaluate() {
  return group_->Evaluate(*model_, test_examples_);
}

}  // namespace tessera
