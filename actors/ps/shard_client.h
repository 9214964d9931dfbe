// ShardClient: the one way Tessera sends shard operations (core/ps/shard_op.h) and receives their
// results. It owns routing (straight to the shard's mailbox, or batched per PS node), and error
// annotation; FanIn (core/base/fan_in.h) joins what several calls return. Variable operations
// (actors/ps/variable_ops.h), the train step, checkpoints and PS statistics are its callers.
//
//   ShardClient client(self);                         // every call sent at once, to its shard
//   ShardClient client(self, ps_nodes);               // calls wait per PS node until Flush()
//   client.Call<GatherOp>(v, shard, GatherOp{ids}, [](absl::StatusOr<ShardValue> rows) {...});
//   client.Flush();                                   // one (batch_atom, calls) per node
//
// Each reply runs exactly once, from the calling actor's context, with the op's result or its
// error: the shard's own (prefixed with the op and the shard's name: "gather on emb/part_1: ..."),
// or Unavailable naming the shard and its PS task when the shard, its node or the connection is
// gone. A reply from a node of another build that does not fit the op is DataLoss.
//
// Note [One request per PS node]
// A recsys train step reads 12 shards and sends them 12 gradients; on a networked worker each
// request and each reply costs both processes a serialization, a socket write and read and a
// thread hand-off, ~14 us of CPU a message all told (derived from net_ops in bench/README.md), more than the model's own
// compute per shard. So a networked worker's client sends each PS node one request per phase of a
// step (the values, then the gradients) carrying that node's calls; the node gives each of its
// shards its calls as one batch, in the order given, and answers once every shard did, with the
// replies in call order. Shards stay actors serving their own mailboxes, and an op behaves
// exactly as it does sent alone (ApplyShardOp runs it either way). In one process calls go
// straight to the shards: a local message is cheap, and a hop through the node would only add
// one.
//
// Thread-safety: a ShardClient belongs to the actor it was made with and must be used (and
// destroyed) on that actor's thread. It holds no state that outlives a Flush but the pending
// batches; the destructor flushes them.
#pragma once

#include <caf/scheduled_actor.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "actors/base/messages.h"
#include "actors/ps/ps_node_actor.h"
#include "actors/ps/shard_actor.h"
#include "actors/base/actor_handles.h"
#include "core/ps/shard_op.h"
#include "core/ps/update_ledger.h"

namespace tessera {

class ShardClient {
 public:
  using Reply = std::function<void(absl::StatusOr<ShardOpResult>)>;
  using BatchReply = std::function<void(absl::StatusOr<std::vector<ShardReply>>)>;

  // Every call goes straight to its shard, at once.
  explicit ShardClient(caf::scheduled_actor* self) : self_(self) {}
  // A call to a shard on PS task t waits in t's batch when ps_nodes[t] is a node, until Flush;
  // other calls go straight to their shard. An empty list batches nothing.
  ShardClient(caf::scheduled_actor* self, std::vector<ps_node_actor> ps_nodes)
      : self_(self), ps_nodes_(std::move(ps_nodes)) {}
  ~ShardClient() { Flush(); }
  ShardClient(const ShardClient&) = delete;
  ShardClient& operator=(const ShardClient&) = delete;

  caf::scheduled_actor* self() const { return self_; }

  // From now on, every update sent without an UpdateId gets the next one `namer` gives for its
  // shard (a closure's updates, Note [Exactly-once updates] in core/ps/update_ledger.h). Null:
  // none.
  void NameUpdates(std::shared_ptr<UpdateNamer> namer) { namer_ = std::move(namer); }

  // Sends `op` to shard `shard` of `v`; `reply` gets the result or the annotated error.
  void Call(const VariableHandle& v, int64_t shard, ShardOp op, Reply reply);

  // The same, with the result taken out as the op's own Result type.
  template <class Op>
  void Call(const VariableHandle& v, int64_t shard, Op op,
            std::function<void(absl::StatusOr<typename Op::Result>)> reply) {
    Call(v, shard, ShardOp(std::move(op)),
         [reply = std::move(reply)](absl::StatusOr<ShardOpResult> result) {
           if (!result.ok()) return reply(result.status());
           reply(ResultOf<Op>(*std::move(result)));
         });
  }

  // Sends every pending batch, one request per PS node.
  void Flush();

  // The transport under Call, for actors that address shards without a VariableHandle (a PS
  // node serving a batch, statistics). Errors are the shard's own, unannotated.
  static void Send(caf::scheduled_actor* self, const shard_actor& shard, ShardOp op, Reply reply);
  static void SendBatch(caf::scheduled_actor* self, const shard_actor& shard,
                        std::vector<ShardOp> ops, BatchReply reply);

 private:
  struct PendingReply;
  struct Batch {
    std::vector<ShardCall> calls;
    std::vector<std::shared_ptr<PendingReply>> replies;
  };
  static void SendPending(caf::scheduled_actor* self, const shard_actor& shard, ShardOp op,
                          std::shared_ptr<PendingReply> pending);

  caf::scheduled_actor* self_;
  std::vector<ps_node_actor> ps_nodes_;
  std::shared_ptr<UpdateNamer> namer_;
  std::map<int32_t, Batch> batches_;  // by PS task
};

}  // namespace tessera
