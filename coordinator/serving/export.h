// Export of a model trained under a ParameterServerStrategy (docs/design.md §3.9): the model
// graph, its serving signature and every variable merged into one unsharded tensor
// (schema/serving/model_io.h), streamed from the shards. `tessera serve` (serving/) answers
// predictions from it without the training code, and RestoreCheckpoint takes it as a checkpoint.
//
// Thread-safety: call from the driver's thread; shards serialize their own work.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/ps/strategy.h"
#include "core/model/model.h"
#include "tessera/env.h"

namespace tessera {

// Exports `model` with the current values of `strategy`'s variables (one per parameter) into
// `dir` (created if missing), through `env`, streaming: each variable is read from its shards a
// few MiB of rows at a time and written as it arrives, so the coordinator never holds a whole
// variable. InvalidArgument naming the variable and row when a value is NaN or infinite; on any
// error no model file is left (and `dir` is removed if this call created it). `text_inputs`: the
// description's (TextInputs of the training data).
absl::Status ExportModel(const ParameterServerStrategy& strategy, const Model& model,
                         const std::string& dir, int64_t global_step, Env* env = Env::Default(),
                         std::vector<std::string> text_inputs = {});

}  // namespace tessera
