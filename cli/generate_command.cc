#include "cli/generate_command.h"

#include "absl/strings/str_format.h"
#include "tessera/status.h"
#include "workloads/criteo_data.h"

namespace tessera::cli {

absl::Status RunGenerate(const GenerateOptions& options, Env* env, std::ostream& out) {
  if (options.kind != "criteo") {
    return absl::InvalidArgumentError(
        absl::StrFormat("unknown data set '%s'; 'tessera generate' writes: criteo", options.kind));
  }
  if (options.out.empty()) return absl::InvalidArgumentError("needs --out");
  CriteoDataConfig config;
  config.num_train = options.train_examples;
  config.num_test = options.test_examples;
  config.output_prefix = options.out;
  config.gzip = options.gzip;
  config.seed = options.seed;
  config.progress = &out;
  TESSERA_ASSIGN_OR_RETURN(const CriteoDataSummary summary, WriteCriteoData(config, env));
  const double ctr = summary.train_examples > 0
                         ? static_cast<double>(summary.train_positives) / summary.train_examples
                         : 0.0;
  out << absl::StrFormat(
      "tessera generate: %d train and %d test examples in %.1f s: %s, %s; click rate %.3f, "
      "Bayes-optimal test AUC %.4f (%s)\n",
      summary.train_examples, summary.test_examples, summary.seconds, summary.train_path,
      summary.test_path, ctr, summary.bayes_auc, summary.sidecar_path);
  return absl::OkStatus();
}

}  // namespace tessera::cli
