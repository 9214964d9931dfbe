// `tessera generate`: the data set named, its files and summary line, and bad requests.
#include "cli/generate_command.h"

#include <doctest/doctest.h>

#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "core/base/mem_env.h"

namespace tessera::cli {
namespace {

TEST_CASE("generate criteo writes both splits and the sidecar and says where") {
  MemEnv env;
  GenerateOptions options;
  options.kind = "criteo";
  options.train_examples = 300;
  options.test_examples = 200;
  options.out = "/data/criteo";
  options.gzip = true;
  std::ostringstream out;
  REQUIRE(RunGenerate(options, &env, out).ok());
  CHECK(env.FileExists("/data/criteo.train.tsv.gz"));
  CHECK(env.FileExists("/data/criteo.test.tsv.gz"));
  CHECK(!env.FileExists("/data/criteo.train.tsv.gz.tmp"));
  const std::string sidecar = *ReadFileBounded(env, "/data/criteo.json", 1 << 20);
  CHECK(absl::StrContains(sidecar, "\"test_examples\": 200"));
  CHECK(absl::StrContains(sidecar, "\"gzip\": true"));
  CHECK(absl::StrContains(out.str(), "300 train and 200 test examples"));
  CHECK(absl::StrContains(out.str(), "Bayes-optimal test AUC 0."));
  CHECK(absl::StrContains(out.str(), "/data/criteo.json"));
}

TEST_CASE("generate refuses an unknown data set, no prefix and negative sizes") {
  MemEnv env;
  std::ostringstream out;
  GenerateOptions options;
  options.kind = "movielens";
  options.out = "/data/x";
  absl::Status status = RunGenerate(options, &env, out);
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "unknown data set 'movielens'"));
  options.kind = "criteo";
  options.out = "";
  CHECK(RunGenerate(options, &env, out).code() == absl::StatusCode::kInvalidArgument);
  options.out = "/data/x";
  options.test_examples = -1;
  CHECK(RunGenerate(options, &env, out).code() == absl::StatusCode::kInvalidArgument);
  CHECK(!env.FileExists("/data/x.json"));
}

}  // namespace
}  // namespace tessera::cli
