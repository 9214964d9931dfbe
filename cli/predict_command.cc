#include "cli/predict_command.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "serving/instances.h"
#include "serving/json.h"
#include "serving/load_predictor.h"
#include "tessera/status.h"

namespace tessera::cli {

using serving::BatchBuilder;
using serving::DumpJson;
using serving::InstanceFormat;
using serving::Json;
using serving::LoadPredictor;
using serving::ModelInstanceFormats;
using serving::ParseJson;
using serving::PredictionRows;
namespace {

// Instances per Predict call: large enough to amortize a call, small enough that activations of
// a big file are not all alive at once.
constexpr int64_t kChunk = 1024;

}  // namespace

absl::Status PredictJsonLines(const Predictor& predictor, std::istream& in, std::ostream& out) {
  TESSERA_ASSIGN_OR_RETURN(const auto formats, ModelInstanceFormats(predictor.model()));
  const InstanceFormat& format = formats.at(kServingDefault);

  // Read and check everything first: a bad line must not leave half the output written.
  std::vector<Batch> batches;
  std::vector<std::vector<int64_t>> line_numbers;  // per batch, the line of each example
  BatchBuilder builder(format);
  std::vector<int64_t> lines;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    absl::StatusOr<Json> instance = ParseJson(line);
    absl::Status status = instance.ok() ? builder.Add(*instance) : instance.status();
    TESSERA_RETURN_IF_ERROR(Annotate(status, absl::StrCat("line ", number)));
    lines.push_back(number);
    if (builder.size() == kChunk) {
      batches.push_back(builder.Take());
      line_numbers.push_back(std::move(lines));
      lines.clear();
    }
  }
  if (in.bad()) return absl::DataLossError("reading the input failed");
  if (builder.size() > 0) {
    batches.push_back(builder.Take());
    line_numbers.push_back(std::move(lines));
  }

  // Every prediction before any output: a batch that fails (an output driven to infinity, a
  // corrupt row) must not leave the earlier batches' lines written either.
  std::vector<std::string> written;
  for (size_t b = 0; b < batches.size(); ++b) {
    const Batch& batch = batches[b];
    const std::vector<int64_t>& numbers = line_numbers[b];
    absl::StatusOr<std::map<std::string, Tensor>> predicted = predictor.Predict(batch);
    TESSERA_RETURN_IF_ERROR(
        Annotate(predicted.status(), absl::StrCat("lines ", numbers.front(), "-", numbers.back())));
    TESSERA_ASSIGN_OR_RETURN(const Json rows, PredictionRows(*predicted, format, batch.size,
                                                             /*bare_single_output=*/false));
    for (const Json& row : rows) written.push_back(DumpJson(row));
  }
  for (const std::string& row : written) out << row << '\n';
  out.flush();
  if (!out) return absl::UnavailableError("writing the predictions failed");
  return absl::OkStatus();
}

absl::Status RunPredict(const std::string& model_dir, const std::string& input, std::ostream& out) {
  TESSERA_ASSIGN_OR_RETURN(const std::unique_ptr<Predictor> predictor, LoadPredictor(model_dir));
  if (input == "-") return Annotate(PredictJsonLines(*predictor, std::cin, out), "stdin");
  std::ifstream file(input);
  if (!file) {
    return absl::NotFoundError(
        absl::StrCat("cannot open input '", input, "': ", std::strerror(errno)));
  }
  return Annotate(PredictJsonLines(*predictor, file, out), input);
}

}  // namespace tessera::cli
