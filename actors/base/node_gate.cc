#include "actors/base/node_gate.h"

#include <caf/event_based_actor.hpp>
#include <caf/result.hpp>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"

namespace tessera {
namespace {

caf::behavior NodeGate(caf::event_based_actor* self, std::string node, caf::actor service,
                       int32_t version, PeerAdmitted admitted) {
  // The gate lives as long as its service: when the PS node or coordinator exits, so does the
  // gate, and nothing is left to keep the actor system from shutting down.
  self->set_default_handler(caf::drop);
  self->monitor(service);
  self->set_down_handler([self](const caf::down_msg&) { self->quit(); });
  return {
      [self, node, service, version, admitted](hello_atom, int32_t peer_version,
                                               const std::string& peer)
          -> caf::result<int32_t, std::string, caf::actor> {
        if (peer_version != version) {
          return StatusToError(absl::FailedPreconditionError(absl::StrCat(
              node, " speaks Tessera protocol version ", version, " but ", peer,
              " speaks version ", peer_version, "; run the same Tessera release on every node")));
        }
        // Before the reply: the peer's next, larger messages come after it.
        if (admitted && self->current_sender() != nullptr) {
          admitted(self->current_sender()->node());
        }
        return caf::result<int32_t, std::string, caf::actor>(version, node, service);
      },
  };
}

}  // namespace

caf::actor SpawnNodeGate(caf::actor_system& system, std::string node, caf::actor service,
                         int32_t version, PeerAdmitted admitted) {
  return system.spawn(NodeGate, std::move(node), std::move(service), version,
                      std::move(admitted));
}

}  // namespace tessera
