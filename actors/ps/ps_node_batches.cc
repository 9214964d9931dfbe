// A PS node's batches of shard calls (Note [One request per PS node], actors/ps/shard_client.h)
// and its stats: both fan out to the shards and answer once every shard has.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/ps/internal/ps_node_parts.h"
#include "actors/ps/shard_client.h"
#include "core/base/fan_in.h"

namespace tessera::ps_node_internal {

caf::result<PsNodeStats> CollectStats(NodePointer self, int32_t hottest_rows) {
  if (self->state.shards->empty()) {
    PsNodeStats empty;
    empty.task = self->state.task;
    return empty;
  }
  auto promise = self->make_response_promise<PsNodeStats>();
  std::vector<std::string> names;
  for (const auto& [name, shard] : *self->state.shards) names.push_back(name);
  auto join = FanIn<ShardInfo>::Start(
      names.size(), [promise, task = self->state.task](
                        absl::StatusOr<std::vector<ShardInfo>> infos) mutable {
        if (!infos.ok()) {
          promise.deliver(StatusToError(infos.status()));
          return;
        }
        PsNodeStats stats;
        stats.task = task;
        stats.shards = *std::move(infos);  // in name order: the map's
        stats.num_shards = static_cast<int64_t>(stats.shards.size());
        for (const ShardInfo& info : stats.shards) stats.bytes += info.bytes;
        promise.deliver(std::move(stats));
      });
  size_t k = 0;
  for (const auto& [name, shard] : *self->state.shards) {
    ShardClient::Send(self, shard, InfoOp{hottest_rows},
                      [slot = join->Slot(k++), name = name](absl::StatusOr<ShardOpResult> r) {
                        if (!r.ok()) {
                          return slot(absl::UnavailableError(absl::StrCat(
                              "stats: shard ", name, " did not answer: ", r.status().message())));
                        }
                        slot(ResultOf<InfoOp>(*std::move(r)));
                      });
  }
  return promise;
}

// Serves one batch (Note [One request per PS node], actors/ps/shard_client.h): each shard gets its
// calls as one batch, in order; the replies go back in call order.
caf::result<std::vector<ShardReply>> ServeBatch(NodePointer self, std::vector<ShardCall>& calls) {
  struct PerShard {
    shard_actor shard;
    std::vector<size_t> call_indices;
    std::vector<ShardOp> ops;
  };
  auto replies = std::make_shared<std::vector<ShardReply>>(calls.size());
  std::map<uint64_t, PerShard> by_shard;
  bool changes = false;
  for (size_t k = 0; k < calls.size(); ++k) {
    auto it = self->state.by_id.find(calls[k].shard);
    if (it == self->state.by_id.end()) {
      (*replies)[k].error = StatusToError(absl::UnavailableError(absl::StrCat(
          "ps node ", self->state.task, " holds no shard with actor id ", calls[k].shard,
          " (dropped, or lost with an earlier process at this address)")));
      continue;
    }
    PerShard& group = by_shard[calls[k].shard];
    changes = changes || ChangesShard(calls[k].op);
    group.shard = it->second;
    group.call_indices.push_back(k);
    group.ops.push_back(std::move(calls[k].op));
  }
  if (by_shard.empty()) return std::move(*replies);
  // Note [A node's forwards travel together] (actors/ps/forward_link.h): the links are queued
  // before the shards, so that each takes the forwards of the shards run before it as one batch.
  if (!self->state.links->empty() && changes) {
    for (const auto& [peer, link] : *self->state.links) self->send(link, round_atom::value);
  }
  auto promise = self->make_response_promise<std::vector<ShardReply>>();
  auto join = FanIn<std::vector<ShardReply>>::Start(
      by_shard.size(),
      [promise, replies](absl::StatusOr<std::vector<std::vector<ShardReply>>> done) mutable {
        if (!done.ok()) {
          promise.deliver(StatusToError(done.status()));
          return;
        }
        promise.deliver(std::move(*replies));
      });
  size_t slot = 0;
  for (auto& [id, group] : by_shard) {
    const size_t expected = group.ops.size();
    ShardClient::SendBatch(
        self, group.shard, std::move(group.ops),
        [arrived = join->Slot(slot++), replies, indices = std::move(group.call_indices),
         expected](absl::StatusOr<std::vector<ShardReply>> answers) {
          // A shard's failure (it died mid-batch) is each of its calls' error, not the batch's.
          for (size_t j = 0; j < expected; ++j) {
            ShardReply& reply = (*replies)[indices[j]];
            if (!answers.ok()) {
              reply.error = StatusToError(answers.status());
            } else if (answers->size() != expected) {
              reply.error = StatusToError(absl::InternalError("a shard answered a partial batch"));
            } else {
              reply = std::move((*answers)[j]);
            }
          }
          arrived(std::vector<ShardReply>{});
        });
  }
  return promise;
}

}  // namespace tessera::ps_node_internal
