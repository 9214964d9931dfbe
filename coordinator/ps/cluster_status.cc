#include "coordinator/ps/cluster_status.h"

#include <caf/event_based_actor.hpp>
#include <caf/sec.hpp>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "actors/base/error.h"

namespace tessera {
namespace {

// What the helper actor and the waiting caller share (the caller may leave before the actor is
// done: Note [Bounded status queries]).
struct Answers {
  absl::Mutex mu;
  std::vector<PsNodeStatus> status ABSL_GUARDED_BY(mu);
  std::vector<bool> settled ABSL_GUARDED_BY(mu);
  size_t left ABSL_GUARDED_BY(mu) = 0;
};

// Records node k's answer unless it has one already; true when every node has answered.
bool Settle(Answers& answers, size_t k, bool reachable, std::string error, PsNodeStats stats) {
  absl::MutexLock lock(&answers.mu);
  if (answers.settled[k]) return answers.left == 0;
  answers.settled[k] = true;
  --answers.left;
  PsNodeStatus& status = answers.status[k];
  status.reachable = reachable;
  status.error = std::move(error);
  status.stats = std::move(stats);
  return answers.left == 0;
}

std::string NoAnswer(int32_t task, absl::Duration timeout) {
  return absl::StrCat("ps ", task, " did not answer within ", absl::FormatDuration(timeout));
}

}  // namespace

std::vector<PsNodeStatus> QueryPsStatus(Cluster& cluster, absl::Duration timeout,
                                        int32_t hottest_rows) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::vector<ps_node_actor> nodes = cluster.actors().ps_nodes();
  const std::vector<std::string> addresses =
      cluster.networked() ? cluster.ps_addresses() : std::vector<std::string>{};
  auto answers = std::make_shared<Answers>();
  {
    absl::MutexLock lock(&answers->mu);
    answers->status.resize(nodes.size());
    answers->settled.assign(nodes.size(), false);
    answers->left = nodes.size();
    for (size_t k = 0; k < nodes.size(); ++k) {
      answers->status[k].task = static_cast<int32_t>(k);
      if (k < addresses.size()) answers->status[k].address = addresses[k];
    }
  }
  if (nodes.empty()) return {};
  const auto wait = std::chrono::microseconds(
      std::max<int64_t>(1, absl::ToInt64Microseconds(std::max(timeout, absl::ZeroDuration()))));
  // The spawned function takes an argument besides `self`: CAF 0.17 dereferences a null
  // argument tuple when there is none (coordinator/ps/internal/await.h).
  cluster.actors().system().spawn(
      [nodes, answers, wait, timeout, hottest_rows](caf::event_based_actor* self, int) {
        auto settle = [self, answers](size_t k, bool reachable, std::string error,
                                      PsNodeStats stats) {
          if (Settle(*answers, k, reachable, std::move(error), std::move(stats))) self->quit();
        };
        // A networked node that is gone drops requests without an answer: its down message is
        // what tells (Note [A restarted node behind a cached proxy], cluster/network/network.cc).
        self->set_down_handler([self, nodes, settle](caf::down_msg& down) {
          for (size_t k = 0; k < nodes.size(); ++k) {
            if (nodes[k].address() == down.source) {
              settle(k, false,
                     absl::StrCat("ps ", k, " is down (", self->system().render(down.reason), ")"),
                     PsNodeStats{});
            }
          }
        });
        for (size_t k = 0; k < nodes.size(); ++k) {
          const auto task = static_cast<int32_t>(k);
          if (!nodes[k]) {
            settle(k, false, absl::StrCat("ps ", task, " has no node"), PsNodeStats{});
            continue;
          }
          self->monitor(nodes[k]);
          self->request(nodes[k], wait, stats_atom::value, hottest_rows)
              .then(
                  [settle, k](PsNodeStats& stats) { settle(k, true, "", std::move(stats)); },
                  [settle, k, task, timeout](caf::error& err) {
                    settle(k, false,
                           err == caf::sec::request_timeout
                               ? NoAnswer(task, timeout)
                               : absl::StrCat("ps ", task, ": ", ErrorToStatus(err).message()),
                           PsNodeStats{});
                  });
        }
      },
      0);
  absl::MutexLock lock(&answers->mu);
  answers->mu.AwaitWithDeadline(absl::Condition(
                                    +[](size_t* left) { return *left == 0; }, &answers->left),
                                deadline);
  std::vector<PsNodeStatus> out = answers->status;
  for (size_t k = 0; k < out.size(); ++k) {
    if (!answers->settled[k]) {
      out[k].reachable = false;
      out[k].error = NoAnswer(out[k].task, timeout);
    }
  }
  return out;
}

}  // namespace tessera
