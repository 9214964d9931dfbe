// The coordinator's view of its PS nodes right now: each node's stats (actors/ps/ps_node_actor.h,
// stats_atom) asked of every node at once, for the dashboard and anyone else who wants to see the
// cluster while it trains.
//
//   for (const PsNodeStatus& ps : QueryPsStatus(cluster, absl::Seconds(2))) {
//     if (!ps.reachable) std::cout << "ps " << ps.task << ": " << ps.error << "\n";
//     else std::cout << "ps " << ps.task << ": " << ps.stats.bytes << " bytes\n";
//   }
//
// Note [Bounded status queries]
// A status page must answer even when the cluster is in trouble, so QueryPsStatus never waits
// longer than its timeout in all: every node is asked at once (one request each, from one helper
// actor that monitors every node), and the caller waits for the answers until the deadline, then
// reports whoever has not answered as unreachable. A dead node (in process: killed; networked:
// its connection lost) answers at once with an error or its down message; a hung one costs the
// timeout, once. A node that fails never hides the others' answers.
//
// Thread-safety: QueryPsStatus may be called from any thread but a CAF scheduler thread of the
// cluster's system (it blocks), concurrently with training.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "actors/base/messages.h"
#include "cluster/base/cluster.h"

namespace tessera {

struct PsNodeStatus {
  int32_t task = 0;     // the PS task index
  std::string address;  // networked: "host:port" (cluster.ps_addresses()); in process: empty
  bool reachable = false;
  std::string error;  // why not, when unreachable ("ps 1 did not answer within 2s", ...)
  PsNodeStats stats;  // when reachable: what the node holds (each shard's hottest rows included)
};

// Every PS node's status, in task order, within `timeout` in all (Note [Bounded status
// queries]); each shard's `hottest_rows` hottest rows (clamped to [0, kMaxHottestRows]).
std::vector<PsNodeStatus> QueryPsStatus(Cluster& cluster, absl::Duration timeout,
                                        int32_t hottest_rows = kDefaultHottestRows);

}  // namespace tessera
