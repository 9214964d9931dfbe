// Sending ShardCalls (actors/messages.h): one shard operation as a value, sent either alone as
// the shard's own typed request or, by a networked worker, batched with the other calls of a
// step for the same PS node (Note [One request per PS node]).
//
//   SendShardCall(self, shard, call, reply)   the call as the shard's own request
//   ShardBatch batch(ps_nodes);               calls per PS node, sent by Flush
//   if (batch.Takes(task)) batch.Add(task, shard, call, reply);
//   batch.Flush(self);                        one (batch_atom, calls) request per node
//
// Either way `reply` runs exactly once, from the calling actor's context, with the call's
// ShardCallReply: its value, or its error (the shard's own, or the node's or the connection's).
//
// Note [One request per PS node]
// A recsys train step reads 12 shards and sends them 12 gradients; on a networked worker each
// request and each reply costs both processes a serialization, a socket write and read and a
// thread hand-off, ~14 us of CPU a message all told (bench/README.md), more than the model's own
// compute per shard. So a networked worker sends each PS node one request per phase of a step
// (the values, then the gradients) carrying that node's calls, and the node hands each call to
// its shard actor as that shard's own request, in the order given, and answers once every shard
// did, with the replies in the same order. Shards stay actors serving their own mailboxes, and a
// call behaves exactly as it does sent alone (the same handler runs it). In one process the
// calls go straight to the shards: a local message is cheap, and a hop through the node would
// only add one.
//
// Thread-safety: a ShardBatch belongs to the actor that fills and flushes it.
#pragma once

#include <caf/error.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "actors/error.h"
#include "actors/messages.h"
#include "actors/ps_node_actor.h"
#include "actors/shard_actor.h"

namespace tessera {

using ShardCallDone = std::function<void(ShardCallReply)>;

namespace internal {

inline ShardCallReply ErrorReply(caf::error err) {
  ShardCallReply reply;
  reply.error = std::move(err);
  return reply;
}

inline ShardCallReply VersionReply(int64_t version) {
  ShardCallReply reply;
  reply.value.version = version;
  return reply;
}

}  // namespace internal

// The calls, by kind.
inline ShardCall ReadCall() { return ShardCall{}; }

inline ShardCall GatherCall(Ids ids) {
  ShardCall call;
  call.kind = ShardCallKind::kGather;
  call.ids.ids = std::move(ids);
  return call;
}

inline ShardCall AssignCall(AssignKind kind, Tensor value) {
  ShardCall call;
  call.kind = ShardCallKind::kAssign;
  call.assign_kind = kind;
  call.tensor = std::move(value);
  return call;
}

inline ShardCall ScatterCall(ScatterOp op, IndexedSlices rows) {
  ShardCall call;
  call.kind = ShardCallKind::kScatter;
  call.scatter_op = op;
  call.slices = std::move(rows);
  return call;
}

inline ShardCall DenseGradientCall(Tensor grad) {
  ShardCall call;
  call.kind = ShardCallKind::kApplyDense;
  call.tensor = std::move(grad);
  return call;
}

inline ShardCall SparseGradientCall(IndexedSlices grad) {
  ShardCall call;
  call.kind = ShardCallKind::kApplySparse;
  call.slices = std::move(grad);
  return call;
}

// Sends `call` to `shard` as the shard's own typed request (call.shard is not used); `reply` is
// any callable taking a ShardCallReply (a lambda here costs no allocation beyond CAF's own).
template <class Self, class Reply>
void SendShardCall(Self* self, const shard_actor& shard, ShardCall call, Reply reply) {
  auto on_error = [reply](caf::error& err) { reply(internal::ErrorReply(std::move(err))); };
  auto on_value = [reply](ShardValue& value) { reply(ShardCallReply{caf::none, std::move(value)}); };
  auto on_version = [reply](int64_t version) { reply(internal::VersionReply(version)); };
  switch (call.kind) {
    case ShardCallKind::kRead:
      self->request(shard, caf::infinite, read_atom::value).then(on_value, on_error);
      return;
    case ShardCallKind::kGather:
      self->request(shard, caf::infinite, gather_atom::value, std::move(call.ids))
          .then(on_value, on_error);
      return;
    case ShardCallKind::kAssign:
      self->request(shard, caf::infinite, assign_atom::value, call.assign_kind,
                    std::move(call.tensor))
          .then(on_version, on_error);
      return;
    case ShardCallKind::kScatter:
      self->request(shard, caf::infinite, scatter_atom::value, call.scatter_op,
                    std::move(call.slices))
          .then(on_version, on_error);
      return;
    case ShardCallKind::kApplyDense:
      self->request(shard, caf::infinite, apply_grad_atom::value, std::move(call.tensor))
          .then(on_version, on_error);
      return;
    case ShardCallKind::kApplySparse:
      self->request(shard, caf::infinite, apply_grad_atom::value, std::move(call.slices))
          .then(on_version, on_error);
      return;
  }
  reply(internal::ErrorReply(StatusToError(absl::InvalidArgumentError(
      absl::StrCat("a shard call of kind ", static_cast<int32_t>(call.kind))))));
}

// The calls of one phase of a step, per PS task, for the tasks whose node it knows.
class ShardBatch {
 public:
  // `ps_nodes[task]`: PS task `task`'s node; an empty list batches nothing.
  explicit ShardBatch(std::vector<ps_node_actor> ps_nodes) : ps_nodes_(std::move(ps_nodes)) {}

  bool Takes(int32_t task) const {
    return task >= 0 && task < static_cast<int32_t>(ps_nodes_.size()) && ps_nodes_[task];
  }

  // Adds `call` for `shard` (on PS task `task`, which Takes) to that node's request.
  void Add(int32_t task, const shard_actor& shard, ShardCall call, ShardCallDone reply) {
    call.shard = shard.id();
    Pending& pending = by_task_[task];
    pending.calls.push_back(std::move(call));
    pending.replies.push_back(std::move(reply));
  }

  // Sends each node its calls in one request; the batch is empty afterwards.
  template <class Self>
  void Flush(Self* self) {
    for (auto& [task, pending] : by_task_) {
      auto replies = std::make_shared<std::vector<ShardCallDone>>(std::move(pending.replies));
      const size_t count = pending.calls.size();
      self->request(ps_nodes_[task], caf::infinite, batch_atom::value, std::move(pending.calls))
          .then(
              [replies, count, task = task](std::vector<ShardCallReply>& answers) {
                if (answers.size() != count) {  // a node of another build: fail every call
                  caf::error err = StatusToError(absl::DataLossError(absl::StrCat(
                      "ps ", task, " answered ", answers.size(), " of ", count, " shard calls")));
                  for (ShardCallDone& reply : *replies) reply(internal::ErrorReply(err));
                  return;
                }
                for (size_t k = 0; k < count; ++k) (*replies)[k](std::move(answers[k]));
              },
              [replies](caf::error& err) {
                for (ShardCallDone& reply : *replies) reply(internal::ErrorReply(err));
              });
    }
    by_task_.clear();
  }

 private:
  struct Pending {
    std::vector<ShardCall> calls;
    std::vector<ShardCallDone> replies;
  };
  std::vector<ps_node_actor> ps_nodes_;
  std::map<int32_t, Pending> by_task_;
};

}  // namespace tessera
