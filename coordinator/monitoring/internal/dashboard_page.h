// The dashboard's page (coordinator/monitoring/dashboard.h): one HTML document with its style and script
// inline and no external resource, so it works on a machine without internet. The script polls
// /api/run and /api/cluster every second and redraws: the run's headline figures, the loss,
// throughput and evaluation curves (SVG), the PS nodes and their shards (updates/s from the
// change of each shard's version between polls), the workers, and the events (checkpoints,
// recoveries). Elements carry ids the browser test reads (tests/e2e/dashboard.sh).
#pragma once

namespace tessera::internal {

extern const char kDashboardPage[];

}  // namespace tessera::internal
