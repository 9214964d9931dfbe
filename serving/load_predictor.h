// LoadPredictor: an exported model directory (schema/serving/model_io.h) made ready to serve.
//
// Thread-safety: a pure function over files.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/serving/exported_model.h"
#include "tessera/env.h"

namespace tessera::serving {

// Opens dir/model.tsr (mapped: only its header, message and checksum table are read, and its
// dense variables verified) and builds its Predictor. OpenExportedModel's errors (NotFound
// without a model, DataLoss / InvalidArgument for bad content) and Predictor::Create's, each
// prefixed with the directory.
absl::StatusOr<std::unique_ptr<Predictor>> LoadPredictor(const std::string& dir,
                                                         Env* env = Env::Default());

}  // namespace tessera::serving
