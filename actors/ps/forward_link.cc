#include "actors/ps/forward_link.h"

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"

namespace tessera {
namespace {

using LinkPointer = forward_link::stateful_pointer<ForwardLinkState>;

// The most a batch gathers before it goes, whatever waits in the mailbox.
constexpr int64_t kBatchBytes = int64_t{8} << 20;
constexpr size_t kBatchForwards = 64;
using Waiting = ForwardLinkState::Waiting;

void FailAll(std::vector<Waiting>& forwards, const caf::error& why) {
  for (Waiting& forward : forwards) forward.promise.deliver(why);
  forwards.clear();
}

// Answers each forward of batch `batch` with its own replies, in order.
void Answer(LinkPointer self, uint64_t batch, std::vector<ShardReply>& replies) {
  auto it = self->state.in_flight.find(batch);
  if (it == self->state.in_flight.end()) return;  // failed already
  std::vector<Waiting> forwards = std::move(it->second);
  self->state.in_flight.erase(it);
  size_t expected = 0;
  for (const Waiting& forward : forwards) expected += forward.ops;
  if (replies.size() != expected) {
    FailAll(forwards, StatusToError(absl::InternalError(absl::StrCat("the backups' node answered ",
                                                                     replies.size(), " of ",
                                                                     expected, " forwarded ops"))));
    return;
  }
  size_t next = 0;
  for (Waiting& forward : forwards) {
    std::vector<ShardReply> own(std::make_move_iterator(replies.begin() + next),
                                std::make_move_iterator(replies.begin() + next + forward.ops));
    next += forward.ops;
    forward.promise.deliver(std::move(own));
  }
}

void Fail(LinkPointer self, uint64_t batch, const caf::error& why) {
  auto it = self->state.in_flight.find(batch);
  if (it == self->state.in_flight.end()) return;
  FailAll(it->second, why);
  self->state.in_flight.erase(it);
}

void SendIfDrained(LinkPointer self);

// Sends what the link gathered as one batch.
void Send(LinkPointer self) {
  ForwardLinkState& state = self->state;
  if (state.gathered.empty()) return;
  state.gathered_bytes = 0;
  const uint64_t batch = state.batches_sent++;
  state.in_flight.emplace(batch, std::move(state.gathered));
  state.gathered.clear();
  std::vector<ShardCall> calls;
  calls.swap(state.calls);
  self->request(state.peer, caf::infinite, batch_atom::value, std::move(calls))
      .then(
          [self, batch](std::vector<ShardReply>& replies) {
            Answer(self, batch, replies);
            SendIfDrained(self);
          },
          [self, batch](caf::error& err) {
            Fail(self, batch, err);
            SendIfDrained(self);
          });
}

// Sends what the link gathered once nothing else waits in its mailbox (Note [A node's forwards
// travel together]).
void SendIfDrained(LinkPointer self) {
  if (self->mailbox().empty()) Send(self);
}

// About how many bytes `op` carries (its tensors and ids).
int64_t PayloadBytes(const ShardOp& op) {
  constexpr int64_t kFloat = sizeof(float);
  constexpr int64_t kId = sizeof(int64_t);
  return std::visit(
      [](const auto& o) -> int64_t {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, AssignOp>) {
          return kFloat * o.value.size();
        } else if constexpr (std::is_same_v<T, ApplyDenseGradientOp>) {
          return kFloat * o.grad.size();
        } else if constexpr (std::is_same_v<T, ScatterRowsOp>) {
          return kFloat * o.rows.values.size() + kId * static_cast<int64_t>(o.rows.indices.size());
        } else if constexpr (std::is_same_v<T, ApplySparseGradientOp>) {
          return kFloat * o.grad.values().size() +
                 kId * static_cast<int64_t>(o.grad.indices().size());
        } else if constexpr (std::is_same_v<T, RestoreOp>) {
          int64_t bytes = kFloat * o.slice.value.size();
          for (const Tensor& slot : o.slice.slots) bytes += kFloat * slot.size();
          return bytes;
        } else {
          return 0;
        }
      },
      op);
}

}  // namespace

forward_link::behavior_type ForwardLink(LinkPointer self, batch_server peer) {
  self->state.peer = std::move(peer);
  self->monitor(self->state.peer);
  self->set_down_handler([self](caf::down_msg& down) {
    ForwardLinkState& state = self->state;
    if (down.source != state.peer.address()) return;
    // Cancelled for a node that shut down in order (the shards say so at info), Unavailable for
    // one that died.
    const std::string reason = self->system().render(down.reason);
    const caf::error why = StatusToError(
        OrderlyExit(down.reason)
            ? absl::CancelledError(absl::StrCat("the backups' node was shut down: ", reason))
            : absl::UnavailableError(absl::StrCat("the backups' node went down: ", reason)));
    FailAll(state.gathered, why);
    for (auto& [batch, forwards] : state.in_flight) FailAll(forwards, why);
    state.in_flight.clear();
    state.calls.clear();
    state.gathered_bytes = 0;
    self->quit(down.reason);
  });
  // Whatever message ends a run of the mailbox sends what was gathered, an unexpected one too.
  self->set_default_handler(
      [self](caf::scheduled_actor*, caf::message_view&) -> caf::result<caf::message> {
        SendIfDrained(self);
        return caf::sec::unexpected_message;
      });
  return {
      [self](forward_atom, const caf::actor& backup,
             std::vector<ShardOp>& ops) -> caf::result<std::vector<ShardReply>> {
        ForwardLinkState& state = self->state;
        if (!backup) {
          SendIfDrained(self);
          return StatusToError(absl::InvalidArgumentError("a forward names no backup"));
        }
        // A batch stays within kBatchBytes unless one forward alone is larger (a rebuild's part:
        // up to 32 MiB), and within kBatchForwards forwards.
        int64_t bytes = 0;
        for (const ShardOp& op : ops) bytes += PayloadBytes(op);
        if (state.gathered_bytes + bytes > kBatchBytes) Send(self);
        for (ShardOp& op : ops) state.calls.push_back(ShardCall{backup.id(), std::move(op)});
        auto promise = self->make_response_promise<std::vector<ShardReply>>();
        state.gathered.push_back(Waiting{promise, ops.size()});
        state.gathered_bytes += bytes;
        if (state.gathered_bytes >= kBatchBytes || state.gathered.size() >= kBatchForwards) {
          Send(self);
        } else {
          SendIfDrained(self);
        }
        return promise;
      },
      [self](round_atom) { SendIfDrained(self); },
  };
}

}  // namespace tessera
