// `tessera generate criteo`: writes a synthetic click log in the Criteo layout (tab-separated
// label, I1..I13, C1..C26) drawn from the planted model of workloads/criteo_data.h, with its
// Bayes-optimal AUC in a JSON sidecar: the data set a DLRM trains on when the real logs are
// not at hand, or to know how far from the best possible model it ends.
//
//   $ tessera generate criteo --train_examples=2000000 --test_examples=200000 --out=/tmp/criteo
//   criteo train: 1245184 / 2000000 examples (612345 lines/s)
//   tessera generate: 2000000 train and 200000 test examples in 3.9 s: /tmp/criteo.train.tsv,
//   /tmp/criteo.test.tsv; click rate 0.250, Bayes-optimal test AUC 0.7905 (/tmp/criteo.json)
//
// Thread-safety: RunGenerate may run concurrently on different prefixes.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "tessera/env.h"

namespace tessera::cli {

struct GenerateOptions {
  std::string kind;  // the data set: "criteo"
  int64_t train_examples = 2'000'000;
  int64_t test_examples = 200'000;
  std::string out;  // the output prefix
  bool gzip = false;
  uint64_t seed = 1;
};

// Writes the data set `options.kind` through `env`, with progress and a closing summary on
// `out`. InvalidArgument for an unknown kind, no --out or a negative size; the Env's errors
// (NotFound, PermissionDenied, ...) when the files cannot be written.
absl::Status RunGenerate(const GenerateOptions& options, Env* env, std::ostream& out);

}  // namespace tessera::cli
