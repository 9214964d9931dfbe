// `tessera predict`: JSON lines of instances in, JSON lines of predictions out.
//
//   $ tessera predict --model /tmp/recsys_export --input requests.jsonl
//   input line   {"user": 3, "item": 7}
//   output line  {"logits":[0.31],"probability":[0.577]}
//
// Each non-blank input line is one instance of the model's serving_default signature
// (instances.h); each output line is that instance's prediction, always an object of output name
// -> row of floats. Blank lines are skipped, so output line k answers the k-th non-blank line.
//
// Thread-safety: pure functions over streams.
#pragma once

#include <istream>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "core/serving/exported_model.h"

namespace tessera::cli {

// Predicts every instance of `in` and writes the predictions to `out`. Every line is read and
// checked before any prediction is written, so a bad input writes nothing: InvalidArgument
// "line N: ..." (1-based) for the first bad line; DataLoss when reading fails; Unavailable when
// writing fails.
absl::Status PredictJsonLines(const Predictor& predictor, std::istream& in, std::ostream& out);

// The command: loads the model exported in `model_dir` (LoadPredictor's errors) and predicts the
// JSON lines of the file `input` ("-": standard input) to `out`. NotFound when `input` cannot be
// opened.
absl::Status RunPredict(const std::string& model_dir, const std::string& input, std::ostream& out);

}  // namespace tessera::cli
