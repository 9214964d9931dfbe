#include "serving/model_config.h"

#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "core/base/mem_env.h"
#include "tests/mangle.h"

namespace tessera::serving {
namespace {

std::vector<ModelConfig> Parse(const std::string& text) {
  auto configs = ParseModelConfig(text, "models.config");
  REQUIRE_MESSAGE(configs.ok(), configs.status().message());
  return *configs;
}

std::string ErrorOf(const std::string& text) {
  auto configs = ParseModelConfig(text, "models.config");
  REQUIRE(!configs.ok());
  CHECK(configs.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(configs.status().message());
}

TEST_CASE("TF Serving's model config text gives the models, their base paths and policies") {
  const auto configs = Parse(R"(
    # Two models.
    model_config_list {
      config {
        name: "recsys"
        base_path: "/models/recsys"
        model_platform: "tensorflow"
      }
      config: {
        name: 'ctr', base_path: '/models/c' "tr";
        model_version_policy { specific { versions: 3 versions: [5, 7] } }
      }
      config < name: "all" base_path: "/m" model_version_policy: { all {} } >
      config { name: "two" base_path: "/m2" model_version_policy { latest { num_versions: 2 } } }
    })");
  REQUIRE(configs.size() == 4);
  CHECK(configs[0].name == "recsys");
  CHECK(configs[0].base_path == "/models/recsys");
  CHECK(configs[0].policy.kind == VersionPolicy::Kind::kLatest);
  CHECK(configs[0].policy.latest == 1);
  CHECK(configs[1].name == "ctr");
  CHECK(configs[1].base_path == "/models/ctr");  // adjacent strings concatenate
  CHECK(configs[1].policy.kind == VersionPolicy::Kind::kSpecific);
  CHECK(configs[1].policy.specific == std::set<int64_t>{3, 5, 7});
  CHECK(configs[2].policy.kind == VersionPolicy::Kind::kAll);
  CHECK(configs[3].policy.kind == VersionPolicy::Kind::kLatest);
  CHECK(configs[3].policy.latest == 2);
}

TEST_CASE("strings take C escapes") {
  const auto configs = Parse(R"(model_config_list { config {
      name: "a\x62\143" base_path: "/tmp/\"q\"\\dir\t" } })");
  CHECK(configs[0].name == "abc");
  CHECK(configs[0].base_path == "/tmp/\"q\"\\dir\t");
}

TEST_CASE("a bad config is an error naming its line and what is wrong") {
  struct Case {
    const char* text;
    const char* message;
  };
  const std::vector<Case> cases = {
      {"", "models.config: no model_config_list { config { ... } }"},
      {"model_config_list {}", "line 1: model_config_list has no config"},
      {"model_config_list { config { name: \"a\" } }", "line 1: config 1 ('a') has no base_path"},
      {"model_config_list { config { base_path: \"/x\" } }", "line 1: config 1 has no name"},
      {"model_config_list {\n config {\n name: \"a/b\" base_path: \"/x\" } }",
       "line 3: model name 'a/b' must be non-empty and hold no '/' or ':'"},
      {"model_config_list { config { name: \"\" base_path: \"/x\" } }", "model name ''"},
      {"model_config_list { config { name: a base_path: \"/x\" } }",
       "'name' must be a quoted string"},
      {"model_config_list {\n\n config { name: \"a\" base_path: \"/x\" colour: \"red\" } }",
       "line 3: unknown field 'colour' in config"},
      {"model_config_list { config { name: \"a\" name: \"b\" base_path: \"/x\" } }",
       "'name' is given twice in config"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" } }\nmodel_config_list {}",
       "line 2: 'model_config_list' is given twice"},
      {"custom_model_config {}", "'custom_model_config' in the model config is not supported"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" version_labels { key: \"s\" "
       "value: 1 } } }",
       "'version_labels' in config is not supported by tessera serve"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" model_platform: \"pytorch\" } }",
       "model 'a': model_platform 'pytorch' is not served here"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" } config { name: \"a\" "
       "base_path: \"/y\" } }",
       "a second model named 'a' (the first is at line 1)"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" model_version_policy {} } }",
       "model_version_policy needs exactly one of latest, all or specific"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" model_version_policy { all {} "
       "latest {} } } }",
       "needs exactly one"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" model_version_policy { latest { "
       "num_versions: 0 } } } }",
       "'num_versions' must be an integer of at least 1, got '0'"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" model_version_policy { latest { "
       "num_versions: 99999999999999999999 } } } }",
       "'num_versions' must be an integer"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" model_version_policy { specific "
       "{} } } }",
       "specific needs at least one 'versions'"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" model_version_policy { specific "
       "{ versions: -1 } } } }",
       "'versions' must be an integer of at least 0, got '-1'"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" model_version_policy: 3 } }",
       "'model_version_policy' must be a message"},
      {"model_config_list { config { name: \"a\" base_path: \"/x\" ", "missing '}'"},
      {"model_config_list { config { name: \"a } }", "unterminated string"},
      {"model_config_list { config { name: \"\\q\" } }", "unknown escape '\\q'"},
      {"model_config_list { config { name \"a\" } }", "expected ':' or '{' after 'name'"},
      {"model_config_list { config { name: } }", "expected a value for 'name'"},
      {"model_config_list } {", "expected ':' or '{' after 'model_config_list'"},
      {"} model_config_list {}", "expected a field name, got '}'"},
      {"model_config_list { config { name: [\"a\" 3] } }", "expected ',' or ']'"},
  };
  for (const Case& c : cases) {
    CAPTURE(std::string(c.text));
    const std::string error = ErrorOf(c.text);
    CHECK_MESSAGE(error.find(c.message) != std::string::npos, error);
    CHECK(error.rfind("models.config", 0) == 0);
  }
}

TEST_CASE("hostile config text is an error, never a crash or a deep recursion") {
  CHECK(ErrorOf(std::string(100'000, '{')).find("expected a field name") != std::string::npos);
  std::string deep;
  for (int i = 0; i < 100'000; ++i) deep += "a {";
  CHECK(ErrorOf(deep).find("messages nested too deep") != std::string::npos);
  CHECK(!ErrorOf(std::string("model_config_list { config { name: \"a\0b\" } }", 44)).empty());

  const std::string valid =
      R"(model_config_list { config { name: "a" base_path: "/x" model_version_policy {)"
      R"( specific { versions: [1, 2] } } } config { name: 'b', base_path: '/y' } })";
  std::mt19937 random(5);
  const std::string alphabet = "{}[]<>:;,\"'\\#\n abcxyz019-_.";
  int ok = 0;
  for (int trial = 0; trial < 5000; ++trial) {
    const std::string text = Mangle(valid, 1 + static_cast<int>(random() % 4), random, alphabet);
    CAPTURE(text);
    auto configs = ParseModelConfig(text, "f");
    if (configs.ok()) {
      ++ok;
      for (const ModelConfig& config : *configs) {
        CHECK(CheckModelName(config.name).ok());
        CHECK(!config.base_path.empty());
      }
    } else {
      CHECK(configs.status().code() == absl::StatusCode::kInvalidArgument);
    }
  }
  CHECK(ok > 0);
}

TEST_CASE("a config file is read through the Env, bounded") {
  MemEnv env;
  REQUIRE(WriteFileAtomically(env, "/m.config",
                              "model_config_list { config { name: \"a\" base_path: \"/x\" } }",
                              false)
              .ok());
  auto configs = ReadModelConfigFile("/m.config", &env);
  REQUIRE(configs.ok());
  CHECK((*configs)[0].name == "a");
  auto missing = ReadModelConfigFile("/none.config", &env);
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
  CHECK(std::string(missing.status().message()).find("cannot read the model config file") == 0);
  REQUIRE(WriteFileAtomically(env, "/big.config", std::string((4 << 20) + 1, ' '), false).ok());
  CHECK(ReadModelConfigFile("/big.config", &env).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::serving
