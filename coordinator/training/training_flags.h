// What the shared training flags need beside tessera/training.h, which declares them
// (TrainingFlags, ReadTrainingFlags, TrainingFlagGroups): the loopback test of --bind and
// --dashboard_host, and the log level flags every Tessera program applies.
//
// Thread-safety: call ApplyLogLevelFlags after absl::ParseCommandLine, from the main thread.
#pragma once

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tessera/training.h"

namespace tessera {

// Whether `host` names this machine's loopback interface ("localhost", "::1", "127.x.y.z").
bool IsLoopbackHost(absl::string_view host);

// Applies --log_level and -v (= --log_level=debug) to the process's logger (core/base/logging.h);
// InvalidArgument naming the flag for a level ParseLogLevel refuses, or -v with another level.
absl::Status ApplyLogLevelFlags();

}  // namespace tessera
