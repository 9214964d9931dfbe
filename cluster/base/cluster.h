// ClusterActors: what stands behind a Cluster (tessera/cluster.h) — the CAF actor system, the PS
// nodes (in process: spawned there; networked: the PS processes connected to), and the session
// actor that owns every shard the cluster's strategies create. Cluster::actors() reaches it.
//
// Shutdown: the destructor stops the in-process PS nodes (their shards follow; remote PS
// processes keep running) and waits for the actor system; a ClusterCoordinator on this cluster
// must be destroyed first.
//
// Thread-safety: Start/Connect and the destructor on one thread; the accessors are safe from any
// thread (ReplacePs may swap a node while others read).
// Tests kill a PS node through cluster/base/testing.h.
#pragma once

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/behavior.hpp>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "actors/ps/ps_node_actor.h"
#include "cluster/network/network.h"
#include "tessera/cluster.h"

namespace tessera {

// Registers Tessera's types and sets the scheduler every Tessera node uses (`threads`, 0: one per
// core), CAF's sharing scheduler policy (Note [Scheduler policy] in cluster.cc; ConfigureNetwork
// replaces it for networked nodes) and a quiet CAF logger.
void ConfigureActorSystem(caf::actor_system_config& cfg, int32_t threads = 0);

class ClusterActors {
 public:
  // InvalidArgument when num_ps or num_workers is < 1 or threads < 0.
  static absl::StatusOr<std::unique_ptr<ClusterActors>> StartInProcess(
      const ClusterOptions& options);
  // The coordinator of a networked cluster: connects to every PS of `spec` (waiting up to
  // network.connect_timeout for each; one that cannot be reached is replaced by a standby of the
  // spec, as ReplacePs does); one worker slot per worker of the spec. Names this process's log
  // role "coordinator". Errors as ConnectToNode, or ConfigureNetwork's.
  static absl::StatusOr<std::unique_ptr<ClusterActors>> Connect(const ClusterSpec& spec,
                                                                const NetworkOptions& network,
                                                                int32_t threads = 0);
  ~ClusterActors();

  ClusterActors(const ClusterActors&) = delete;
  ClusterActors& operator=(const ClusterActors&) = delete;

  caf::actor_system& system() { return *system_; }
  const ClusterOptions& options() const { return options_; }
  int32_t num_ps() const { return options_.num_ps; }
  int32_t num_workers() const { return options_.num_workers; }
  ps_node_actor ps_node(int32_t task) const;
  std::vector<ps_node_actor> ps_nodes() const;
  // The owner of every shard this cluster's strategies create: it lives as long as the Cluster,
  // and a PS node drops the shards of an owner that is gone (Note [Shards die with their
  // coordinator] in actors/ps/ps_node_actor.h).
  const caf::actor& session() const { return session_; }
  // What the session hears when a shard's backup failed (Note [A lost backup is struck before
  // the primary acknowledges alone], actors/ps/shard_actor.h): the primary's name and the lost
  // backup. The listener runs on an actor thread and must not block; null: nobody listens. What
  // the session hears while nobody listens (the shards exist before their coordinator) is kept
  // and handed to the next listener set.
  using BackupLossListener =
      std::function<void(const std::string& shard, const caf::actor_addr& backup)>;
  void SetBackupLossListener(BackupLossListener listener);
  // Waits until the session keeps at least `n` losses heard while nobody listened (true), or
  // `timeout` passes (false): how a test knows a loss has arrived before it sets a listener.
  bool AwaitUnheardBackupLosses(size_t n, absl::Duration timeout);

  // Networked mode: the spec and options it was connected with (nullopt in process).
  bool networked() const { return spec_.has_value(); }
  const std::optional<ClusterSpec>& spec() const { return spec_; }
  const NetworkOptions& network() const { return network_; }

  // Networked mode: a node for PS task `task` in place of its lost one, made that task's node:
  // the first standby of the spec not tried yet, adopted as `task` (a standby that cannot be
  // reached within 5 s or refuses is passed over), or else a PS at the task's address again (a
  // restarted process, waited for up to the connect timeout). Errors as ConnectToNode;
  // FailedPrecondition in process.
  absl::StatusOr<ps_node_actor> ReplacePs(int32_t task);
  // Networked mode: PS task `task`'s node where it is now, connected afresh (a connection lost
  // while its process lives on: the coordinator was stopped or stalled), within `timeout`, and
  // made the task's node. Errors as ConnectToNode; FailedPrecondition in process.
  absl::StatusOr<ps_node_actor> ReconnectPs(int32_t task, absl::Duration timeout);
  // Networked mode: where each PS task is now (its spec address, or the standby that replaced
  // it), as "host:port".
  std::vector<std::string> ps_addresses() const;

 private:
  ClusterActors(const ClusterOptions& options, std::optional<ClusterSpec> spec,
                NetworkOptions network);

  ClusterOptions options_;
  std::optional<ClusterSpec> spec_;
  NetworkOptions network_;
  caf::actor_system_config config_;  // must outlive system_
  std::unique_ptr<caf::actor_system> system_;
  caf::actor session_;
  struct BackupLosses {
    absl::Mutex mu;
    BackupLossListener listener ABSL_GUARDED_BY(mu);
    std::vector<std::pair<std::string, caf::actor_addr>> unheard ABSL_GUARDED_BY(mu);
  };
  std::shared_ptr<BackupLosses> backup_losses_ = std::make_shared<BackupLosses>();
  static caf::behavior Session(std::shared_ptr<BackupLosses> losses);
  mutable absl::Mutex mu_;
  std::vector<ps_node_actor> ps_nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<NodeAddress> ps_addresses_ ABSL_GUARDED_BY(mu_);  // networked mode
  size_t standbys_tried_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace tessera
