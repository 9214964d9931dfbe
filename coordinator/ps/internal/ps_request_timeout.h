// How long the strategy waits for a PS node's answer to a shard request (create_shard,
// backup_atom, reclaim_atom): shared by strategy.cc, backups.cc and readoption.cc.
//
// Thread-safety: a constant.
#pragma once

#include <chrono>

namespace tessera::internal {

// Creating or dropping a shard is quick (a large one is initialized in well under a minute, all
// of a node's at once); a PS process that dies in the middle never answers, so the wait is
// bounded.
inline constexpr auto kPsRequestTimeout = std::chrono::minutes(2);

}  // namespace tessera::internal
