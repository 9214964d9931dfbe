// The forward link: carries the changes a PS node's primary shards forward to their backups on
// one other PS node, as batches to that node (Note [A node's forwards travel together]).
//
// Interface (local: the node and its own shards are its only clients):
//
//   request                        reply                      meaning
//   (forward_atom, caf::actor      std::vector<ShardReply>,   `ops` for shard `backup` on the
//    backup, std::vector<ShardOp>)  one per op, in order       peer node; the error of them all
//                                                              when the batch they went in failed
//   (round_atom)                   -                          from the node: its shards are
//                                                              about to run a request's ops
//
// Note [A node's forwards travel together]
// A shard with a backup sends each change it applied on to its backup, and acknowledges it once the
// backup applied it too (Note [Shard backups], actors/ps/shard_actor.h). One worker request to a
// PS node touches most of its shards, so each of them then forwards on its own: across processes
// one request and one reply per shard, each a serialization, a socket write and read and a thread
// hand-off on both nodes, as a worker's calls cost before they went one request per PS node
// (Note [One request per PS node], actors/ps/shard_client.h). So a networked node gives its shards
// one link per backup node: a shard sends its forward to the link, a local message, and the link
// sends what it gathered as one batch_atom to the peer node once its mailbox is empty; the peer
// hands each backup its ops in order and answers once all did, and the link answers each forward
// with its own replies. A forward thus waits only for those already in the link's mailbox.
// For those to be the forwards of one request, the link must run after the shards. CAF's
// work-stealing scheduler runs an actor woken from inside a thread next (it goes to the front of
// the thread's queue), so a link woken by the first shard's forward would run before the other
// shards and send that forward alone. The node therefore sends its links a round_atom before it
// hands a request's ops to its shards: each link is then queued behind them, and takes their
// forwards in one batch (recsys: ~6 a batch instead of ~1.6). With several scheduler threads a
// link may run earlier and send smaller batches; nothing else changes. A batch also goes as soon
// as it holds 64 forwards or 8 MiB, whatever waits in the mailbox, and a larger forward (a
// rebuild's part) goes in a batch of its own, so batches stay far below --max_message_bytes.
// Order is kept: a shard's forwards reach the link in the order sent (one sender, one receiver);
// the link sends its batches to the peer in that order; the peer node sends each backup its calls
// batch after batch, in order. So a backup applies its primary's changes in the order the primary
// did, as it did when they went straight to it. Failures reach the shard as before: a backup
// that is gone is its calls' error in the peer's answer (it holds no shard with that id), and a
// peer that is gone or cut off is the batch's error, or no answer at all, which the shard learns
// from the down message of the backup it monitors (the link, seeing its peer go down, fails
// what it holds and exits).
// In one process there is no link: a local message to the backup costs what one to a link would.
//
// Thread-safety: a CAF actor; its state is touched only by its own handlers.
#pragma once

#include <caf/actor.hpp>
#include <caf/replies_to.hpp>
#include <caf/stateful_actor.hpp>
#include <caf/typed_actor.hpp>
#include <caf/typed_behavior.hpp>
#include <caf/typed_event_based_actor.hpp>
#include <caf/typed_response_promise.hpp>
#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "actors/base/messages.h"

namespace tessera {

// What the link needs of its peer: a PS node's batches (actors/ps/ps_node_actor.h).
using batch_server = caf::typed_actor<
    caf::replies_to<batch_atom, std::vector<ShardCall>>::with<std::vector<ShardReply>>>;

using forward_link = caf::typed_actor<
    caf::replies_to<forward_atom, caf::actor, std::vector<ShardOp>>::with<std::vector<ShardReply>>,
    caf::reacts_to<round_atom>>;

struct ForwardLinkState {
  static inline const char* name = "tessera.forward_link";
  // A forward waiting for its replies: how many ops it sent.
  struct Waiting {
    caf::typed_response_promise<std::vector<ShardReply>> promise;
    size_t ops = 0;
  };
  batch_server peer;
  // The calls gathered for the next batch, and their forwards in order.
  std::vector<ShardCall> calls;
  std::vector<Waiting> gathered;
  int64_t gathered_bytes = 0;  // about what the gathered calls carry
  // The batches sent and not answered yet, each's forwards in order.
  std::map<uint64_t, std::vector<Waiting>> in_flight;
  uint64_t batches_sent = 0;
};

// The behaviour of a link to `peer`, a PS node actor on another node (it serves batch_atom,
// actors/ps/ps_node_actor.h). The link monitors the peer and quits when it goes down, answering
// every forward it still holds with an error; otherwise it lives while referenced.
forward_link::behavior_type ForwardLink(forward_link::stateful_pointer<ForwardLinkState> self,
                                        batch_server peer);

}  // namespace tessera
