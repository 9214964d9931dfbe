#include "actors/shard_actor.h"

#include <utility>

#include "actors/error.h"
#include "schema/checkpoint_io.h"

namespace tessera {

shard_actor::behavior_type ShardActor(shard_actor::stateful_pointer<ShardActorState> self,
                                      std::shared_ptr<ShardState> shard,
                                      std::shared_ptr<const SliceStore> store) {
  self->state.shard = std::move(shard);
  self->state.store = store != nullptr ? std::move(store) : std::make_shared<FileSliceStore>();
  // The handlers capture the state by reference: it lives in the actor, which outlives the
  // behaviour.
  ShardActorState& state = self->state;
  return {
      [&state](ShardOp& op) -> caf::result<ShardOpResult> {
        absl::StatusOr<ShardOpResult> result =
            ApplyShardOp(*state.shard, std::move(op), state.store.get());
        if (!result.ok()) return StatusToError(result.status());
        return *std::move(result);
      },
      [&state](std::vector<ShardOp>& ops) -> std::vector<ShardReply> {
        std::vector<ShardReply> replies(ops.size());
        for (size_t k = 0; k < ops.size(); ++k) {
          absl::StatusOr<ShardOpResult> result =
              ApplyShardOp(*state.shard, std::move(ops[k]), state.store.get());
          if (result.ok()) {
            replies[k].result = *std::move(result);
          } else {
            replies[k].error = StatusToError(result.status());
          }
        }
        return replies;
      },
  };
}

shard_actor SpawnShard(caf::actor_system& system, ShardState shard,
                       std::shared_ptr<const SliceStore> store) {
  return system.spawn(ShardActor, std::make_shared<ShardState>(std::move(shard)),
                      std::move(store));
}

}  // namespace tessera
