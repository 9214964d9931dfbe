#include "actors/base/messages.h"

#include <string>
#include <vector>

#include "actors/base/actor_handles.h"
#include "actors/base/error.h"
#include "core/training/job_description.h"

namespace tessera {

void RegisterTesseraTypes(caf::actor_system_config& cfg) {
  cfg.add_message_type<Shape>("tessera::Shape");
  cfg.add_message_type<Tensor>("tessera::Tensor");
  cfg.add_message_type<IndexedSlices>("tessera::IndexedSlices");
  cfg.add_message_type<ScatterOp>("tessera::ScatterOp");
  cfg.add_message_type<AssignKind>("tessera::AssignKind");
  cfg.add_message_type<DType>("tessera::DType");
  cfg.add_message_type<OptimizerSpec>("tessera::OptimizerSpec");
  cfg.add_message_type<InitializerSpec>("tessera::InitializerSpec");
  cfg.add_message_type<ShardSpec>("tessera::ShardSpec");
  cfg.add_message_type<TensorSlice>("tessera::TensorSlice");
  cfg.add_message_type<ShardInfo>("tessera::ShardInfo");
  cfg.add_message_type<ShardValue>("tessera::ShardValue");
  cfg.add_message_type<ShardOp>("tessera::ShardOp");
  cfg.add_message_type<ShardOpResult>("tessera::ShardOpResult");
  cfg.add_message_type<std::vector<ShardOp>>("std::vector<tessera::ShardOp>");
  cfg.add_message_type<ShardReply>("tessera::ShardReply");
  cfg.add_message_type<std::vector<ShardReply>>("std::vector<tessera::ShardReply>");
  cfg.add_message_type<ShardCall>("tessera::ShardCall");
  cfg.add_message_type<std::vector<ShardCall>>("std::vector<tessera::ShardCall>");
  cfg.add_message_type<PsNodeStats>("tessera::PsNodeStats");
  cfg.add_message_type<ClosureValues>("tessera::ClosureValues");
  cfg.add_message_type<Closure>("tessera::Closure");
  cfg.add_message_type<WorkerPoolStatus>("tessera::WorkerPoolStatus");
  cfg.add_message_type<WorkerSlotStatus>("tessera::WorkerSlotStatus");
  cfg.add_message_type<JobDescription>("tessera::JobDescription");
  cfg.add_message_type<SliceFileRef>("tessera::SliceFileRef");
  cfg.add_message_type<SaveOp>("tessera::SaveOp");
  cfg.add_message_type<SavedSlice>("tessera::SavedSlice");
  cfg.add_message_type<CheckpointVariable>("tessera::CheckpointVariable");
  cfg.add_message_type<worker_actor>("tessera::worker_actor");
  cfg.add_message_type<coordinator_actor>("tessera::coordinator_actor");
  cfg.add_message_type<VariableHandle>("tessera::VariableHandle");
  cfg.add_message_type<VariableDirectory>("tessera::VariableDirectory");
  cfg.add_message_type<shard_actor>("tessera::shard_actor");
  cfg.add_message_type<HeldShard>("tessera::HeldShard");
  cfg.add_message_type<std::vector<HeldShard>>("std::vector<tessera::HeldShard>");
  cfg.add_message_type<ps_node_actor>("tessera::ps_node_actor");
  cfg.add_message_type<MirrorRing>("tessera::MirrorRing");
  cfg.add_message_type<MirrorStepResult>("tessera::MirrorStepResult");
  cfg.add_message_type<RingChunk>("tessera::RingChunk");
  cfg.add_message_type<MirroredVariableSpec>("tessera::MirroredVariableSpec");
  cfg.add_message_type<VariableSynchronization>("tessera::VariableSynchronization");
  cfg.add_message_type<VariableAggregation>("tessera::VariableAggregation");
  cfg.add_message_type<mirrored_replica_actor>("tessera::mirrored_replica_actor");
  cfg.add_error_category(kErrorCategory, RenderError);
}

std::string to_string(ScatterOp op) { return std::string(ScatterOpName(op)); }
std::string to_string(AssignKind kind) { return std::string(AssignKindName(kind)); }
std::string to_string(DType dtype) { return std::string(DTypeName(dtype)); }
std::string to_string(VariableSynchronization sync) {
  return std::string(SynchronizationName(sync));
}
std::string to_string(VariableAggregation aggregation) {
  return std::string(AggregationName(aggregation));
}

}  // namespace tessera
