#include "actors/shard_actor.h"

#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "actors/error.h"
#include "schema/checkpoint_io.h"

namespace tessera {
namespace {

using ShardPointer = shard_actor::stateful_pointer<ShardActorState>;

// The handlers, over the state's shard (or its build error).
shard_actor::behavior_type Serve(ShardPointer self, std::shared_ptr<const SliceStore> store) {
  self->state.store = store != nullptr ? std::move(store) : std::make_shared<FileSliceStore>();
  // The handlers capture the state by reference: it lives in the actor, which outlives the
  // behaviour.
  ShardActorState& state = self->state;
  return {
      [&state](ShardOp& op) -> caf::result<ShardOpResult> {
        if (state.shard == nullptr) return StatusToError(state.build_error);
        absl::StatusOr<ShardOpResult> result =
            ApplyShardOp(*state.shard, std::move(op), state.store.get());
        if (!result.ok()) return StatusToError(result.status());
        return *std::move(result);
      },
      [&state](std::vector<ShardOp>& ops) -> std::vector<ShardReply> {
        std::vector<ShardReply> replies(ops.size());
        for (size_t k = 0; k < ops.size(); ++k) {
          if (state.shard == nullptr) {
            replies[k].error = StatusToError(state.build_error);
            continue;
          }
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

// ShardState::Create, with running out of memory as an error rather than an exception that
// would kill the actor without saying why.
absl::StatusOr<ShardState> Build(const ShardSpec& spec) {
  try {
    return ShardState::Create(spec);
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(absl::StrCat(
        ShardName(spec.variable, spec.shard_index, spec.num_shards),
        ": cannot allocate the block of ", ShardBlockShape(spec).ToString(),
        " and its optimizer slots"));
  }
}

}  // namespace

shard_actor::behavior_type ShardActor(ShardPointer self, std::shared_ptr<ShardState> shard,
                                      std::shared_ptr<const SliceStore> store) {
  self->state.shard = std::move(shard);
  return Serve(self, std::move(store));
}

shard_actor::behavior_type BuildingShardActor(ShardPointer self, ShardSpec spec,
                                              std::shared_ptr<const SliceStore> store) {
  absl::StatusOr<ShardState> built = Build(spec);
  if (built.ok()) {
    self->state.shard = std::make_shared<ShardState>(*std::move(built));
  } else {
    self->state.build_error = built.status();
  }
  return Serve(self, std::move(store));
}

shard_actor SpawnShard(caf::actor_system& system, ShardState shard,
                       std::shared_ptr<const SliceStore> store) {
  return system.spawn(ShardActor, std::make_shared<ShardState>(std::move(shard)),
                      std::move(store));
}

}  // namespace tessera
