#include "cli/internal/predict_command.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "cli/internal/instances.h"
#include "cli/internal/json.h"
#include "cli/internal/load_predictor.h"
#include "core/status.h"

namespace tessera::cli {
namespace {

// Instances per Predict call: large enough to amortize a call, small enough that activations of
// a big file are not all alive at once.
constexpr int64_t kChunk = 1024;

}  // namespace

absl::Status PredictJsonLines(const Predictor& predictor, std::istream& in, std::ostream& out) {
  ASSIGN_OR_RETURN(const auto formats, ModelInstanceFormats(predictor.model()));
  const InstanceFormat& format = formats.at(kServingDefault);

  // Read and check everything first: a bad line must not leave half the output written.
  std::vector<Batch> batches;
  BatchBuilder builder(format);
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<Json> instance = ParseJson(line);
    absl::Status status = instance.ok() ? builder.Add(*instance) : instance.status();
    RETURN_IF_ERROR(Annotate(status, absl::StrCat("line ", number)));
    if (builder.size() == kChunk) batches.push_back(builder.Take());
  }
  if (in.bad()) return absl::DataLossError("reading the input failed");
  if (builder.size() > 0) batches.push_back(builder.Take());

  for (const Batch& batch : batches) {
    ASSIGN_OR_RETURN(const auto outputs, predictor.Predict(batch));
    ASSIGN_OR_RETURN(const Json rows, PredictionRows(outputs, format, batch.size,
                                                     /*bare_single_output=*/false));
    for (const Json& row : rows) out << DumpJson(row) << '\n';
  }
  out.flush();
  if (!out) return absl::UnavailableError("writing the predictions failed");
  return absl::OkStatus();
}

absl::Status RunPredict(const std::string& model_dir, const std::string& input, std::ostream& out) {
  ASSIGN_OR_RETURN(const std::unique_ptr<Predictor> predictor, LoadPredictor(model_dir));
  if (input == "-") return Annotate(PredictJsonLines(*predictor, std::cin, out), "stdin");
  std::ifstream file(input);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot open input '", input, "': ", std::strerror(errno)));
  }
  return Annotate(PredictJsonLines(*predictor, file, out), input);
}

}  // namespace tessera::cli
