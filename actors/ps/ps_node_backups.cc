// A PS node's backups (Note [Backups reached directly]): handing a primary its backup, reached
// through a direct connection and the node's forward link to the backup's node, and a lost
// backup's report to the owner.
#include <caf/actor_cast.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/send.hpp>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/ps/forward_link.h"
#include "actors/ps/internal/ps_node_parts.h"
#include "tessera/status.h"

namespace tessera::ps_node_internal {
namespace {

// Hands shard `shard` (named `name`) its backup (backup_atom), reached through `via` (null:
// directly), and answers `promise` with its reply.
void GiveBackup(NodePointer self, const std::string& name, const shard_actor& shard,
                const caf::actor& backup, const caf::actor& via, bool send_state,
                caf::typed_response_promise<int64_t> promise) {
  self->request(shard, caf::infinite, backup_atom::value, backup, via, send_state)
      .then(
          [self, name, shard, backed_up = static_cast<bool>(backup),
           promise](int64_t version) mutable {
            auto held = self->state.shards->find(name);
            if (held != self->state.shards->end() && held->second == shard) {
              if (backed_up) {
                self->state.backed_up.insert(name);
              } else {
                self->state.backed_up.erase(name);
              }
            }
            promise.deliver(version);
          },
          [promise](caf::error& err) mutable { promise.deliver(std::move(err)); });
}

// The forward link to PS node `peer` (Note [A node's forwards travel together], actors/
// forward_link.h), spawned on first use; null for a null peer (the connector names none).
caf::actor LinkTo(NodePointer self, const caf::actor& peer) {
  if (!peer) return caf::actor();
  forward_link& link = (*self->state.links)[peer.address()];
  if (!link) {
    link = self->spawn(ForwardLink, caf::actor_cast<batch_server>(peer));
    self->monitor(link);
  }
  return caf::actor_cast<caf::actor>(link);
}

}  // namespace

// Note [A lost backup is struck before the primary acknowledges alone] (actors/ps/shard_actor.h):
// shard `name` says its backup failed; it no longer has a backup (reclaim_atom says so), and its
// owner, who placed the backup, hears of it. A report not from that shard is ignored.
void ReportLostBackup(NodePointer self, const std::string& name, const caf::actor& backup) {
  PsNodeState& state = self->state;
  auto it = state.shards->find(name);
  if (it == state.shards->end() ||
      it->second.address() != caf::actor_cast<caf::actor_addr>(self->current_sender())) {
    return;
  }
  state.backed_up.erase(name);
  auto owner = state.owner_of.find(name);
  if (owner == state.owner_of.end()) return;
  auto entry = state.owners.find(owner->second);
  if (entry == state.owners.end() || !entry->second.handle) return;
  caf::anon_send(entry->second.handle, backup_lost_atom::value, name, backup);
}

// Note [Backups reached directly] (ps_node_actor.h).
caf::result<int64_t> GiveBackup(NodePointer self, const std::string& name, const caf::actor& backup,
                               const std::string& backup_address, bool send_state) {
  auto it = self->state.shards->find(name);
  if (it == self->state.shards->end()) {
    return StatusToError(
        absl::NotFoundError(absl::StrCat("ps node ", self->state.task, " holds no shard ", name)));
  }
  const shard_actor shard = it->second;
  auto promise = self->make_response_promise<int64_t>();
  if (backup_address.empty() || !self->state.connect_peer || !backup) {
    GiveBackup(self, name, shard, backup, caf::actor(), send_state, promise);
    return promise;
  }
  // (An argument, unused: CAF 0.17 dereferences a null argument tuple when there is none.)
  auto connector = self->spawn<caf::detached>(
      [connect = self->state.connect_peer](caf::event_based_actor* helper, int) -> caf::behavior {
        return {[helper, connect](const std::string& address) -> caf::result<caf::actor> {
          helper->quit();
          absl::StatusOr<caf::actor> peer = connect(address);
          if (!peer.ok()) return StatusToError(peer.status());
          return *std::move(peer);
        }};
      },
      0);
  self->request(connector, caf::infinite, backup_address)
      .then(
          [self, name, shard, backup, send_state, promise](caf::actor& peer) mutable {
            GiveBackup(self, name, shard, backup, LinkTo(self, peer), send_state, promise);
          },
          [promise, backup_address](caf::error& err) mutable {
            promise.deliver(StatusToError(Annotate(
                ErrorToStatus(err), absl::StrCat("reaching the backup's node ", backup_address))));
          });
  return promise;
}

bool ForgetLink(NodePointer self, const caf::actor_addr& source) {
  PsNodeState& state = self->state;
  for (auto it = state.links->begin(); it != state.links->end(); ++it) {
    if (it->second.address() == source) {  // its peer went down
      state.links->erase(it);
      return true;
    }
  }
  return false;
}

}  // namespace tessera::ps_node_internal
