// Whether a node can listen on its port, and if not, a message its user can act on: which
// process of ours wanted which port, who has it, and how to choose another. A port another
// process listens on is an error at once; a port held only by connections (those of a process
// that just ended, or an outgoing connection that took it as its local port) frees itself within
// seconds, so PublishNode waits for it instead.
//
//   TESSERA_RETURN_IF_ERROR(CheckCanListen("the coordinator", "127.0.0.1", 7000,
//                                  "change the coordinator's address in TF_CONFIG"));
//   // Unavailable: "the coordinator cannot listen on 127.0.0.1:7000: another process listens on
//   //   port 7000 (`ss -ltnp 'sport = :7000'` names it); change the coordinator's address in
//   //   TF_CONFIG"
//
// Thread-safety: every function is safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tessera {

// Whether a TCP socket of this network namespace listens on `port` (any address, IPv4 or IPv6),
// from /proc/net/tcp and /proc/net/tcp6; nullopt when neither can be read.
std::optional<bool> SomeoneListensOn(uint16_t port);

// "<who> cannot listen on <bind>:<port>: another process listens on port <port> (...); <how>".
std::string PortTakenMessage(absl::string_view who, absl::string_view bind, uint16_t port,
                             absl::string_view how_to_change);

// Binds a socket to bind:`port` the way a node does (SO_REUSEADDR) and closes it. OK when that
// works, and when the port is held by connections only (no listener: see above). Unavailable,
// with PortTakenMessage, when another process listens on the port; Unavailable naming `who`,
// the address, the system's reason and `how_to_change` when the address cannot be bound at all
// (not an address of this machine, a port below 1024 without the privilege).
absl::Status CheckCanListen(absl::string_view who, const std::string& bind, uint16_t port,
                            absl::string_view how_to_change);

}  // namespace tessera
