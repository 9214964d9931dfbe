#include "coordinator/cluster.h"

#include <caf/atom.hpp>
#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <algorithm>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "actors/messages.h"

namespace tessera {

InProcessCluster::InProcessCluster(const ClusterOptions& options) : options_(options) {
  RegisterTesseraTypes(config_);
  config_.set("logger.file-verbosity", caf::atom("quiet"));
  config_.set("logger.console-verbosity", caf::atom("quiet"));
  // One scheduler thread per core: CAF's default, max(cores, 4), oversubscribes small machines
  // (on 2 cores a training step's compute took 350 us instead of 265 us).
  const int32_t cores = static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
  config_.set("scheduler.max-threads", static_cast<size_t>(options.threads > 0 ? options.threads
                                                                                 : cores));
  // Note [Prompt work stealing]: a message sent by an actor is queued on its sender's thread
  // without waking anyone, and CAF's default idle thread steals only every few milliseconds of
  // sleep, so a worker's gradients and its shards' updates end up on one core. Idle threads poll
  // briefly, then steal at every short sleep instead.
  config_.set("work-stealing.moderate-poll-attempts", size_t{2000});
  config_.set("work-stealing.moderate-steal-interval", size_t{1});
  config_.set("work-stealing.moderate-sleep-duration", caf::timespan{std::chrono::microseconds(20)});
  config_.set("work-stealing.relaxed-steal-interval", size_t{1});
  config_.set("work-stealing.relaxed-sleep-duration", caf::timespan{std::chrono::milliseconds(1)});
  system_ = std::make_unique<caf::actor_system>(config_);
  for (int32_t task = 0; task < options.num_ps; ++task) {
    ps_nodes_.push_back(SpawnPsNode(*system_, task));
  }
}

absl::StatusOr<std::unique_ptr<InProcessCluster>> InProcessCluster::Start(
    const ClusterOptions& options) {
  if (options.num_ps < 1 || options.num_workers < 1 || options.threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a cluster needs at least one PS and one worker (got ", options.num_ps,
                     " PS, ", options.num_workers, " workers, ", options.threads, " threads)"));
  }
  return std::unique_ptr<InProcessCluster>(new InProcessCluster(options));
}

InProcessCluster::~InProcessCluster() {
  for (const ps_node_actor& node : ps_nodes_) {
    caf::anon_send_exit(node, caf::exit_reason::user_shutdown);
  }
  ps_nodes_.clear();
  system_.reset();  // waits for every actor
}

absl::Status InProcessCluster::KillPs(int32_t task) {
  if (task < 0 || task >= options_.num_ps) {
    return absl::InvalidArgumentError(
        absl::StrCat("no PS task ", task, " (the cluster has ", options_.num_ps, ")"));
  }
  caf::anon_send_exit(ps_nodes_[task], caf::exit_reason::kill);
  return absl::OkStatus();
}

}  // namespace tessera
