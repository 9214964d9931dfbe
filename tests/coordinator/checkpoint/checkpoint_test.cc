// Checkpoints on the in-process cluster: save with N shards, restore into M, slots included;
// exports; the checkpoint manager.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "actors/ps/shard_actor.h"
#include "coordinator/checkpoint/save_restore.h"
#include "coordinator/ps/internal/await.h"
#include "coordinator/serving/export.h"
#include "core/base/logging.h"
#include "core/serving/exported_model.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/serving/model_io.h"
#include "tessera/partitioner.h"
#include "tessera/version.h"
#include "tessera/workloads/reference_models.h"
#include "tests/captured_log.h"
#include "tests/coordinator/checkpoint/failing_env.h"
#include "tests/coordinator/coordinator_test_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("tessera_ckpt_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

Partitioner Fixed(int64_t n) { return *FixedShardsPartitioner(n); }

VariableOptions EmbeddingOptions() {
  VariableOptions options;
  options.name = "emb";
  options.shape = Shape{13, 3};
  options.initializer = {"random_uniform", {{"minval", -1.0}, {"maxval", 1.0}}, 5};
  options.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.5}}};
  return options;
}

// A sparse gradient on a few rows (ids repeat across calls so slots accumulate).
IndexedSlices Gradient(float scale) {
  IndexedSlices g;
  g.indices = {0, 4, 5, 12, 4};
  g.values = Tensor(Shape{5, 3});
  for (int64_t k = 0; k < g.values.size(); ++k) g.values.data()[k] = scale * (k % 7 - 3);
  return g;
}

absl::Status Apply(caf::actor_system& system, const ShardedVariable& v, const IndexedSlices& g) {
  return internal::AwaitStatus(system, [h = v.handle(), g](caf::event_based_actor* self,
                                                           auto done) {
    ShardClient client(self);
    ApplySparseGradientAsync(client, h, g, std::move(done));
  });
}

TEST_CASE("a checkpoint saved with N shards restores into M shards with its optimizer slots") {
  for (int64_t n = 1; n <= 4; ++n) {
    for (int64_t m = 1; m <= 4; ++m) {
      CAPTURE(n);
      CAPTURE(m);
      const std::string dir = TempDir("nm");
      auto source_cluster = testing::StartCluster(2, 1);
      ParameterServerStrategy source(*source_cluster, Fixed(n));
      absl::StatusOr<ShardedVariable> original = source.CreateVariable(EmbeddingOptions());
      REQUIRE(original.ok());
      REQUIRE(Apply(source_cluster->actors().system(), *original, Gradient(1.0f)).ok());
      REQUIRE(Apply(source_cluster->actors().system(), *original, Gradient(0.5f)).ok());
      REQUIRE(SaveCheckpoint(source, dir, 42).ok());

      auto target_cluster = testing::StartCluster(3, 1);
      ParameterServerStrategy target(*target_cluster, Fixed(m));
      VariableOptions options = EmbeddingOptions();
      options.initializer = {"zeros", {}, 0};  // nothing of the original but the checkpoint
      absl::StatusOr<ShardedVariable> restored = target.CreateVariable(options);
      REQUIRE(restored.ok());
      absl::StatusOr<int64_t> step = RestoreCheckpoint(target, dir);
      REQUIRE_MESSAGE(step.ok(), step.status().ToString());
      CHECK(*step == 42);
      CHECK(testing::SameTensor(*restored->Read(), *original->Read()));

      // Continued training: the same gradient gives the same values only if the accumulators
      // (Adagrad's slots) came back too.
      REQUIRE(Apply(source_cluster->actors().system(), *original, Gradient(2.0f)).ok());
      REQUIRE(Apply(target_cluster->actors().system(), *restored, Gradient(2.0f)).ok());
      CHECK(testing::SameTensor(*restored->Read(), *original->Read()));
      fs::remove_all(dir);
    }
  }
}

TEST_CASE("a checkpoint written while training goes on holds the state at its cut") {
  const std::string dir = TempDir("cut");
  const std::string second_dir = TempDir("cut_again");
  {
    auto cluster = testing::StartCluster(2, 1);
    ParameterServerStrategy strategy(*cluster, Fixed(3));
    VariableOptions options = EmbeddingOptions();
    options.shape = Shape{200'000, 16};  // tens of MB with its slots: the write takes a while
    const ShardedVariable v = testing::ValueOrDie(strategy.CreateVariable(options));
    IndexedSlices g;
    g.indices = {0, 70'000, 199'999, 5};
    g.values = Tensor(Shape{4, 16}, 0.25f);
    REQUIRE(Apply(cluster->actors().system(), v, g).ok());
    const Tensor at_cut = testing::ValueOrDie(v.Read());

    absl::Notification cut;
    absl::Status saved;
    std::thread save(
        [&] { saved = SaveCheckpoint(strategy, dir, 7, RunId::Random(), [&] { cut.Notify(); }); });
    cut.WaitForNotification();
    for (int k = 0; k < 20; ++k)
      REQUIRE(Apply(cluster->actors().system(), v, g).ok());  // after the cut
    save.join();
    REQUIRE_MESSAGE(saved.ok(), saved.ToString());

    // A second save must hold its own cut, nothing of the first (Note [Copy-on-write
    // snapshots], core/ps/cow_snapshot.h).
    const Tensor at_second_cut = testing::ValueOrDie(v.Read());
    absl::Notification second_cut;
    std::thread save_again([&] {
      saved =
          SaveCheckpoint(strategy, second_dir, 27, RunId::Random(), [&] { second_cut.Notify(); });
    });
    second_cut.WaitForNotification();
    for (int k = 0; k < 5; ++k) REQUIRE(Apply(cluster->actors().system(), v, g).ok());
    save_again.join();
    REQUIRE_MESSAGE(saved.ok(), saved.ToString());

    auto target_cluster = testing::StartCluster(1, 1);
    ParameterServerStrategy target(*target_cluster, Fixed(2));
    options.initializer = {"zeros", {}, 0};
    const ShardedVariable restored = testing::ValueOrDie(target.CreateVariable(options));
    REQUIRE(RestoreCheckpoint(target, dir).ok());
    CHECK(testing::SameTensor(testing::ValueOrDie(restored.Read()), at_cut));
    CHECK_FALSE(testing::SameTensor(testing::ValueOrDie(v.Read()), at_cut));  // it trained on
    REQUIRE(RestoreCheckpoint(target, second_dir).ok());
    CHECK(testing::SameTensor(testing::ValueOrDie(restored.Read()), at_second_cut));
    CHECK_FALSE(testing::SameTensor(at_second_cut, at_cut));
    CHECK_FALSE(testing::SameTensor(testing::ValueOrDie(v.Read()), at_second_cut));
  }
  fs::remove_all(dir);
  fs::remove_all(second_dir);
}

// Rows `ids`, each row's gradient `scale` times a fixed pattern.
IndexedSlices RowsGradient(std::vector<int64_t> ids, float scale) {
  IndexedSlices g;
  g.values = Tensor(Shape{static_cast<int64_t>(ids.size()), 3});
  for (int64_t k = 0; k < g.values.size(); ++k) g.values.data()[k] = scale * (k % 5 - 2);
  g.indices = std::move(ids);
  return g;
}

TEST_CASE("Adam resumed on another number of shards continues exactly, rows never named included") {
  // Adam's bias correction reads the step count: the gradients below name only shard 0's rows
  // three times, then every row; the other shards must still count four steps.
  const std::string dir = TempDir("adam_steps");
  VariableOptions options = EmbeddingOptions();
  options.optimizer = OptimizerSpec{"adam", {{"learning_rate", 0.1}}};
  auto source_cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy source(*source_cluster, Fixed(4));
  const ShardedVariable original = *source.CreateVariable(options);
  std::vector<int64_t> every_row(13);
  for (int64_t i = 0; i < 13; ++i) every_row[static_cast<size_t>(i)] = i;
  for (int step = 0; step < 3; ++step) {
    REQUIRE(
        Apply(source_cluster->actors().system(), original, RowsGradient({0, 1}, 1.0f + step)).ok());
  }
  REQUIRE(Apply(source_cluster->actors().system(), original, RowsGradient(every_row, 0.5f)).ok());
  REQUIRE(SaveCheckpoint(source, dir, 4).ok());
  const CheckpointManifest manifest = *ReadManifest(dir);
  CHECK((*FindVariable(manifest, "emb"))->step == 4);

  auto target_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy target(*target_cluster, Fixed(3));
  options.initializer = {"zeros", {}, 0};
  const ShardedVariable restored = *target.CreateVariable(options);
  REQUIRE(RestoreCheckpoint(target, dir).ok());
  for (int step = 0; step < 2; ++step) {
    REQUIRE(
        Apply(source_cluster->actors().system(), original, RowsGradient(every_row, -1.5f)).ok());
    REQUIRE(
        Apply(target_cluster->actors().system(), restored, RowsGradient(every_row, -1.5f)).ok());
  }
  CHECK(testing::SameTensor(*restored.Read(), *original.Read()));
  fs::remove_all(dir);
}

TEST_CASE("a save writes its directory and manifest through the Env it is given") {
  const std::string dir = TempDir("env") + "/ckpt-3";
  auto cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(2));
  REQUIRE(strategy.CreateVariable(EmbeddingOptions()).ok());
  testing::FailingEnv env(Env::Default());
  env.Fail(kManifestFile, absl::ResourceExhaustedError("disk full"));
  const absl::Status failed = SaveCheckpoint(strategy, dir, 3, RunId::Random(), nullptr, &env);
  CHECK(absl::IsResourceExhausted(failed));
  CHECK_MESSAGE(absl::StrContains(failed.message(), "disk full"), failed.ToString());
  CHECK(fs::exists(dir));                                  // made through the Env, which let it
  CHECK_FALSE(fs::exists(fs::path(dir) / kManifestFile));  // incomplete: invisible
  env.Fail("ckpt-3", absl::PermissionDeniedError("read-only"));
  fs::remove_all(dir);
  CHECK(absl::IsPermissionDenied(SaveCheckpoint(strategy, dir, 3, RunId::Random(), nullptr, &env)));
  CHECK_FALSE(fs::exists(dir));
  fs::remove_all(fs::path(dir).parent_path());
}

TEST_CASE("restoring names what differs: a missing variable, another shape") {
  const std::string dir = TempDir("differs");
  auto cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(2));
  REQUIRE(strategy.CreateVariable(EmbeddingOptions()).ok());
  REQUIRE(SaveCheckpoint(strategy, dir, 1).ok());

  auto other_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy other(*other_cluster, Fixed(2));
  VariableOptions wider = EmbeddingOptions();
  wider.shape = Shape{13, 4};
  REQUIRE(other.CreateVariable(wider).ok());
  absl::Status shape = RestoreCheckpoint(other, dir).status();
  CHECK(shape.code() == absl::StatusCode::kInvalidArgument);
  CHECK(shape.message().find("[13, 3]") != std::string::npos);
  CHECK(shape.message().find("[13, 4]") != std::string::npos);

  auto third_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy third(*third_cluster, Fixed(2));
  VariableOptions renamed = EmbeddingOptions();
  renamed.name = "items";
  REQUIRE(third.CreateVariable(renamed).ok());
  absl::Status missing = RestoreCheckpoint(third, dir).status();
  CHECK(missing.code() == absl::StatusCode::kNotFound);
  CHECK(missing.message().find("items") != std::string::npos);

  const std::string empty = TempDir("empty");
  CHECK(RestoreCheckpoint(strategy, empty).status().code() == absl::StatusCode::kNotFound);
  fs::remove_all(empty);
  fs::remove_all(dir);
}

VariableOptions OnReadOptions(const std::string& name, VariableAggregation aggregation) {
  VariableOptions options;
  options.name = name;
  options.shape = Shape{2, 2};
  options.synchronization = VariableSynchronization::kOnRead;
  options.aggregation = aggregation;
  return options;
}

TEST_CASE("ON_READ variables are saved reduced and restored as each worker's share, as TF does") {
  const std::string dir = TempDir("on_read");
  const std::pair<const char*, VariableAggregation> kinds[] = {
      {"sum", VariableAggregation::kSum},
      {"mean", VariableAggregation::kMean},
      {"first", VariableAggregation::kOnlyFirstReplica}};
  // Three workers whose copies hold 1, 2 and 3: sum 6, mean 2, first 1.
  auto source_cluster = testing::StartCluster(2, 3);
  ParameterServerStrategy source(*source_cluster, Fixed(2));
  REQUIRE(source.CreateVariable(EmbeddingOptions()).ok());
  for (const auto& [name, aggregation] : kinds) {
    const ShardedVariable v = *source.CreateVariable(OnReadOptions(name, aggregation));
    for (int32_t k = 0; k < 3; ++k) {
      testing::AssignCopy(*source_cluster, v, k, static_cast<float>(k + 1));
    }
  }
  REQUIRE(SaveCheckpoint(source, dir, 7).ok());
  const CheckpointManifest manifest = *ReadManifest(dir);
  for (const auto& [name, aggregation] : kinds) {
    const CheckpointVariable* entry = *FindVariable(manifest, name);
    CHECK(entry->slices.size() == 1);
    CHECK(!entry->optimizer.has_value());
  }

  // Restored over two workers: every copy gets its share, and each variable reads the same.
  auto target_cluster = testing::StartCluster(1, 2);
  ParameterServerStrategy target(*target_cluster, Fixed(3));
  REQUIRE(target.CreateVariable(EmbeddingOptions()).ok());
  std::map<std::string, ShardedVariable> restored;
  for (const auto& [name, aggregation] : kinds) {
    restored.emplace(name, *target.CreateVariable(OnReadOptions(name, aggregation)));
  }
  const absl::StatusOr<int64_t> step = RestoreCheckpoint(target, dir);
  REQUIRE_MESSAGE(step.ok(), step.status().ToString());
  CHECK(*step == 7);
  const std::map<std::string, std::pair<float, float>> want = {// {each copy, Read}
                                                               {"sum", {3.0f, 6.0f}},
                                                               {"mean", {2.0f, 2.0f}},
                                                               {"first", {1.0f, 1.0f}}};
  for (const auto& [name, values] : want) {
    CAPTURE(name);
    for (int32_t k = 0; k < 2; ++k) {
      CHECK(testing::SameTensor(testing::ReadCopy(*target_cluster, restored.at(name), k),
                                Tensor(Shape{2, 2}, values.first)));
    }
    CHECK(testing::SameTensor(*restored.at(name).Read(), Tensor(Shape{2, 2}, values.second)));
  }

  // The saved value is an ordinary entry: it restores into an ON_WRITE variable of that name.
  auto plain_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy plain(*plain_cluster, Fixed(2));
  REQUIRE(plain.CreateVariable(EmbeddingOptions()).ok());
  VariableOptions on_write = OnReadOptions("sum", VariableAggregation::kSum);
  on_write.synchronization = VariableSynchronization::kOnWrite;
  const ShardedVariable sum = *plain.CreateVariable(on_write);
  REQUIRE(RestoreCheckpoint(plain, dir).ok());
  CHECK(testing::SameTensor(*sum.Read(), Tensor(Shape{2, 2}, 6.0f)));

  // Another shape is refused naming both; the copies are unchanged.
  auto wide_cluster = testing::StartCluster(1, 2);
  ParameterServerStrategy wide(*wide_cluster, Fixed(2));
  REQUIRE(wide.CreateVariable(EmbeddingOptions()).ok());
  VariableOptions wider = OnReadOptions("mean", VariableAggregation::kMean);
  wider.shape = Shape{2, 3};
  const ShardedVariable mean = *wide.CreateVariable(wider);
  testing::AssignCopy(*wide_cluster, mean, 0, 5.0f);
  const absl::Status refused = RestoreCheckpoint(wide, dir).status();
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(refused.message().find("[2, 2]") != std::string::npos);
  CHECK(refused.message().find("[2, 3]") != std::string::npos);
  CHECK(testing::SameTensor(testing::ReadCopy(*wide_cluster, mean, 0), Tensor(Shape{2, 3}, 5.0f)));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint without an ON_READ variable restores, keeping its copies, with a warning") {
  const std::string dir = TempDir("no_on_read");
  auto source_cluster = testing::StartCluster(1, 2);
  ParameterServerStrategy source(*source_cluster, Fixed(2));
  REQUIRE(source.CreateVariable(EmbeddingOptions()).ok());
  REQUIRE(SaveCheckpoint(source, dir, 3).ok());

  auto target_cluster = testing::StartCluster(1, 2);
  ParameterServerStrategy target(*target_cluster, Fixed(2));
  REQUIRE(target.CreateVariable(EmbeddingOptions()).ok());
  const ShardedVariable count =
      *target.CreateVariable(OnReadOptions("count", VariableAggregation::kSum));
  testing::AssignCopy(*target_cluster, count, 1, 4.0f);
  testing::CapturedLog log;
  const absl::StatusOr<int64_t> step = RestoreCheckpoint(target, dir);
  REQUIRE_MESSAGE(step.ok(), step.status().ToString());
  CHECK(log.text().find("no ON_READ variable count") != std::string::npos);
  CHECK(testing::SameTensor(*count.Read(), Tensor(Shape{2, 2}, 4.0f)));
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint without its manifest is invisible, and the manager keeps the last K") {
  const std::string root = TempDir("manager");
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(3));
  REQUIRE(strategy.CreateVariable(EmbeddingOptions()).ok());
  CheckpointManager manager(root, 2);
  CHECK_FALSE(manager.Latest().has_value());
  for (int64_t step : {10, 20, 30}) REQUIRE(manager.Save(strategy, step).ok());
  CHECK(manager.Checkpoints() ==
        std::vector<std::string>{root + "/ckpt-20", root + "/ckpt-30"});
  CHECK(manager.Latest() == root + "/ckpt-30");
  // A newer checkpoint whose manifest never landed is ignored.
  fs::create_directories(root + "/ckpt-40");
  REQUIRE(SaveCheckpoint(strategy, root + "/ckpt-40", 40).ok());
  fs::remove(root + "/ckpt-40/" + kManifestFile);
  CHECK(manager.Latest() == root + "/ckpt-30");
  fs::remove_all(root);
}

using testing::CapturedLog;

bool Contains(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

TEST_CASE("a slice file of another checkpoint or another run is DataLoss naming the file") {
  const std::string root = TempDir("identity");
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(2));
  absl::StatusOr<ShardedVariable> emb = strategy.CreateVariable(EmbeddingOptions());
  REQUIRE(emb.ok());
  CheckpointManager manager(root, 5);
  REQUIRE(manager.BeginFreshRun(false).ok());
  REQUIRE(manager.Save(strategy, 10).ok());
  REQUIRE(Apply(cluster->actors().system(), *emb, Gradient(1.0f)).ok());
  REQUIRE(manager.Save(strategy, 20).ok());
  const std::string file = "v0.emb.part-1-of-2.slice";
  REQUIRE(fs::exists(root + "/ckpt-20/" + file));

  auto target_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy target(*target_cluster, Fixed(3));
  REQUIRE(target.CreateVariable(EmbeddingOptions()).ok());
  REQUIRE(RestoreCheckpoint(target, root + "/ckpt-20").ok());

  SUBCASE("the same variable's rows from the checkpoint of another step") {
    fs::copy_file(root + "/ckpt-10/" + file, root + "/ckpt-20/" + file,
                  fs::copy_options::overwrite_existing);
  }
  SUBCASE("a symbolic link to the other checkpoint's file") {
    fs::remove(root + "/ckpt-20/" + file);
    fs::create_symlink(root + "/ckpt-10/" + file, root + "/ckpt-20/" + file);
  }
  SUBCASE("the same file of another run's checkpoint of the same step") {
    const std::string other_root = TempDir("identity_other");
    CheckpointManager other(other_root, 5);
    REQUIRE(other.Save(strategy, 20).ok());
    fs::copy_file(other_root + "/ckpt-20/" + file, root + "/ckpt-20/" + file,
                  fs::copy_options::overwrite_existing);
    fs::remove_all(other_root);
  }
  const absl::Status status = RestoreCheckpoint(target, root + "/ckpt-20").status();
  CHECK(absl::IsDataLoss(status));
  CHECK_MESSAGE(Contains(status, "file " + file + " belongs to another checkpoint"),
                status.ToString());
  CHECK(Contains(status, "its manifest: run " + manager.run_id().ToString() + " step 20"));
  fs::remove_all(root);
}

TEST_CASE("a checkpoint saved before run ids restores, with a warning") {
  const std::string dir = TempDir("no_run_id");
  auto cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(2));
  absl::StatusOr<ShardedVariable> emb = strategy.CreateVariable(EmbeddingOptions());
  REQUIRE(emb.ok());
  REQUIRE(Apply(cluster->actors().system(), *emb, Gradient(1.0f)).ok());
  REQUIRE(SaveCheckpoint(strategy, dir, 7, RunId{}).ok());  // no identity, as older builds
  CHECK(ReadManifest(dir)->run_id.empty());
  auto target_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy target(*target_cluster, Fixed(3));
  absl::StatusOr<ShardedVariable> restored = target.CreateVariable(EmbeddingOptions());
  REQUIRE(restored.ok());
  CapturedLog log;
  absl::StatusOr<int64_t> step = RestoreCheckpoint(target, dir);
  REQUIRE_MESSAGE(step.ok(), step.status().ToString());
  CHECK(*step == 7);
  CHECK(testing::SameTensor(*restored->Read(), *emb->Read()));
  CHECK(log.text().find(dir + " has no run id") != std::string::npos);
  fs::remove_all(dir);
}

TEST_CASE("a checkpoint written before versions were recorded restores into another layout") {
  // tests/schema/testdata/before_versions/: a 5-step recsys checkpoint (2 shards per embedding)
  // and the export of the same model, both written by the build before versions were recorded
  // (tests/schema/base/writer_version_test.cc says how).
  const char* source = std::getenv("TESSERA_SOURCE_DIR");
  REQUIRE(source != nullptr);
  const std::string testdata = std::string(source) + "/tests/schema/testdata/before_versions/";
  RecsysModelOptions tiny;
  tiny.num_users = 20;
  tiny.num_items = 10;
  tiny.embedding_dim = 4;
  tiny.hidden_units = 4;
  absl::StatusOr<ModelSpec> spec = RecsysModelSpec(tiny);
  REQUIRE(spec.ok());
  absl::StatusOr<Model> model = Model::Create(*spec);
  REQUIRE(model.ok());
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(3));
  REQUIRE(strategy
              .CreateModelVariables(std::make_shared<const Model>(*model),
                                    {"adagrad", {{"learning_rate", 0.1},
                                                 {"initial_accumulator_value", 0.0}}})
              .ok());
  CapturedLog log;
  absl::StatusOr<int64_t> step = RestoreCheckpoint(strategy, testdata + "checkpoint");
  REQUIRE_MESSAGE(step.ok(), step.status().ToString());
  CHECK(*step == 5);
  absl::StatusOr<ExportedModel> exported = ReadExportedModel(testdata + "export");
  REQUIRE(exported.ok());
  for (const auto& [name, value] : exported->variables) {
    CAPTURE(name);
    CHECK_TENSOR(*strategy.variables().at(name).Read(), value);
  }
  CHECK(log.text().find("checkpoint was written by an unknown version (before versions were "
                        "recorded); this is tessera " +
                        std::string(Version())) != std::string::npos);
}

TEST_CASE("a complete checkpoint is never overwritten in place") {
  const std::string dir = TempDir("no_overwrite");
  auto cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(2));
  absl::StatusOr<ShardedVariable> emb = strategy.CreateVariable(EmbeddingOptions());
  REQUIRE(emb.ok());
  REQUIRE(SaveCheckpoint(strategy, dir, 5).ok());
  const Tensor saved = *emb->Read();
  REQUIRE(Apply(cluster->actors().system(), *emb, Gradient(1.0f)).ok());
  const absl::Status again = SaveCheckpoint(strategy, dir, 6);
  CHECK(absl::IsFailedPrecondition(again));
  CHECK(Contains(again, dir + " already holds a checkpoint"));
  // Still the first save, whole.
  auto target_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy target(*target_cluster, Fixed(1));
  absl::StatusOr<ShardedVariable> restored = target.CreateVariable(EmbeddingOptions());
  REQUIRE(restored.ok());
  REQUIRE(*RestoreCheckpoint(target, dir) == 5);
  CHECK_TENSOR(*restored->Read(), saved);
  fs::remove_all(dir);
}

TEST_CASE("resuming with another optimizer is refused naming both, changed hyperparameters are "
          "logged and kept") {
  const std::string dir = TempDir("optimizer");
  auto cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(2));
  REQUIRE(strategy.CreateVariable(EmbeddingOptions()).ok());  // adagrad, learning_rate 0.5
  REQUIRE(SaveCheckpoint(strategy, dir, 3).ok());

  auto adam_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy adam(*adam_cluster, Fixed(2));
  VariableOptions options = EmbeddingOptions();
  options.optimizer = OptimizerSpec{"adam", {}};
  REQUIRE(adam.CreateVariable(options).ok());
  const absl::Status other = RestoreCheckpoint(adam, dir).status();
  CHECK(absl::IsInvalidArgument(other));
  CHECK_MESSAGE(Contains(other, "variable emb: the checkpoint in " + dir +
                                    " was trained with optimizer 'adagrad' (slots "
                                    "[accumulator]), but this run's optimizer is 'adam'"),
                other.ToString());

  auto slower_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy slower(*slower_cluster, Fixed(3));
  options.optimizer = OptimizerSpec{"adagrad", {{"learning_rate", 0.125}}};
  REQUIRE(slower.CreateVariable(options).ok());
  CapturedLog log;
  REQUIRE(RestoreCheckpoint(slower, dir).ok());
  CHECK_MESSAGE(log.text().find("restoring " + dir + ": optimizer hyperparameter adagrad "
                                "learning_rate: 0.5 in the checkpoint, 0.125 now") !=
                    std::string::npos,
                log.text());
  CHECK(log.text().find("initial_accumulator_value") == std::string::npos);  // unchanged
  fs::remove_all(dir);
}

TEST_CASE("PS recovery restores only a checkpoint of its own run") {
  const std::string root = TempDir("recovery_run");
  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(2));
  REQUIRE(strategy.CreateVariable(EmbeddingOptions()).ok());
  CheckpointManager manager(root, 2);
  absl::StatusOr<std::string> dir = manager.Save(strategy, 4);
  REQUIRE(dir.ok());
  CHECK(RestoreShardsOf(strategy, *dir, 0, manager.run_id()).ok());
  CHECK(RestoreShardsOf(strategy, *dir, 0).ok());  // no run to check against
  const RunId stranger = RunId::Random();
  const absl::Status other = RestoreShardsOf(strategy, *dir, 0, stranger).status();
  CHECK(absl::IsFailedPrecondition(other));
  CHECK(Contains(other, "belongs to run " + manager.run_id().ToString() + ", not to this run (" +
                            stranger.ToString() + ")"));
  fs::remove_all(root);
}

TEST_CASE("removing old checkpoints never follows a symbolic link out of the root") {
  const std::string root = TempDir("symlinks");
  const std::string outside = TempDir("symlinks_outside");
  std::ofstream(outside + "/precious") << "keep me";
  auto cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(2));
  REQUIRE(strategy.CreateVariable(EmbeddingOptions()).ok());
  CheckpointManager manager(root, 1);
  REQUIRE(manager.Save(strategy, 1).ok());
  // A link inside a checkpoint, and a checkpoint that is a link to a directory outside.
  fs::create_directory_symlink(outside, root + "/ckpt-1/link");
  fs::create_directory_symlink(outside, root + "/ckpt-2");
  REQUIRE(manager.Save(strategy, 3).ok());  // retention removes ckpt-1 (and ckpt-2 when seen)
  CHECK_FALSE(fs::exists(root + "/ckpt-1"));
  CHECK(fs::exists(outside + "/precious"));
  CheckpointManager fresh(root, 1);
  REQUIRE(fresh.BeginFreshRun(/*overwrite=*/true).ok());
  CHECK(fs::is_empty(root));
  CHECK(fs::exists(outside + "/precious"));
  fs::remove_all(root);
  fs::remove_all(outside);
}

TEST_CASE("an exported model predicts like the training process and restores as a checkpoint") {
  const std::string dir = TempDir("export");
  RecsysModelOptions tiny;
  tiny.num_users = 50;
  tiny.num_items = 20;
  tiny.embedding_dim = 4;
  tiny.hidden_units = 8;
  tiny.seed = 3;
  absl::StatusOr<ModelSpec> spec = RecsysModelSpec(tiny);
  REQUIRE(spec.ok());
  absl::StatusOr<Model> model = Model::Create(*spec);
  REQUIRE(model.ok());
  auto shared_model = std::make_shared<const Model>(*model);

  auto cluster = testing::StartCluster(2, 1);
  ParameterServerStrategy strategy(*cluster, Fixed(3));
  auto vars = strategy.CreateModelVariables(shared_model, {"adagrad", {{"learning_rate", 0.3}}});
  REQUIRE(vars.ok());
  // Move the embeddings away from their initial values so a stale read would show.
  const ShardedVariable& users = strategy.variables().at("user_embedding");
  REQUIRE(users.ScatterAdd({0, 7, 49}, Tensor(Shape{3, 4}, 0.25f)).ok());
  REQUIRE(ExportModel(strategy, *model, dir, 17).ok());

  // The training process's own forward pass, on values read from the shards.
  Batch batch;
  batch.size = 4;
  batch.ids["user"] = {0, 7, 49, 3};
  batch.ids["item"] = {19, 0, 5, 5};
  std::map<std::string, Tensor> values;
  StepParams params;
  for (const auto& [name, variable] : strategy.variables()) values[name] = *variable.Read();
  for (const auto& [name, value] : values) params.full[name] = value.view();
  absl::StatusOr<ForwardResult> training = model->Forward(batch, params);
  REQUIRE(training.ok());

  absl::StatusOr<ExportedModel> exported = ReadExportedModel(dir);
  REQUIRE(exported.ok());
  CHECK(exported->step == 17);
  absl::StatusOr<std::unique_ptr<Predictor>> predictor = Predictor::Create(*exported);
  REQUIRE(predictor.ok());
  absl::StatusOr<std::map<std::string, Tensor>> served = (*predictor)->Predict(batch);
  REQUIRE(served.ok());
  for (const auto& [name, want] : training->outputs) {
    CAPTURE(name);
    REQUIRE(served->count(name) == 1);
    CHECK_TENSOR_NEAR(served->at(name), want, 1e-5f);
  }

  // The export restores as a training checkpoint into another layout (values, fresh slots).
  auto other_cluster = testing::StartCluster(1, 1);
  ParameterServerStrategy other(*other_cluster, Fixed(2));
  auto other_vars = other.CreateModelVariables(shared_model, {"adagrad", {{"learning_rate", 0.3}}});
  REQUIRE(other_vars.ok());
  absl::StatusOr<int64_t> step = RestoreCheckpoint(other, dir);
  REQUIRE_MESSAGE(step.ok(), step.status().ToString());
  CHECK(*step == 17);
  for (const auto& [name, value] : values) {
    CAPTURE(name);
    CHECK_TENSOR(*other.variables().at(name).Read(), value);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tessera
