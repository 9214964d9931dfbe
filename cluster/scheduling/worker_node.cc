#include "cluster/scheduling/worker_node.h"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/exit_reason.hpp>
#include <caf/scoped_actor.hpp>
#include <caf/system_messages.hpp>
#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "actors/base/error.h"
#include "actors/scheduling/worker_actor.h"
#include "cluster/base/cluster.h"
#include "core/base/logging.h"
#include "tessera/status.h"

namespace tessera {
namespace {

constexpr auto kRequestTimeout = std::chrono::seconds(30);
// Between two attempts to fetch the directory or join while the coordinator restores a PS.
constexpr auto kRetryPause = std::chrono::milliseconds(200);
// One attempt to reach a PS the directory names; then the directory is fetched again.
constexpr absl::Duration kPsConnectAttempt = absl::Seconds(2);

// What ended one membership of the worker.
// kRetry: not now (a PS is being restored, or the directory changed); ask again, quietly.
enum class Ending { kFinished, kRejoin, kRetry, kTaskTaken, kCoordinatorLost };

// A request to the coordinator from a blocking actor.
template <class T, class... Args>
absl::StatusOr<T> Ask(caf::scoped_actor& self, const caf::actor& coordinator, Args... args) {
  absl::StatusOr<T> out = absl::InternalError("no reply");
  self->request(coordinator, kRequestTimeout, args...)
      .receive([&](T& value) { out = std::move(value); },
               [&](caf::error& err) { out = ErrorToStatus(err); });
  return out;
}

// What the coordinator's exit (or the worker's, which the coordinator stopped) with `reason`
// means: finished (user_shutdown), the run failed (a Tessera error: the coordinator's
// failure, returned as this process's error), or the coordinator was lost (anything else).
absl::StatusOr<Ending> CoordinatorExited(const caf::error& reason) {
  if (reason == caf::exit_reason::user_shutdown) return Ending::kFinished;
  if (reason.category() == kErrorCategory) return ErrorToStatus(reason);
  return Ending::kCoordinatorLost;
}

// Waits `pause` (0: only looks at what has arrived) unless the coordinator, which `self`
// monitors, exits meanwhile: then what its exit means.
std::optional<absl::StatusOr<Ending>> PauseUnlessCoordinatorExits(caf::scoped_actor& self,
                                                                   const caf::actor& coordinator,
                                                                   std::chrono::milliseconds pause) {
  std::optional<absl::StatusOr<Ending>> out;
  const auto until = std::chrono::steady_clock::now() + pause;
  for (;;) {
    const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                   until - std::chrono::steady_clock::now()),
                               std::chrono::milliseconds(0));
    bool timed_out = false;
    self->receive(
        [&](caf::down_msg& down) {
          if (down.source == coordinator.address()) out = CoordinatorExited(down.reason);
        },
        caf::after(left) >> [&] { timed_out = true; });
    if (out.has_value() || timed_out) return out;
  }
}

// One membership: fetch the directory, connect to its PS nodes, build the functions, spawn the
// worker, join, and wait until the worker is stopped (rejoin) or the coordinator finishes or
// fails. The coordinator is monitored throughout, so that a pause between attempts ends as soon
// as it exits.
absl::StatusOr<Ending> Serve(caf::actor_system& system, const caf::actor& coordinator,
                             const std::string& me, const WorkerNodeOptions& options,
                             const RegistryBuilder& build) {
  caf::scoped_actor self(system);
  self->monitor(coordinator);
  absl::StatusOr<VariableDirectory> directory =
      Ask<VariableDirectory>(self, coordinator, directory_atom::value, options.task, options.job);
  if (absl::IsUnavailable(directory.status())) {  // a PS is being restored: its shards move
    if (auto exited = PauseUnlessCoordinatorExits(self, coordinator, kRetryPause)) {
      return *exited;
    }
    return Ending::kRetry;
  }
  if (!directory.ok()) return directory.status();
  // Every PS the directory names, where it is now (a standby may have replaced one, and a
  // restarted PS is a new node): the shard handles are reached over these direct connections
  // rather than through the coordinator. The coordinator checked who they are. One that cannot
  // be reached was lost after the directory was fetched: the coordinator restores it (or gives
  // up, and then fails the run), and the next directory says where it is. So an attempt is
  // short (kPsConnectAttempt): waiting the whole connect timeout for a dead PS kept a worker of
  // a failed run alive long after its coordinator had exited.
  NetworkOptions attempt = options.network;
  attempt.connect_timeout = std::min(attempt.connect_timeout, kPsConnectAttempt);
  for (const std::string& text : directory->ps_addresses) {
    if (text.empty()) continue;  // a lost PS whose shards' backups took over
    TESSERA_ASSIGN_OR_RETURN(NodeAddress address, ParseNodeAddress(text));
    absl::Status reached = ConnectToNode(system, address, me, attempt, kProtocolVersion).status();
    if (absl::IsUnavailable(reached)) {
      Log().warn("{}", reached.message());
      if (auto exited = PauseUnlessCoordinatorExits(self, coordinator, kRetryPause)) {
        return *exited;
      }
      return Ending::kRetry;
    }
    TESSERA_RETURN_IF_ERROR(reached);
  }
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const FunctionRegistry> registry, build(*directory));
  worker_actor worker =
      SpawnWorker(system, WorkerInfo{options.task, directory->num_workers}, std::move(registry));
  self->monitor(worker);
  absl::StatusOr<int32_t> joined = Ask<int32_t>(self, coordinator, join_atom::value, worker,
                                                options.task, directory->generation);
  if (!joined.ok()) {
    self->send_exit(worker, caf::exit_reason::user_shutdown);
    // Recovering, or the directory changed between fetch and join: try again shortly.
    if (absl::IsUnavailable(joined.status()) || absl::IsFailedPrecondition(joined.status())) {
      if (auto exited = PauseUnlessCoordinatorExits(self, coordinator, kRetryPause)) {
        return *exited;
      }
      return Ending::kRetry;
    }
    // Our task is taken: by a process that just died (wait for the coordinator to notice), or
    // by a second process started with the same --task (give up after the connect timeout).
    if (absl::IsAlreadyExists(joined.status())) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      return Ending::kTaskTaken;
    }
    return joined.status();
  }
  Log().info("joined the coordinator (directory generation {})", directory->generation);
  absl::StatusOr<Ending> ending = Ending::kFinished;
  bool waiting = true;
  self->receive_while([&] { return waiting; })([&](caf::down_msg& down) {
    waiting = false;
    if (down.source == worker.address()) {
      // The coordinator stops its workers with user_shutdown when it is done, with the run's
      // failure when it failed, and with kill when they must join again (shards moved, or a
      // slot was taken over).
      const bool told = down.reason == caf::exit_reason::user_shutdown ||
                        down.reason.category() == kErrorCategory;
      ending = told ? CoordinatorExited(down.reason) : Ending::kRejoin;
      return;
    }
    self->send_exit(worker, caf::exit_reason::user_shutdown);
    ending = CoordinatorExited(down.reason);
    if (ending.ok() && *ending == Ending::kCoordinatorLost) {
      Log().warn("lost the coordinator ({}); waiting for it to come back",
                 system.render(down.reason));
    }
  });
  return ending;
}

}  // namespace

std::map<std::string, VariableHandle> HandlesByName(const VariableDirectory& directory) {
  std::map<std::string, VariableHandle> out;
  for (const VariableHandle& handle : directory.variables) out.emplace(handle.name, handle);
  return out;
}

absl::Status RunWorkerNode(const WorkerNodeOptions& options, const RegistryBuilder& build) {
  const ClusterSpec& spec = options.spec;
  if (options.task < 0 || options.task >= static_cast<int32_t>(spec.workers.size())) {
    return absl::InvalidArgumentError(absl::StrCat("--task=", options.task,
                                                   " is not a worker of the cluster spec (it lists ",
                                                   spec.workers.size(), ")"));
  }
  caf::actor_system_config config;
  ConfigureActorSystem(config, options.threads);
  TESSERA_RETURN_IF_ERROR(ConfigureNetwork(config, options.network));
  caf::actor_system system(config);
  const std::string me = absl::StrCat("worker ", options.task);
  SetLogRole(me);
  // Note [A worker watches its coordinator between memberships]
  // A membership can end just before the coordinator does: stopped to join again because a PS
  // was lost, when the PS then cannot be restored and the run fails, or while the coordinator is
  // restoring. Reaching for the coordinator again then finds it gone, and waiting for one to
  // come back (what a worker does for a coordinator that crashed) kept a worker of a failed run
  // alive for the whole connect timeout. So the coordinator this process last served stays
  // monitored (by `watcher`), and between memberships the worker tries to reach it again in
  // short attempts, looking in between for its down message: finished (user_shutdown) ends the
  // process with OK, a failed run with the run's error, a lost one (a crash) is waited for.
  caf::scoped_actor watcher(system);
  caf::actor served;  // the coordinator last served, while its exit has not been seen
  std::optional<absl::Time> taken_since;  // when the coordinator first said our task was taken
  for (;;) {
    NetworkOptions attempt = options.network;
    const absl::Time deadline = absl::Now() + options.network.connect_timeout;
    if (served) attempt.connect_timeout = std::min(attempt.connect_timeout, absl::Seconds(1));
    absl::StatusOr<caf::actor> coordinator;
    for (;;) {
      if (served) {
        std::optional<absl::StatusOr<Ending>> exited =
            PauseUnlessCoordinatorExits(watcher, served, std::chrono::milliseconds(0));
        if (exited.has_value()) {
          if (!exited->ok()) return exited->status();
          if (**exited == Ending::kFinished) {
            Log().info("the coordinator finished; exiting");
            return absl::OkStatus();
          }
          served = caf::actor();  // lost: wait for another, as for a crashed one
        }
      }
      coordinator = ConnectToNode(system, spec.coordinator, me, attempt, kProtocolVersion,
                                  "the coordinator");
      if (coordinator.ok() || !absl::IsUnavailable(coordinator.status()) ||
          absl::Now() >= deadline) {
        break;
      }
    }
    if (absl::IsUnavailable(coordinator.status())) {
      // The likeliest mistake: a coordinator of the mirrored strategy listens nowhere (it
      // connects to its workers), so a parameter-server worker waits for it in vain.
      return absl::UnavailableError(absl::StrCat(
          coordinator.status().message(),
          " (is the coordinator running, with the parameter-server strategy? Under "
          "--strategy=mirrored the workers listen and the coordinator connects to them)"));
    }
    TESSERA_RETURN_IF_ERROR(coordinator.status());
    if (*coordinator != served) {
      watcher->monitor(*coordinator);
      served = *coordinator;
    }
    TESSERA_ASSIGN_OR_RETURN(Ending ending, Serve(system, *coordinator, me, options, build));
    if (ending == Ending::kTaskTaken) {
      if (!taken_since.has_value()) taken_since = absl::Now();
      if (absl::Now() - *taken_since > options.network.connect_timeout) {
        return absl::AlreadyExistsError(absl::StrCat(
            me, ": another process serves this task (is --task right?)"));
      }
      continue;
    }
    taken_since.reset();
    if (ending == Ending::kFinished) {
      Log().info("the coordinator finished; exiting");
      return absl::OkStatus();
    }
    if (ending == Ending::kRejoin) Log().info("joining again");
  }
}

}  // namespace tessera
