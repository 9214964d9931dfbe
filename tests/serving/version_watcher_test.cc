#include "serving/version_watcher.h"

#include <doctest/doctest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "schema/serving/model_io.h"
#include "serving/model_service.h"
#include "tests/cli/tessera_child.h"
#include "tests/event_count.h"

namespace tessera::serving {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::TinyRecsysModel;

// The tiny recsys model with its first item-embedding value shifted by `version`, so that each
// version predicts differently.
ExportedModel VersionModel(int64_t version) {
  ExportedModel model = TinyRecsysModel();
  model.variables.at("item_embedding").data()[0] += static_cast<float>(version);
  model.step = 100 + version;
  return model;
}

void Export(const std::string& base, int64_t version) {
  const std::string dir = absl::StrCat(base, "/", version);
  fs::create_directories(dir);
  REQUIRE(WriteExportedModel(dir, VersionModel(version)).ok());
}

// The real Env, counting the listings of one directory: a watcher lists each base path once per
// poll, so a test waits for the polls themselves instead of sleeping through intervals.
class ListingCounter final : public Env {
 public:
  explicit ListingCounter(std::string watched) : watched_(std::move(watched)) {}

  // How many times the watched directory has been listed (wait on it with AwaitAtLeast).
  testing::EventCount& listings() { return listings_; }

  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    absl::StatusOr<std::vector<std::string>> entries = base_->ListDirectory(path);
    if (path == watched_) listings_.Add();
    return entries;
  }
  absl::Status CreateDirectories(const std::string& path) override {
    return base_->CreateDirectories(path);
  }
  bool FileExists(const std::string& path) override { return base_->FileExists(path); }
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    return base_->FileSize(path);
  }
  absl::StatusOr<absl::Time> ModifiedTime(const std::string& path) override {
    return base_->ModifiedTime(path);
  }
  absl::Status RemoveTree(const std::string& path) override { return base_->RemoveTree(path); }
  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    return base_->RenameFile(from, to);
  }
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    return base_->NewRandomAccessFile(path);
  }
  absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> NewReadOnlyMemoryRegion(
      const std::string& path) override {
    return base_->NewReadOnlyMemoryRegion(path);
  }
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(const std::string& path) override {
    return base_->NewWritableFile(path);
  }
  absl::Status SyncDirectory(const std::string& path) override {
    return base_->SyncDirectory(path);
  }
  absl::Time Now() override { return base_->Now(); }

 private:
  Env* const base_ = Env::Default();
  const std::string watched_;
  testing::EventCount listings_;
};

// "v:STATE[:CODE]" for each status of `name`, e.g. {"2:AVAILABLE", "3:END:DATA_LOSS"}.
std::vector<std::string> States(const ModelRegistry& registry, const std::string& name) {
  std::vector<std::string> states;
  for (const VersionStatus& s : registry.Snapshot()->at(name).statuses) {
    std::string state =
        absl::StrCat(s.version, ":", s.state == VersionState::kAvailable ? "AVAILABLE" : "END");
    if (!s.status.ok()) absl::StrAppend(&state, ":", absl::StatusCodeToString(s.status.code()));
    states.push_back(state);
  }
  return states;
}

// The probability the served version `version` (newest when -1) gives user 0, item 0.
float Served(const ModelRegistry& registry, const std::string& name, int64_t version = -1) {
  const auto models = registry.Snapshot();
  const ServedModel& model = models->at(name);
  const ServedVersion* served = version < 0 ? model.Newest() : model.available.at(version).get();
  REQUIRE(served != nullptr);
  auto reply = served->Predict(R"({"instances": [{"user": 0, "item": 0}]})", PredictLimits{});
  REQUIRE(reply.ok());
  return (*ParseJson(*reply))["predictions"][0]["probability"][0].get<float>();
}

float Want(int64_t version) {
  Batch batch;
  batch.size = 1;
  batch.ids["user"] = {0};
  batch.ids["item"] = {0};
  return (*Predictor::Create(VersionModel(version)))->Predict(batch)->at("probability").row(0)[0];
}

TEST_CASE("version directories are numbers") {
  CHECK(VersionOfDirectory("1") == 1);
  CHECK(VersionOfDirectory("0") == 0);
  CHECK(VersionOfDirectory("9223372036854775807") == 9223372036854775807);
  CHECK(VersionOfDirectory("00000123") == 123);  // as TF Serving's test models are named
  for (const char* name : {"", "-1", "+1", "1a", "a", "1.0", "9223372036854775808", " 1", "1 "}) {
    CAPTURE(name);
    CHECK(VersionOfDirectory(name) == -1);
  }
}

TEST_CASE("the newest version is served, new ones replace it, removed ones are unloaded") {
  TempDir dir;
  const std::string base = dir.MakeSub("recsys");
  Export(base, 1);
  Export(base, 2);
  fs::create_directories(base + "/tmp-export");  // not a version
  ModelRegistry registry;
  VersionWatcher watcher({{"recsys", base, VersionPolicy{}}}, registry);
  CHECK(registry.Snapshot()->at("recsys").available.empty());  // published before any poll
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "recsys") == std::vector<std::string>{"2:AVAILABLE"});
  CHECK(Served(registry, "recsys") == Want(2));

  // A request that took its snapshot before the change keeps its version.
  const auto before = registry.Snapshot();
  Export(base, 3);
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "recsys") == std::vector<std::string>{"2:END", "3:AVAILABLE"});
  CHECK(Served(registry, "recsys") == Want(3));
  CHECK(before->at("recsys").Newest()->version() == 2);

  // Removed from disk: unloaded, and the newest left is served again.
  fs::remove_all(base + "/3");
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "recsys") == std::vector<std::string>{"2:AVAILABLE", "3:END"});
  CHECK(Served(registry, "recsys") == Want(2));

  // Nothing changed: nothing published.
  const auto unchanged = registry.Snapshot();
  REQUIRE(watcher.Poll().ok());
  CHECK(registry.Snapshot() == unchanged);

  // Every version gone: the model stays, with none.
  fs::remove_all(base + "/1");
  fs::remove_all(base + "/2");
  REQUIRE(watcher.Poll().ok());
  CHECK(registry.Snapshot()->at("recsys").available.empty());
  CHECK(States(registry, "recsys") == std::vector<std::string>{"2:END", "3:END"});
}

TEST_CASE("two directory names of one number: the first in name order serves") {
  TempDir dir;
  const std::string base = dir.MakeSub("m");
  Export(base, 7);
  fs::create_directories(base + "/007");
  REQUIRE(WriteExportedModel(base + "/007", VersionModel(3)).ok());
  ModelRegistry registry;
  VersionWatcher watcher({{"m", base, VersionPolicy{}}}, registry);
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "m") == std::vector<std::string>{"7:AVAILABLE"});
  CHECK(Served(registry, "m") == Want(3));  // "007" < "7"
}

TEST_CASE("a half-written version is not loaded until its model file is in place") {
  TempDir dir;
  const std::string base = dir.MakeSub("recsys");
  Export(base, 1);
  ModelRegistry registry;
  VersionWatcher watcher({{"recsys", base, VersionPolicy{}}}, registry);
  REQUIRE(watcher.Poll().ok());

  // What an export looks like while it is written: the directory, and a temporary file.
  const std::string staging = dir.MakeSub("staging");
  REQUIRE(WriteExportedModel(staging, VersionModel(2)).ok());
  const std::string whole = testing::ReadFile(staging + "/model.tsr");
  fs::create_directories(base + "/2");
  std::ofstream(base + "/2/model.tsr.tmp-1-0", std::ios::binary) << whole.substr(0, 1000);
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "recsys") == std::vector<std::string>{"1:AVAILABLE"});
  CHECK(Served(registry, "recsys") == Want(1));

  // The rename completes it.
  std::ofstream(base + "/2/model.tsr.tmp-1-0", std::ios::binary) << whole;
  fs::rename(base + "/2/model.tsr.tmp-1-0", base + "/2/model.tsr");
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "recsys") == std::vector<std::string>{"1:END", "2:AVAILABLE"});
  CHECK(Served(registry, "recsys") == Want(2));
}

TEST_CASE("a version that cannot be loaded shows its error and leaves the one before it served") {
  TempDir dir;
  const std::string base = dir.MakeSub("recsys");
  Export(base, 1);
  ModelRegistry registry;
  VersionWatcher watcher({{"recsys", base, VersionPolicy{}}}, registry);
  REQUIRE(watcher.Poll().ok());

  // Copied in place by something other than an export, and caught half-way.
  const std::string staging = dir.MakeSub("staging");
  REQUIRE(WriteExportedModel(staging, VersionModel(2)).ok());
  const std::string whole = testing::ReadFile(staging + "/model.tsr");
  fs::create_directories(base + "/2");
  std::ofstream(base + "/2/model.tsr", std::ios::binary) << whole.substr(0, whole.size() / 2);
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "recsys") == std::vector<std::string>{"1:AVAILABLE", "2:END:DATA_LOSS"});
  CHECK(Served(registry, "recsys") == Want(1));
  const auto failed = registry.Snapshot()->at("recsys").statuses[1].status;
  CHECK_MESSAGE(std::string(failed.message()).find(base + "/2") != std::string::npos,
                failed.message());
  // Not tried again while the file stays as it is.
  const auto unchanged = registry.Snapshot();
  REQUIRE(watcher.Poll().ok());
  CHECK(registry.Snapshot() == unchanged);

  // The copy completes: the file changed size, so it is tried again.
  std::ofstream(base + "/2/model.tsr", std::ios::binary) << whole;
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "recsys") == std::vector<std::string>{"1:END", "2:AVAILABLE"});
  CHECK(Served(registry, "recsys") == Want(2));
}

TEST_CASE("version policies: all, the latest N, specific ones") {
  TempDir dir;
  const std::string base = dir.MakeSub("m");
  for (int64_t v : {1, 2, 3}) Export(base, v);
  VersionPolicy all;
  all.kind = VersionPolicy::Kind::kAll;
  VersionPolicy latest2;
  latest2.latest = 2;
  VersionPolicy specific;
  specific.kind = VersionPolicy::Kind::kSpecific;
  specific.specific = {1, 3, 9};
  ModelRegistry registry;
  VersionWatcher watcher({{"all", base, all}, {"two", base, latest2}, {"some", base, specific}},
                         registry);
  REQUIRE(watcher.Poll().ok());
  CHECK(States(registry, "all") ==
        std::vector<std::string>{"1:AVAILABLE", "2:AVAILABLE", "3:AVAILABLE"});
  CHECK(States(registry, "two") == std::vector<std::string>{"2:AVAILABLE", "3:AVAILABLE"});
  CHECK(States(registry, "some") == std::vector<std::string>{"1:AVAILABLE", "3:AVAILABLE"});
  for (int64_t v : {1, 2, 3}) CHECK(Served(registry, "all", v) == Want(v));

  // Through the REST API: the newest by default, any available one by number.
  const ModelService service(std::shared_ptr<const ModelRegistry>(&registry, [](auto*) {}));
  const std::string body = R"({"instances": [{"user": 0, "item": 0}]})";
  const auto probability = [&](const std::string& path) {
    const HttpReply reply = service.Handle("POST", path, body);
    REQUIRE_MESSAGE(reply.status == 200, reply.body);
    return (*ParseJson(reply.body))["predictions"][0]["probability"][0].get<float>();
  };
  CHECK(probability("/v1/models/all:predict") == Want(3));
  CHECK(probability("/v1/models/all/versions/1:predict") == Want(1));
  CHECK(service.Handle("POST", "/v1/models/some/versions/2:predict", body).status == 404);
}

TEST_CASE("a base path that cannot be listed is NotFound, and changes nothing served") {
  TempDir dir;
  const std::string base = dir.MakeSub("m");
  Export(base, 1);
  ModelRegistry registry;
  VersionWatcher watcher({{"m", base, VersionPolicy{}}, {"x", dir.Sub("none"), VersionPolicy{}}},
                         registry);
  const absl::Status status = watcher.Poll();
  CHECK(status.code() == absl::StatusCode::kNotFound);
  CHECK(std::string(status.message())
            .find("model 'x': cannot list its base path '" + dir.Sub("none") + "'") == 0);
  CHECK(States(registry, "m") == std::vector<std::string>{"1:AVAILABLE"});  // polled all the same

  fs::rename(base, dir.Sub("moved"));
  CHECK(watcher.Poll().code() == absl::StatusCode::kNotFound);
  CHECK(States(registry, "m") == std::vector<std::string>{"1:AVAILABLE"});
}

TEST_CASE("started, the watcher picks up versions on its own until stopped") {
  TempDir dir;
  const std::string base = dir.MakeSub("m");
  Export(base, 1);
  ModelRegistry registry;
  ListingCounter env(base);
  VersionWatcher watcher({{"m", base, VersionPolicy{}}}, registry, &env);
  REQUIRE(watcher.Poll().ok());
  watcher.Start(std::chrono::milliseconds(20));
  Export(base, 2);
  // The next poll begins after the export and has published by the time the one after it
  // begins: its thread polls one pass after the other.
  const int64_t exported_at = env.listings().count();
  REQUIRE(env.listings().AwaitAtLeast(exported_at + 2, absl::Seconds(20)));
  CHECK(registry.Snapshot()->at("m").Newest()->version() == 2);
  watcher.Stop();
  const int64_t stopped_at = env.listings().count();
  Export(base, 3);
  // Stopped, it lists nothing more: not within five of its intervals (a wait for a poll that
  // must not come), and version 3 stays unseen.
  CHECK_FALSE(env.listings().AwaitAtLeast(stopped_at + 1, absl::Milliseconds(100)));
  CHECK(env.listings().count() == stopped_at);
  CHECK(registry.Snapshot()->at("m").Newest()->version() == 2);
  watcher.Stop();  // idempotent
}

}  // namespace
}  // namespace tessera::serving
