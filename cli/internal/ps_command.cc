#include "cli/internal/ps_command.h"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>
#include <csignal>

#include "absl/strings/str_cat.h"
#include "actors/ps_node_actor.h"
#include "cluster/cluster.h"
#include "core/logging.h"

namespace tessera::cli {

absl::Status RunPs(const PsOptions& options, std::ostream& out) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port=", options.port, " is not a port"));
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--threads=", options.threads, " is negative"));
  }
  if (options.task < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--task=", options.task, " is negative"));
  }
  if (options.standby && options.task != 0) {
    return absl::InvalidArgumentError(
        "a --standby PS has no --task: the coordinator that adopts it gives it the lost one's");
  }
  // SIGINT and SIGTERM are blocked before CAF starts its threads (they inherit the mask) and
  // taken synchronously below.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigset_t previous;
  pthread_sigmask(SIG_BLOCK, &signals, &previous);
  absl::Status status;
  {
    caf::actor_system_config config;
    ConfigureActorSystem(config, options.threads);
    status = ConfigureNetwork(config, options.network);
    if (status.ok()) {
      caf::actor_system system(config);
      const std::string name =
          options.standby ? std::string("standby") : absl::StrCat("ps ", options.task);
      SetLogRole(name);
      ps_node_actor node = SpawnPsNode(system, options.standby ? kStandbyTask : options.task);
      absl::StatusOr<uint16_t> port =
          PublishNode(system, name, caf::actor_cast<caf::actor>(node),
                      static_cast<uint16_t>(options.port), options.network);
      if (port.ok()) {
        out << "tessera ps: " << name << " listening on " << options.network.bind << ":" << *port
            << " (protocol version " << kProtocolVersion << ", "
            << (options.network.tls() ? "mutual TLS" : "plain TCP") << ")" << std::endl;
        int signal = 0;
        sigwait(&signals, &signal);
        out << "tessera ps: stopped on " << (signal == SIGINT ? "SIGINT" : "SIGTERM") << std::endl;
      }
      status = port.status();
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    }
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return status;
}

}  // namespace tessera::cli
