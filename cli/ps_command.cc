#include "cli/ps_command.h"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/send.hpp>
#include <csignal>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "actors/ps/ps_node_actor.h"
#include "cli/ps_metrics.h"
#include "cluster/base/cluster.h"
#include "core/base/logging.h"
#include "tessera/status.h"

namespace tessera::cli {
namespace {

// How long a scrape waits for the node's stats (Note [A scrape waits for the node, boundedly]).
constexpr absl::Duration kMetricsWait = absl::Seconds(2);

}  // namespace

absl::Status ResolvePsIdentity(const PsFlags& flags, const ClusterConfig& config,
                               PsOptions& options) {
  if (flags.standby && flags.task.has_value()) {
    return absl::InvalidArgumentError(
        "a --standby PS has no --task: the coordinator that adopts it gives it the lost one's");
  }
  // The task: the flags', else the config's, else PS task 0. Only a task of the config has an
  // address in its cluster (a --task's is looked up there too).
  ClusterTask task{TaskType::kPs, 0};
  std::string source = "--task";
  bool has_address = config.cluster.has_value();
  if (flags.standby) {
    has_address = has_address && config.task.has_value() &&
                  config.task->type == TaskType::kPsStandby;
    if (has_address) {
      task = *config.task;
      source = config.task_source;
    } else {
      task.type = TaskType::kPsStandby;
    }
  } else if (flags.task.has_value()) {
    task.index = *flags.task;
  } else if (config.task.has_value()) {
    task = *config.task;
    source = config.task_source;
    if (task.type == TaskType::kCoordinator || task.type == TaskType::kWorker) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": task ", task.ToString(), " is ",
          task.type == TaskType::kWorker ? "a worker" : "the coordinator",
          ": run the training program for it (as the coordinator by default, as a worker with "
          "--role=worker), not tessera ps"));
    }
  }
  if (task.index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--task=", task.index, " is negative"));
  }
  options.standby = task.type == TaskType::kPsStandby;
  options.task = options.standby ? 0 : task.index;
  // The port: --port, else the task's address in the cluster, else the default.
  if (flags.port.has_value()) {
    options.port = *flags.port;
    options.how_to_change_port = "start tessera ps with another --port";
  } else if (has_address) {
    TESSERA_RETURN_IF_ERROR(CheckTaskInCluster(task, *config.cluster, source));
    const char* list = options.standby ? "ps_standby" : "ps";
    const NodeAddress& address =
        (options.standby ? config.cluster->ps_standby : config.cluster->ps)[task.index];
    options.port = address.port;
    options.how_to_change_port =
        absl::StrCat("change its address (\"", list, "\"[", task.index, "], ",
                     address.ToString(), ") in ", config.cluster->source,
                     ", or start tessera ps with --port");
  } else {
    options.port = kDefaultPsPort;
    options.how_to_change_port = absl::StrCat(
        "start tessera ps with --port (the default port, ", kDefaultPsPort, ", is taken)");
  }
  return absl::OkStatus();
}

absl::Status RunPs(const PsOptions& options, std::ostream& out) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("--port=", options.port, " is not a port"));
  }
  if (options.metrics_port.has_value() &&
      (*options.metrics_port < 0 || *options.metrics_port > 65535)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics_port=", *options.metrics_port, " is not a port"));
  }
  if (options.shard_lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard_lease_s=", absl::ToDoubleSeconds(options.shard_lease), " is negative"));
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
      // Note [Backups reached directly] (actors/ps/ps_node_actor.h).
      PeerConnector connect_peer = [&system, name, network = options.network](
                                       const std::string& address) -> absl::StatusOr<caf::actor> {
        TESSERA_ASSIGN_OR_RETURN(NodeAddress peer, ParseNodeAddress(address));
        return ConnectToNode(system, peer, name, network, kProtocolVersion);
      };
      ps_node_actor node = SpawnPsNode(system, options.standby ? kStandbyTask : options.task,
                                       caf::timespan(absl::ToInt64Nanoseconds(options.shard_lease)),
                                       std::move(connect_peer));
      // The metrics port is bound first: when it is taken, nothing listens.
      std::unique_ptr<PsMetrics> metrics;
      absl::StatusOr<MetricsServer> metrics_server = MetricsServer{};
      if (options.metrics_port.has_value()) {
        metrics = std::make_unique<PsMetrics>(system, node, kMetricsWait);
        metrics_server = BindMetricsServer(*metrics, options.metrics_host, *options.metrics_port);
      }
      absl::StatusOr<uint16_t> port =
          metrics_server.ok()
              ? PublishNode(system, name, caf::actor_cast<caf::actor>(node),
                            static_cast<uint16_t>(options.port), options.network,
                            options.how_to_change_port)
              : absl::StatusOr<uint16_t>(metrics_server.status());
      if (port.ok()) {
        out << "tessera ps: " << name << " listening on " << options.network.bind << ":" << *port
            << " (protocol version " << kProtocolVersion << ", "
            << (options.network.tls() ? "mutual TLS" : "plain TCP") << ")" << std::endl;
        std::thread serving;
        if (metrics_server->server != nullptr) {
          const std::string& host = options.metrics_host;
          out << "tessera ps: metrics on http://"
              << (host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host)
              << ":" << metrics_server->port << PsMetrics::kPath << std::endl;
          serving = std::thread([&metrics_server] {
            if (absl::Status run = metrics_server->server->Run(); !run.ok()) {
              Log().error("metrics: {}", run.message());
            }
          });
        }
        int signal = 0;
        sigwait(&signals, &signal);
        if (serving.joinable()) {
          metrics_server->server->Stop();
          serving.join();
        }
        out << "tessera ps: stopped on " << (signal == SIGINT ? "SIGINT" : "SIGTERM") << std::endl;
      }
      status = port.status();
      metrics_server = MetricsServer{};  // before the node and the system it asks
      metrics.reset();
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    }
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return status;
}

}  // namespace tessera::cli
