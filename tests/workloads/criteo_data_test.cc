#include "workloads/criteo_data.h"

#include <doctest/doctest.h>
#include <zlib.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "core/base/mem_env.h"

namespace tessera {
namespace {

constexpr int64_t kMaxFileBytes = int64_t{1} << 30;

CriteoDataConfig SmallConfig(const std::string& prefix) {
  CriteoDataConfig config;
  config.num_train = 20000;
  config.num_test = 20000;
  config.output_prefix = prefix;
  return config;
}

CriteoDataSummary Write(const CriteoDataConfig& config, Env& env) {
  absl::StatusOr<CriteoDataSummary> summary = WriteCriteoData(config, &env);
  REQUIRE_MESSAGE(summary.ok(), summary.status().ToString());
  return *std::move(summary);
}

std::string Read(Env& env, const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileBounded(env, path, kMaxFileBytes);
  REQUIRE_MESSAGE(bytes.ok(), bytes.status().ToString());
  return *std::move(bytes);
}

std::string Gunzip(const std::string& compressed) {
  z_stream stream{};
  REQUIRE(inflateInit2(&stream, 15 + 16) == Z_OK);
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  std::string out;
  char chunk[1 << 16];
  int code = Z_OK;
  while (code == Z_OK) {
    stream.next_out = reinterpret_cast<Bytef*>(chunk);
    stream.avail_out = sizeof(chunk);
    code = inflate(&stream, Z_NO_FLUSH);
    out.append(chunk, sizeof(chunk) - stream.avail_out);
  }
  inflateEnd(&stream);
  CHECK(code == Z_STREAM_END);
  return out;
}

std::vector<std::string> Lines(const std::string& text) {
  REQUIRE((text.empty() || text.back() == '\n'));
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  lines.pop_back();  // after the last '\n'
  return lines;
}

bool IsDigits(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string::npos;
}

bool IsHex8(const std::string& s) {
  return s.size() == 8 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

TEST_CASE("criteo data is a pure function of the seed and the sizes") {
  MemEnv env;
  CriteoDataConfig config = SmallConfig("/a/criteo");
  config.num_train = 3000;
  config.num_test = 1000;
  const CriteoDataSummary a = Write(config, env);
  config.output_prefix = "/b/criteo";
  const CriteoDataSummary b = Write(config, env);
  CHECK(a.train_path == "/a/criteo.train.tsv");
  CHECK(a.test_path == "/a/criteo.test.tsv");
  CHECK(a.sidecar_path == "/a/criteo.json");
  const std::string a_train = Read(env, a.train_path);
  CHECK(a_train == Read(env, b.train_path));
  CHECK(Read(env, a.test_path) == Read(env, b.test_path));
  CHECK(a.bayes_auc == b.bayes_auc);
  // The splits are different draws of one distribution.
  CHECK(Read(env, a.test_path) != a_train.substr(0, Read(env, a.test_path).size()));

  // More training examples extend the train file; the test file stays.
  config.output_prefix = "/c/criteo";
  config.num_train = 4000;
  const CriteoDataSummary longer = Write(config, env);
  CHECK(absl::StartsWith(Read(env, longer.train_path), a_train));
  CHECK(Read(env, longer.test_path) == Read(env, a.test_path));

  config.output_prefix = "/d/criteo";
  config.seed = 2;
  const CriteoDataSummary other = Write(config, env);
  CHECK(Read(env, other.train_path).substr(0, 1000) != a_train.substr(0, 1000));
}

TEST_CASE("every line is a label, 13 integer fields and 26 categorical fields") {
  MemEnv env;
  const CriteoDataSummary summary = Write(SmallConfig("/criteo"), env);
  const std::vector<std::string> lines = Lines(Read(env, summary.train_path));
  REQUIRE(lines.size() == 20000);
  std::vector<int64_t> empty(1 + kCriteoIntegerFeatures + kCriteoCategoricalFeatures, 0);
  std::vector<std::set<std::string>> values(kCriteoCategoricalFeatures);
  int64_t positives = 0;
  for (const std::string& line : lines) {
    const std::vector<std::string> fields = absl::StrSplit(line, '\t');
    REQUIRE(fields.size() == 40);
    REQUIRE((fields[0] == "0" || fields[0] == "1"));
    positives += fields[0] == "1";
    for (int k = 0; k < kCriteoIntegerFeatures; ++k) {
      const std::string& f = fields[1 + k];
      if (f.empty()) {
        ++empty[1 + k];
      } else {
        REQUIRE_MESSAGE(IsDigits(f), "I", k + 1, " = '", f, "'");
      }
    }
    for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
      const std::string& f = fields[1 + kCriteoIntegerFeatures + k];
      if (f.empty()) {
        ++empty[1 + kCriteoIntegerFeatures + k];
      } else {
        REQUIRE_MESSAGE(IsHex8(f), "C", k + 1, " = '", f, "'");
        values[k].insert(f);
      }
    }
  }
  CHECK(positives == summary.train_positives);

  SUBCASE("each feature is missing at about its configured rate") {
    // 20000 lines: a rate's standard error is at most 0.0036; 0.02 is over five of them.
    for (int k = 0; k < kCriteoIntegerFeatures; ++k) {
      INFO("I", k + 1);
      CHECK(std::fabs(empty[1 + k] / 20000.0 - CriteoIntegerFeatures()[k].missing_rate) < 0.02);
    }
    for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
      INFO("C", k + 1);
      const double rate = CriteoCategoricalFeatures()[k].missing_rate;
      CHECK(std::fabs(empty[1 + kCriteoIntegerFeatures + k] / 20000.0 - rate) < 0.02);
    }
  }

  SUBCASE("a feature has no more distinct strings than values, the large ones many") {
    for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
      INFO("C", k + 1);
      CHECK(static_cast<int64_t>(values[k].size()) <= CriteoCategoricalFeatures()[k].vocabulary);
    }
    CHECK(values[8].size() == 3);     // C9: 3 values, all seen
    CHECK(values[2].size() > 1000);   // C3: 1M values, a power law over them
    CHECK(values[2].size() < 20000);  // ... whose hot values repeat
  }
}

TEST_CASE("the planted model clicks at about 25 percent with a Bayes AUC near 0.79") {
  MemEnv env;
  const CriteoDataSummary summary = Write(SmallConfig("/criteo"), env);
  CHECK(std::fabs(summary.planted_ctr - 0.25) < 0.02);
  CHECK(std::fabs(summary.train_positives / 20000.0 - 0.25) < 0.02);
  CHECK(summary.bayes_auc > 0.75);
  CHECK(summary.bayes_auc < 0.82);
  // The planted probabilities beat the constant prediction of the click rate.
  const double p = summary.test_positives / 20000.0;
  CHECK(summary.bayes_log_loss < -(p * std::log(p) + (1 - p) * std::log(1 - p)) - 0.05);

  const std::string sidecar = Read(env, summary.sidecar_path);
  CHECK(absl::StrContains(sidecar, "\"train_examples\": 20000"));
  CHECK(absl::StrContains(sidecar, "\"bayes_auc\": 0.7"));
  CHECK(absl::StrContains(sidecar, "\"train_file\": \"/criteo.train.tsv\""));
}

TEST_CASE("gzip output decompresses to the plain output byte for byte") {
  MemEnv env;
  CriteoDataConfig config = SmallConfig("/plain/criteo");
  config.num_train = 5000;
  config.num_test = 700;
  const CriteoDataSummary plain = Write(config, env);
  config.output_prefix = "/gzip/criteo";
  config.gzip = true;
  const CriteoDataSummary gzip = Write(config, env);
  CHECK(gzip.train_path == "/gzip/criteo.train.tsv.gz");
  const std::string compressed = Read(env, gzip.train_path);
  CHECK(compressed.size() < Read(env, plain.train_path).size() / 2);
  CHECK(Gunzip(compressed) == Read(env, plain.train_path));
  CHECK(Gunzip(Read(env, gzip.test_path)) == Read(env, plain.test_path));
  CHECK(gzip.bayes_auc == plain.bayes_auc);
}

TEST_CASE("an example drawn alone after a seek is the one drawn in sequence") {
  const PlantedCriteoModel model = PlantedCriteoModel::Create(7);
  PhiloxStream sequence(7, 1);
  std::vector<CriteoExample> examples;
  for (int i = 0; i < 50; ++i) examples.push_back(model.Draw(sequence));
  for (const int i : {49, 0, 17}) {
    PhiloxStream alone(7, 1);
    alone.Seek(i * PlantedCriteoModel::kDrawsPerExample);
    const CriteoExample e = model.Draw(alone);
    CHECK(e.integers == examples[i].integers);
    CHECK(e.categories == examples[i].categories);
    CHECK(e.logit == examples[i].logit);
    CHECK(e.label == examples[i].label);
  }
}

TEST_CASE("bad configs and unwritable prefixes are errors naming the problem") {
  MemEnv env;
  CriteoDataConfig config = SmallConfig("");
  CHECK(WriteCriteoData(config, &env).status().code() == absl::StatusCode::kInvalidArgument);
  config = SmallConfig("/criteo");
  config.num_train = -1;
  const absl::Status negative = WriteCriteoData(config, &env).status();
  CHECK(negative.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(negative.message(), "num_train -1"));
  // A prefix whose directory is a file.
  REQUIRE(WriteFileAtomically(env, "/file", "x", false).ok());
  config = SmallConfig("/file/criteo");
  config.num_train = 10;
  CHECK(!WriteCriteoData(config, &env).ok());
  CHECK(!env.FileExists("/file/criteo.json"));
}

}  // namespace
}  // namespace tessera
