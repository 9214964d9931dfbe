// CheckpointManager on the in-memory Env (core/mem_env.h): retention, what counts as a complete
// checkpoint, and the manifest as the last file written. No disk, no cluster, no waiting.
#include "coordinator/checkpoint_manager.h"

#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/mem_env.h"
#include "schema/checkpoint_io.h"

namespace tessera {
namespace {

constexpr char kRoot[] = "/runs/one";

// Writes a one-variable checkpoint into `dir` through `env` as SaveCheckpoint does: the slice
// file, then the manifest. `between` runs after the slice and before the manifest.
absl::Status WriteCheckpoint(Env& env, const std::string& dir, int64_t step,
                             const std::function<void()>& between = nullptr) {
  TensorSlice slice;
  slice.variable = "w";
  slice.full_shape = Shape{2, 2};
  slice.value = Tensor(Shape{2, 2});
  for (int64_t k = 0; k < 4; ++k) slice.value.values()[k] = static_cast<float>(step + k);
  absl::Status status = WriteSliceFile(dir + "/w.slice", slice, &env);
  if (!status.ok()) return status;
  if (between) between();
  CheckpointVariable variable;
  variable.name = "w";
  variable.shape = Shape{2, 2};
  variable.slices = {{"w.slice", 0, 2}};
  CheckpointManifest manifest;
  manifest.global_step = step;
  manifest.variables = {variable};
  return WriteManifest(dir, manifest, &env);
}

absl::StatusOr<std::string> Save(CheckpointManager& manager, Env& env, int64_t step) {
  return manager.Save(
      step, [&env, step](const std::string& dir) { return WriteCheckpoint(env, dir, step); });
}

std::string Ckpt(int64_t step) { return absl::StrCat(kRoot, "/ckpt-", step); }

TEST_CASE("the manager keeps the newest max_to_keep checkpoints and removes the older ones") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 2, env.get());
  CHECK(manager.Checkpoints().empty());  // the root does not exist yet
  CHECK_FALSE(manager.Latest().has_value());
  for (int64_t step : {10, 20, 30, 40}) {
    absl::StatusOr<std::string> dir = Save(manager, *env, step);
    REQUIRE_MESSAGE(dir.ok(), dir.status().ToString());
    CHECK(*dir == Ckpt(step));
  }
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(30), Ckpt(40)});
  CHECK(manager.Latest() == Ckpt(40));
  CHECK_FALSE(env->FileExists(Ckpt(10)));
  CHECK_FALSE(env->FileExists(Ckpt(20)));
  CHECK(*env->ListDirectory(kRoot) == std::vector<std::string>{"ckpt-30", "ckpt-40"});
  // Steps order checkpoints by number, not by name ("ckpt-100" after "ckpt-40").
  REQUIRE(Save(manager, *env, 100).ok());
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(40), Ckpt(100)});
}

TEST_CASE("max_to_keep below 1 keeps one checkpoint, and a root's trailing slash changes nothing") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(absl::StrCat(kRoot, "/"), 0, env.get());
  REQUIRE(Save(manager, *env, 1).ok());
  absl::StatusOr<std::string> dir = Save(manager, *env, 2);
  REQUIRE(dir.ok());
  CHECK(*dir == Ckpt(2));
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(2)});
  CHECK(CheckpointManager(kRoot, 5, env.get()).Latest() == Ckpt(2));
}

TEST_CASE("Latest ignores incomplete checkpoints and names that are not checkpoints") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 3, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  // A newer checkpoint whose manifest never landed: its slice file only.
  REQUIRE(env->CreateDirectories(Ckpt(20)).ok());
  TensorSlice slice;
  slice.variable = "w";
  slice.full_shape = Shape{1};
  slice.value = Tensor(Shape{1});
  REQUIRE(WriteSliceFile(Ckpt(20) + "/w.slice", slice, env.get()).ok());
  // Look-alikes: not "ckpt-<digits>", or a file rather than a directory.
  for (const char* name :
       {"ckpt-", "ckpt-+30", "ckpt-3x", "ckpt--4", "notes", "ckpt-99999999999999999999"}) {
    REQUIRE(env->CreateDirectories(absl::StrCat(kRoot, "/", name)).ok());
    REQUIRE(WriteManifest(absl::StrCat(kRoot, "/", name), CheckpointManifest{}, env.get()).ok());
  }
  REQUIRE(WriteFileAtomically(*env, Ckpt(50), "a file, not a checkpoint", false).ok());
  CHECK(manager.Latest() == Ckpt(10));
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(10)});
}

TEST_CASE("a checkpoint becomes visible only when its manifest, written last, lands") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 3, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  std::optional<std::string> latest_before_manifest;
  absl::StatusOr<std::string> saved = manager.Save(20, [&](const std::string& dir) {
    return WriteCheckpoint(*env, dir, 20, [&] {
      // The slice file is there, the manifest not yet: still the previous checkpoint.
      CHECK(env->FileExists(dir + "/w.slice"));
      latest_before_manifest = manager.Latest();
    });
  });
  REQUIRE(saved.ok());
  CHECK(latest_before_manifest == Ckpt(10));
  CHECK(manager.Latest() == Ckpt(20));
}

TEST_CASE("a save whose manifest fails stays invisible, and the next save removes its remains") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 2, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  env->FailWritesUnder(Ckpt(20) + "/" + kManifestFile, absl::UnavailableError("disk full"));
  const absl::StatusOr<std::string> failed = Save(manager, *env, 20);
  CHECK(absl::IsUnavailable(failed.status()));
  env->FailWritesUnder("/", absl::OkStatus());
  CHECK(manager.Latest() == Ckpt(10));
  CHECK(env->FileExists(Ckpt(20) + "/w.slice"));  // left until a later save

  REQUIRE(Save(manager, *env, 30).ok());
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(10), Ckpt(30)});
  CHECK_FALSE(env->FileExists(Ckpt(20)));  // incomplete and older than the newest: removed
}

TEST_CASE("a save fails, changing nothing, when the Env cannot create its directory") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 2, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  env->FailWritesUnder(kRoot, absl::UnavailableError("read-only"));
  bool wrote = false;
  const absl::StatusOr<std::string> failed = manager.Save(20, [&](const std::string&) {
    wrote = true;
    return absl::OkStatus();
  });
  CHECK(absl::IsUnavailable(failed.status()));
  CHECK_FALSE(wrote);
  env->FailWritesUnder("/", absl::OkStatus());
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(10)});
}

}  // namespace
}  // namespace tessera
