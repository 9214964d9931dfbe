// Fault injection for tests, kept out of Cluster's API: killing a PS node. Header-only: nothing
// but the tests that include it carries it.
//
// Example:
//   REQUIRE(testing::KillPs(*cluster, 1).ok());
//
// Thread-safety: safe from any thread, as Cluster's accessors.
#pragma once

#include <caf/exit_reason.hpp>
#include <caf/send.hpp>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cluster/base/cluster.h"

namespace tessera::testing {

// Kills PS node `task` of `cluster` and every shard on it. InvalidArgument for a task out of
// range.
inline absl::Status KillPs(Cluster& cluster, int32_t task) {
  if (task < 0 || task >= cluster.num_ps()) {
    return absl::InvalidArgumentError(
        absl::StrCat("no PS task ", task, " (the cluster has ", cluster.num_ps(), ")"));
  }
  caf::anon_send_exit(cluster.actors().ps_node(task), caf::exit_reason::kill);
  return absl::OkStatus();
}

}  // namespace tessera::testing
