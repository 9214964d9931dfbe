#include "cluster/base/cluster.h"

#include <caf/atom.hpp>
#include <caf/event_based_actor.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/send.hpp>
#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/base/messages.h"
#include "core/base/logging.h"
#include "tessera/status.h"

namespace tessera {

void ConfigureActorSystem(caf::actor_system_config& cfg, int32_t threads) {
  RegisterTesseraTypes(cfg);
  cfg.set("logger.file-verbosity", caf::atom("quiet"));
  cfg.set("logger.console-verbosity", caf::atom("quiet"));
  // One scheduler thread per core: CAF's default, max(cores, 4), oversubscribes small machines
  // (on 2 cores a training step's compute took 350 us instead of 265 us).
  const int32_t cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  cfg.set("scheduler.max-threads", static_cast<size_t>(threads > 0 ? threads : cores));
  // Note [Scheduler policy]: CAF's default work-stealing scheduler queues a message an actor
  // sends on the sender's own thread without waking anyone; an idle thread finds it only when it
  // next polls or steals. On 2 cores that often left a worker and the shards it talks to on one
  // thread while the other slept (train_throughput rounds at ~1.0x beside rounds at ~1.3x,
  // whatever the polling settings). The sharing policy keeps one queue for all threads and
  // wakes an idle thread on every enqueue, including those arriving from the network. Measured
  // interleaved on a quiet host (bench/README.md): train_throughput medians 1.31/1.29/1.43/1.36x
  // with sharing against 0.99/1.11/1.25/1.25x with tuned work stealing. Networked nodes
  // switch back to work stealing (ConfigureNetwork, Note [Scheduler on a networked node]).
  cfg.set("scheduler.policy", caf::atom("sharing"));
}

ClusterActors::ClusterActors(const ClusterOptions& options, std::optional<ClusterSpec> spec,
                             NetworkOptions network)
    : options_(options), spec_(std::move(spec)), network_(std::move(network)) {}

// The session actor (ClusterActors::session): the owner of the shards, it answers pings and passes
// a shard's lost backup on to the listener, or keeps it until there is one.
caf::behavior ClusterActors::Session(std::shared_ptr<BackupLosses> losses) {
  return {
      [](ping_atom) { return pong_atom::value; },
      [losses](backup_lost_atom, const std::string& shard, const caf::actor& backup) {
        absl::MutexLock lock(&losses->mu);
        if (losses->listener) {
          losses->listener(shard, backup.address());
        } else {
          losses->unheard.emplace_back(shard, backup.address());
        }
      },
  };
}

absl::StatusOr<std::unique_ptr<ClusterActors>> ClusterActors::StartInProcess(
    const ClusterOptions& options) {
  if (options.num_ps < 1 || options.num_workers < 1 || options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a cluster needs at least one PS and one worker (got ", options.num_ps,
                     " PS, ", options.num_workers, " workers, ", options.threads, " threads)"));
  }
  std::unique_ptr<ClusterActors> cluster(new ClusterActors(options, std::nullopt, {}));
  ConfigureActorSystem(cluster->config_, options.threads);
  cluster->system_ = std::make_unique<caf::actor_system>(cluster->config_);
  cluster->session_ = cluster->system_->spawn(Session, cluster->backup_losses_);
  {
    absl::MutexLock lock(&cluster->mu_);
    for (int32_t task = 0; task < options.num_ps; ++task) {
      cluster->ps_nodes_.push_back(SpawnPsNode(*cluster->system_, task));
    }
  }
  return cluster;
}

absl::StatusOr<std::unique_ptr<ClusterActors>> ClusterActors::Connect(const ClusterSpec& spec,
                                                                      const NetworkOptions& network,
                                                                      int32_t threads) {
  SetLogRole("coordinator");
  ClusterOptions options;
  options.num_ps = static_cast<int32_t>(spec.ps.size());
  options.num_workers = static_cast<int32_t>(spec.workers.size());
  options.threads = threads;
  std::unique_ptr<ClusterActors> cluster(new ClusterActors(options, spec, network));
  ConfigureActorSystem(cluster->config_, threads);
  TESSERA_RETURN_IF_ERROR(ConfigureNetwork(cluster->config_, network));
  cluster->system_ = std::make_unique<caf::actor_system>(cluster->config_);
  cluster->session_ = cluster->system_->spawn(Session, cluster->backup_losses_);
  {
    absl::MutexLock lock(&cluster->mu_);
    cluster->ps_addresses_ = spec.ps;
    cluster->ps_nodes_.resize(spec.ps.size());
  }
  for (int32_t task = 0; task < options.num_ps; ++task) {
    absl::StatusOr<caf::actor> node =
        ConnectToNode(*cluster->system_, spec.ps[task], "the coordinator", network,
                      kProtocolVersion, absl::StrCat("ps ", task));
    // A PS that cannot be reached is replaced by a standby, if the spec has one: so a
    // coordinator started again after a standby took over a task (the spec still names the
    // lost address) finds that standby, adopted as the task, among them.
    if (absl::IsUnavailable(node.status()) && !spec.ps_standby.empty()) {
      Log().warn("ps {}: {}; trying the standbys", task, node.status().message());
      TESSERA_RETURN_IF_ERROR(cluster->ReplacePs(task).status());
      continue;
    }
    if (!node.ok()) return node.status();
    absl::MutexLock lock(&cluster->mu_);
    cluster->ps_nodes_[task] = caf::actor_cast<ps_node_actor>(*node);
  }
  return cluster;
}

ps_node_actor ClusterActors::ps_node(int32_t task) const {
  absl::MutexLock lock(&mu_);
  return ps_nodes_.at(task);
}

std::vector<ps_node_actor> ClusterActors::ps_nodes() const {
  absl::MutexLock lock(&mu_);
  return ps_nodes_;
}

namespace {

// Connects to the PS node at `address` and adopts it as PS task `task` (a standby becomes that
// task; the task's own node, restarted, accepts its own task; another PS refuses).
absl::StatusOr<ps_node_actor> ConnectAndAdopt(caf::actor_system& system,
                                              const NodeAddress& address, int32_t task,
                                              const NetworkOptions& network) {
  TESSERA_ASSIGN_OR_RETURN(
      caf::actor gate_service,
      ConnectToNode(system, address, "the coordinator", network, kProtocolVersion));
  const auto node = caf::actor_cast<ps_node_actor>(gate_service);
  absl::Status adopted;
  caf::scoped_actor self(system);
  self->request(node, std::chrono::seconds(10), adopt_atom::value, task)
      .receive([] {}, [&](caf::error& err) { adopted = ErrorToStatus(err); });
  if (!adopted.ok()) return Annotate(adopted, address.ToString());
  return node;
}

}  // namespace

absl::StatusOr<ps_node_actor> ClusterActors::ReplacePs(int32_t task) {
  if (!networked()) return absl::FailedPreconditionError("an in-process PS cannot be replaced");
  if (task < 0 || task >= options_.num_ps) {
    return absl::InvalidArgumentError(absl::StrCat("no PS task ", task));
  }
  NetworkOptions standby_network = network_;
  standby_network.connect_timeout = std::min(network_.connect_timeout, absl::Seconds(5));
  for (;;) {
    std::optional<NodeAddress> standby;
    NodeAddress own;
    {
      absl::MutexLock lock(&mu_);
      if (standbys_tried_ < spec_->ps_standby.size()) {
        standby = spec_->ps_standby[standbys_tried_++];
      }
      own = ps_addresses_[task];
    }
    absl::StatusOr<ps_node_actor> node =
        ConnectAndAdopt(*system_, standby.value_or(own), task,
                        standby.has_value() ? standby_network : network_);
    if (!node.ok() && standby.has_value()) {
      Log().warn("standby {} passed over: {}", standby->ToString(), node.status().message());
      continue;
    }
    if (!node.ok()) return node.status();
    absl::MutexLock lock(&mu_);
    ps_nodes_[task] = *node;
    ps_addresses_[task] = standby.value_or(own);
    return *node;
  }
}

absl::StatusOr<ps_node_actor> ClusterActors::ReconnectPs(int32_t task, absl::Duration timeout) {
  if (!networked()) return absl::FailedPreconditionError("an in-process PS cannot be reconnected");
  if (task < 0 || task >= options_.num_ps) {
    return absl::InvalidArgumentError(absl::StrCat("no PS task ", task));
  }
  NetworkOptions network = network_;
  network.connect_timeout = std::min(network_.connect_timeout, timeout);
  NodeAddress address;
  {
    absl::MutexLock lock(&mu_);
    address = ps_addresses_[task];
  }
  TESSERA_ASSIGN_OR_RETURN(ps_node_actor node, ConnectAndAdopt(*system_, address, task, network));
  absl::MutexLock lock(&mu_);
  ps_nodes_[task] = node;
  return node;
}

std::vector<std::string> ClusterActors::ps_addresses() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> out;
  for (const NodeAddress& address : ps_addresses_) out.push_back(address.ToString());
  return out;
}

ClusterActors::~ClusterActors() {
  if (!networked()) {
    for (const ps_node_actor& node : ps_nodes_) {
      caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
    }
  }
  ps_nodes_.clear();
  if (session_) caf::anon_send_exit(session_, caf::exit_reason::user_shutdown);
  session_ = nullptr;
  system_.reset();  // waits for every actor
}

void ClusterActors::SetBackupLossListener(BackupLossListener listener) {
  absl::MutexLock lock(&backup_losses_->mu);
  backup_losses_->listener = std::move(listener);
  if (!backup_losses_->listener) return;
  for (const auto& [shard, backup] : backup_losses_->unheard)
    backup_losses_->listener(shard, backup);
  backup_losses_->unheard.clear();
}

bool ClusterActors::AwaitUnheardBackupLosses(size_t n, absl::Duration timeout) {
  BackupLosses& losses = *backup_losses_;
  absl::MutexLock lock(&losses.mu);
  // The session appends under this mutex, whose unlock re-evaluates the condition: no polling.
  auto kept = [&losses, n]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(losses.mu) { return losses.unheard.size() >= n; };
  return losses.mu.AwaitWithTimeout(absl::Condition(&kept), timeout);
}

// -- Cluster, the public handle
// --------------------------------------------------------------------

Cluster::Cluster(std::unique_ptr<ClusterActors> actors) : actors_(std::move(actors)) {}
Cluster::~Cluster() = default;

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::StartInProcess(const ClusterOptions& options) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ClusterActors> actors,
                           ClusterActors::StartInProcess(options));
  return std::unique_ptr<Cluster>(new Cluster(std::move(actors)));
}

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Connect(const ClusterSpec& spec,
                                                          const NetworkOptions& network,
                                                          int32_t threads) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<ClusterActors> actors,
                           ClusterActors::Connect(spec, network, threads));
  return std::unique_ptr<Cluster>(new Cluster(std::move(actors)));
}

const ClusterOptions& Cluster::options() const { return actors_->options(); }
bool Cluster::networked() const { return actors_->networked(); }
const std::optional<ClusterSpec>& Cluster::spec() const { return actors_->spec(); }
const NetworkOptions& Cluster::network() const { return actors_->network(); }
std::vector<std::string> Cluster::ps_addresses() const { return actors_->ps_addresses(); }

}  // namespace tessera
