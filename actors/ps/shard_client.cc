#include "actors/ps/shard_client.h"

#include <caf/actor_cast.hpp>
#include <caf/mailbox_element.hpp>
#include <caf/message_id.hpp>
#include <caf/sec.hpp>
#include <memory>

#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// A request from `self` to `dest` whose response runs `on_reply`: what CAF's typed `request`
// does, without being a template over the requesting actor's type. (The shard and PS node
// handlers accept exactly these messages; their interfaces in shard_actor.h and ps_node_actor.h
// are the contract.)
template <class Handle, class... Ts>
void Request(caf::scheduled_actor* self, const Handle& dest, caf::behavior on_reply, Ts&&... xs) {
  const caf::message_id id = self->new_request_id(caf::message_priority::normal);
  auto receiver = caf::actor_cast<caf::strong_actor_ptr>(dest);
  if (receiver) {
    receiver->enqueue(
        caf::make_mailbox_element(self->ctrl(), id, {}, std::forward<Ts>(xs)...),
        self->context());
  } else {
    self->eq_impl(id.response_id(), self->ctrl(), self->context(),
                  caf::make_error(caf::sec::invalid_argument));
  }
  self->add_multiplexed_response_handler(id.response_id(), std::move(on_reply));
}

// The status a caller sees for a failed call to `shard_name` (on PS task `task`): the shard's own
// error prefixed with the op and the shard, or Unavailable naming both when the shard is gone.
absl::Status Annotated(const std::string& shard_name, int32_t task, absl::string_view op,
                       const absl::Status& status) {
  if (absl::IsUnavailable(status)) {
    return absl::UnavailableError(absl::StrCat(op, ": shard ", shard_name, " on ps ", task,
                                               " is unavailable (", status.message(), ")"));
  }
  return Annotate(status, absl::StrCat(op, " on ", shard_name));
}

absl::StatusOr<ShardOpResult> Unpack(ShardReply reply) {
  if (reply.error) return ErrorToStatus(reply.error);
  return std::move(reply.result);
}

}  // namespace

// One call's reply and, for a call addressed through a VariableHandle, what names its shard in
// an error: one allocation per call, shared by the response's value and error handlers.
struct ShardClient::PendingReply {
  Reply reply;
  std::string variable;  // empty: report errors as they are (Send)
  absl::string_view op;  // static storage (ShardOpName)
  int32_t shard = 0;
  int32_t num_shards = 1;
  int32_t task = -1;

  void operator()(absl::StatusOr<ShardOpResult> result) {
    if (result.ok() || variable.empty()) return reply(std::move(result));
    reply(Annotated(ShardName(variable, shard, num_shards), task, op, result.status()));
  }
};

void ShardClient::Send(caf::scheduled_actor* self, const shard_actor& shard, ShardOp op,
                       Reply reply) {
  auto pending = std::make_shared<PendingReply>();
  pending->reply = std::move(reply);
  SendPending(self, shard, std::move(op), std::move(pending));
}

void ShardClient::SendPending(caf::scheduled_actor* self, const shard_actor& shard, ShardOp op,
                              std::shared_ptr<PendingReply> shared) {
  Request(self, shard,
          caf::behavior{
              [shared](ShardOpResult& result) { (*shared)(std::move(result)); },
              [shared](caf::error& err) { (*shared)(ErrorToStatus(err)); },
          },
          std::move(op));
}

void ShardClient::SendBatch(caf::scheduled_actor* self, const shard_actor& shard,
                            std::vector<ShardOp> ops, BatchReply reply) {
  auto shared = std::make_shared<BatchReply>(std::move(reply));
  Request(self, shard,
          caf::behavior{
              [shared](std::vector<ShardReply>& replies) { (*shared)(std::move(replies)); },
              [shared](caf::error& err) { (*shared)(ErrorToStatus(err)); },
          },
          std::move(ops));
}

void ShardClient::Call(const VariableHandle& v, int64_t shard, ShardOp op, Reply reply) {
  if (namer_ != nullptr) {
    if (UpdateId* update = UpdateIdOf(op); update != nullptr && !update->tagged()) {
      *update = namer_->Next(v.name, shard);
    }
  }
  // The reply may run after the handle is gone: it keeps what renders the shard's name (only
  // rendered on error; a variable's name is short enough to copy without allocating, usually).
  auto pending = std::make_shared<PendingReply>();
  pending->reply = std::move(reply);
  pending->variable = v.name;
  pending->op = ShardOpName(op);
  pending->shard = static_cast<int32_t>(shard);
  pending->num_shards = static_cast<int32_t>(v.num_shards());
  pending->task = v.PsTaskOf(shard);
  const int32_t task = pending->task;
  if (task >= 0 && task < static_cast<int32_t>(ps_nodes_.size()) && ps_nodes_[task]) {
    Batch& batch = batches_[task];
    batch.calls.push_back(ShardCall{v.shards[shard].id(), std::move(op)});
    batch.replies.push_back(std::move(pending));
    return;
  }
  SendPending(self_, v.shards[shard], std::move(op), std::move(pending));
}

void ShardClient::Flush() {
  for (auto& [task, batch] : batches_) {
    auto replies =
        std::make_shared<std::vector<std::shared_ptr<PendingReply>>>(std::move(batch.replies));
    const size_t count = batch.calls.size();
    Request(self_, ps_nodes_[task],
            caf::behavior{
                [replies, count, task = task](std::vector<ShardReply>& answers) {
                  if (answers.size() != count) {  // a node of another build: fail every call
                    const absl::Status status = absl::DataLossError(absl::StrCat(
                        "ps ", task, " answered ", answers.size(), " of ", count, " shard calls"));
                    for (auto& reply : *replies) (*reply)(status);
                    return;
                  }
                  for (size_t k = 0; k < count; ++k) (*(*replies)[k])(Unpack(std::move(answers[k])));
                },
                [replies](caf::error& err) {
                  const absl::Status status = ErrorToStatus(err);
                  for (auto& reply : *replies) (*reply)(status);
                },
            },
            batch_atom::value, std::move(batch.calls));
  }
  batches_.clear();
}

}  // namespace tessera
