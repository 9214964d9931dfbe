// Exports streamed from the shards of the in-process cluster: byte for byte the file an
// in-memory model gives, whatever the layout, and refused (with nothing left) for NaN values.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/serving/export.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"
#include "tessera/partitioner.h"
#include "tessera/workloads/reference_models.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string FreshDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("tessera_export_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  return dir.string();
}

std::string FileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A recsys model whose user table (2003 x 600 floats, 4.8 MB) spans more than one of the
// writer's 4 MiB reads and splits unevenly over shards (3 shards: 668, 668, 667 rows).
ModelSpec TestSpec() {
  RecsysModelOptions options;
  options.num_users = 2003;
  options.num_items = 37;
  options.embedding_dim = 600;
  options.hidden_units = 5;
  options.seed = 9;
  return *RecsysModelSpec(options);
}

// Deterministic values, distinct per variable and element.
std::map<std::string, Tensor> TestValues(const ModelSpec& spec) {
  std::map<std::string, Tensor> values;
  for (const ParamSpec& p : spec.params) {
    Tensor t(p.shape);
    for (int64_t i = 0; i < t.size(); ++i) {
      t.data()[i] = static_cast<float>((i * 7919 + p.name.size() * 31) % 1000) / 997.0f - 0.5f;
    }
    values.emplace(p.name, std::move(t));
  }
  return values;
}

struct Trained {
  std::unique_ptr<Cluster> cluster;
  std::unique_ptr<ParameterServerStrategy> strategy;
};

Trained StrategyWith(int32_t num_ps, int64_t shards, const ModelSpec& spec,
                     const std::map<std::string, Tensor>& values) {
  Trained t;
  t.cluster = testing::StartCluster(num_ps, 1);
  t.strategy =
      std::make_unique<ParameterServerStrategy>(*t.cluster, *FixedShardsPartitioner(shards));
  auto model = std::make_shared<const Model>(*Model::Create(spec));
  REQUIRE(t.strategy->CreateModelVariables(model, {"sgd", {{"learning_rate", 0.1}}}).ok());
  for (const auto& [name, value] : values) {
    REQUIRE(t.strategy->variables().at(name).Assign(value).ok());
  }
  return t;
}

TEST_CASE(
    "an export streamed from the shards is byte-identical to the in-memory and any layout's") {
  const ModelSpec spec = TestSpec();
  const Model model = *Model::Create(spec);
  const std::map<std::string, Tensor> values = TestValues(spec);
  REQUIRE(values.at("user_embedding").size() * 4 > (int64_t{4} << 20));

  ExportedModel in_memory;
  in_memory.spec = spec;
  in_memory.signatures = {*ServingSignature(spec)};
  in_memory.step = 23;
  in_memory.variables = values;
  const std::string memory_dir = FreshDir("memory");
  fs::create_directories(memory_dir);
  REQUIRE(WriteExportedModel(memory_dir, in_memory).ok());
  const std::string want = FileBytes(memory_dir + "/" + kModelFile);
  REQUIRE(want.size() > values.at("user_embedding").size() * 4);

  for (const auto& [num_ps, shards] :
       std::vector<std::pair<int32_t, int64_t>>{{2, 3}, {1, 1}, {3, 7}}) {
    CAPTURE(num_ps);
    CAPTURE(shards);
    Trained t = StrategyWith(num_ps, shards, spec, values);
    const std::string dir = FreshDir("sharded_" + std::to_string(shards));
    const absl::Status exported = ExportModel(*t.strategy, model, dir, 23);
    REQUIRE_MESSAGE(exported.ok(), exported.ToString());
    CHECK(FileBytes(dir + "/" + kModelFile) == want);
    CHECK(std::vector<std::string>{kModelFile} ==
          std::vector<std::string>{fs::directory_iterator(dir)->path().filename().string()});
    fs::remove_all(dir);
  }
  fs::remove_all(memory_dir);
}

TEST_CASE("an export of a NaN or an infinity fails naming the variable and row, leaving nothing") {
  const ModelSpec spec = TestSpec();
  const Model model = *Model::Create(spec);
  Trained t = StrategyWith(2, 3, spec, TestValues(spec));
  const ShardedVariable& users = t.strategy->variables().at("user_embedding");
  Tensor row(Shape{1, 600}, 0.0f);
  row.data()[17] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE(users.ScatterUpdate({1500}, row).ok());

  const std::string dir = FreshDir("nan");
  const absl::Status status = ExportModel(*t.strategy, model, dir, 5);
  CHECK(absl::IsInvalidArgument(status));
  CHECK_MESSAGE(status.message().find("variable 'user_embedding' row 1500 holds a non-finite "
                                      "value (nan)") != absl::string_view::npos,
                status.ToString());
  CHECK(!fs::exists(dir));

  // Into a directory that already exists: it stays, without a model file or a temporary one.
  fs::create_directories(dir);
  row.data()[17] = -std::numeric_limits<float>::infinity();
  REQUIRE(users.ScatterUpdate({3}, row).ok());
  const absl::Status again = ExportModel(*t.strategy, model, dir, 5);
  CHECK_MESSAGE(again.message().find("variable 'user_embedding' row 3 holds a non-finite value "
                                     "(-inf)") != absl::string_view::npos,
                again.ToString());
  CHECK(fs::is_empty(dir));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
