// CheckpointManager on the in-memory Env (core/base/mem_env.h): retention, what counts as a
// complete checkpoint, saves through a temporary directory (a failed save leaves nothing, a crashed
// one's remains are cleaned), strict step names, and one run per root (fresh runs, overwrite,
// resume). No disk, no cluster, no waiting.
#include "coordinator/checkpoint/checkpoint_manager.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/mem_env.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "tessera/status.h"
#include "tests/captured_log.h"
#include "tests/coordinator/checkpoint/failing_env.h"

namespace tessera {
namespace {

constexpr char kRoot[] = "/runs/one";

// Writes a one-variable checkpoint of run `run` into `dir` through `env` as SaveCheckpoint does:
// the slice file, then the manifest. `between` runs after the slice and before the manifest.
absl::Status WriteCheckpoint(Env& env, const std::string& dir, int64_t step, const RunId& run,
                             const std::function<void()>& between = nullptr) {
  TensorSlice slice;
  slice.variable = "w";
  slice.full_shape = Shape{2, 2};
  slice.value = Tensor(Shape{2, 2});
  for (int64_t k = 0; k < 4; ++k) slice.value.values()[k] = static_cast<float>(step + k);
  slice.checkpoint = {run, step};
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
  manifest.run_id = run;
  return WriteManifest(dir, manifest, &env);
}

absl::StatusOr<std::string> Save(CheckpointManager& manager, Env& env, int64_t step) {
  return manager.Save(step, [&env, &manager, step](const std::string& dir) {
    return WriteCheckpoint(env, dir, step, manager.run_id());
  });
}

std::string Ckpt(int64_t step) { return absl::StrCat(kRoot, "/ckpt-", step); }

std::vector<std::string> Names(Env& env, const std::string& dir = kRoot) {
  absl::StatusOr<std::vector<std::string>> names = env.ListDirectory(dir);
  REQUIRE_MESSAGE(names.ok(), names.status().ToString());
  return *names;
}

RunId RunOf(Env& env, const std::string& dir) {
  absl::StatusOr<CheckpointManifest> manifest = ReadManifest(dir, &env);
  REQUIRE_MESSAGE(manifest.ok(), manifest.status().ToString());
  return manifest->run_id;
}

bool Contains(const absl::Status& status, absl::string_view text) {
  return absl::StrContains(status.message(), text);
}

using testing::CapturedLog;
using testing::FailingEnv;

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
  // Nothing else is left: no older checkpoint, no temporary directory.
  CHECK(Names(*env) == std::vector<std::string>{"ckpt-30", "ckpt-40"});
  CHECK(RunOf(*env, Ckpt(40)) == manager.run_id());
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

TEST_CASE(
    "only ckpt-<step> in plain decimal is a checkpoint, look-alikes are ignored and warned once") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 3, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  // Complete-looking directories whose names are no step: too large for an int64 (it was always
  // "the latest"), a leading zero (ckpt-010 and ckpt-10 would be two checkpoints of one step),
  // signs, garbage, nothing.
  const std::vector<std::string> look_alikes = {"ckpt-99999999999999999999",
                                                "ckpt-9223372036854775808",
                                                "ckpt-010",
                                                "ckpt-00",
                                                "ckpt-+30",
                                                "ckpt--4",
                                                "ckpt-3x",
                                                "ckpt- 7",
                                                "ckpt-"};
  for (const std::string& name : look_alikes) {
    const std::string dir = absl::StrCat(kRoot, "/", name);
    REQUIRE(env->CreateDirectories(dir).ok());
    REQUIRE(WriteCheckpoint(*env, dir, 99, manager.run_id()).ok());
  }
  // A file where a checkpoint directory would be, and a user's own file.
  REQUIRE(WriteFileAtomically(*env, Ckpt(50), "a file, not a checkpoint", false).ok());
  REQUIRE(WriteFileAtomically(*env, absl::StrCat(kRoot, "/notes"), "mine", false).ok());
  CapturedLog log;
  CHECK(manager.Latest() == Ckpt(10));
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(10)});
  for (const std::string& name : look_alikes) {
    CAPTURE(name);
    CHECK(absl::StrContains(log.text(), absl::StrCat("ignoring ", kRoot, "/", name, ": ")));
  }
  CHECK(absl::StrContains(log.text(),
                          absl::StrCat("ignoring ", Ckpt(50), ": not a checkpoint directory")));
  CHECK_FALSE(absl::StrContains(log.text(), "notes"));
  const std::string once = log.text();
  CHECK(manager.Latest() == Ckpt(10));
  CHECK(log.text() == once);  // warned once per name, not at every look

  // The largest step that is one still counts.
  const std::string max_step = absl::StrCat(kRoot, "/ckpt-9223372036854775807");
  REQUIRE(env->CreateDirectories(max_step).ok());
  REQUIRE(WriteCheckpoint(*env, max_step, 1, manager.run_id()).ok());
  CHECK(manager.Latest() == max_step);

  // Saves leave every look-alike and the user's file alone, and refuse to replace the file.
  REQUIRE(Save(manager, *env, 20).ok());
  for (const std::string& name : look_alikes)
    CHECK(env->FileExists(absl::StrCat(kRoot, "/", name)));
  CHECK(env->FileExists(absl::StrCat(kRoot, "/notes")));
  const absl::StatusOr<std::string> blocked = Save(manager, *env, 50);
  CHECK(absl::IsFailedPrecondition(blocked.status()));
  CHECK(Contains(blocked.status(), absl::StrCat(Ckpt(50), " is in the way")));
  CHECK(*ReadFileBounded(*env, Ckpt(50), 100) == "a file, not a checkpoint");
  CHECK(absl::IsInvalidArgument(Save(manager, *env, -1).status()));
}

TEST_CASE("a checkpoint becomes visible only when its directory, manifest included, is renamed") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 3, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  std::optional<std::string> latest_before_rename;
  std::string written_into;
  absl::StatusOr<std::string> saved = manager.Save(20, [&](const std::string& dir) {
    written_into = dir;
    absl::Status status = WriteCheckpoint(*env, dir, 20, manager.run_id(),
                                          [&] { CHECK(env->FileExists(dir + "/w.slice")); });
    // Slice and manifest are written, the directory not renamed yet: still the previous one.
    latest_before_rename = manager.Latest();
    return status;
  });
  REQUIRE(saved.ok());
  CHECK(absl::StartsWith(written_into, Ckpt(20) + ".tmp-"));
  CHECK(latest_before_rename == Ckpt(10));
  CHECK(manager.Latest() == Ckpt(20));
  CHECK_FALSE(env->FileExists(written_into));
}

TEST_CASE("a save that fails (a full disk) removes what it wrote, and the next save succeeds") {
  std::unique_ptr<MemEnv> mem = NewMemEnv();
  FailingEnv env(mem.get());
  CheckpointManager manager(kRoot, 2, &env);
  REQUIRE(Save(manager, env, 10).ok());
  // The failures hit the slice file, the manifest, or the temporary directory itself.
  for (const char* fragment : {kManifestFile, "w.slice", "/ckpt-20"}) {
    CAPTURE(fragment);
    env.Fail(fragment, absl::ResourceExhaustedError("no space left on device"));
    const absl::StatusOr<std::string> failed = Save(manager, env, 20);
    CHECK(absl::IsResourceExhausted(failed.status()));
    CHECK(Contains(failed.status(), absl::StrCat("saving the checkpoint of step 20 into ", kRoot)));
    env.Fail("", absl::OkStatus());
    CHECK(Names(env) == std::vector<std::string>{"ckpt-10"});  // nothing of the failed save
    CHECK(manager.Latest() == Ckpt(10));
  }
  REQUIRE(Save(manager, env, 20).ok());
  REQUIRE(Save(manager, env, 30).ok());
  CHECK(Names(env) == std::vector<std::string>{"ckpt-20", "ckpt-30"});
}

TEST_CASE(
    "what a crashed process left is removed by the next save, and an incomplete ckpt-N "
    "in the way is replaced") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 3, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  // A save that died after its slice: a temporary directory. An older build's save that died
  // half way: ckpt-<step> without a manifest, one newer than the newest checkpoint and one at
  // the step about to be saved.
  for (const std::string& dir :
       {absl::StrCat(kRoot, "/ckpt-20.tmp-00000000deadbeef"), Ckpt(25), Ckpt(30)}) {
    REQUIRE(env->CreateDirectories(dir).ok());
    REQUIRE(WriteFileAtomically(*env, dir + "/w.slice", "half a slice", false).ok());
  }
  CHECK(manager.Latest() == Ckpt(10));
  absl::StatusOr<std::string> saved = Save(manager, *env, 30);
  REQUIRE_MESSAGE(saved.ok(), saved.status().ToString());
  CHECK(Names(*env) == std::vector<std::string>{"ckpt-10", "ckpt-30"});
  CHECK(RunOf(*env, Ckpt(30)) == manager.run_id());
}

TEST_CASE(
    "a complete checkpoint is never overwritten: this run's is left alone, another run's "
    "stops the save") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 3, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  const std::string before = *ReadFileBounded(*env, Ckpt(10) + "/w.slice", 1 << 20);
  bool wrote = false;
  absl::StatusOr<std::string> again = manager.Save(10, [&](const std::string&) {
    wrote = true;
    return absl::OkStatus();
  });
  REQUIRE(again.ok());
  CHECK(*again == Ckpt(10));
  CHECK_FALSE(wrote);
  CHECK(*ReadFileBounded(*env, Ckpt(10) + "/w.slice", 1 << 20) == before);

  // A second run saving into the same root is refused, having written nothing.
  CheckpointManager other(kRoot, 3, env.get());
  CHECK(absl::IsFailedPrecondition(Save(other, *env, 20).status()));
  CHECK(Names(*env) == std::vector<std::string>{"ckpt-10"});
  // A checkpoint of another run appears (copied in): this run's next save refuses to write.
  const std::string foreign = Ckpt(15);
  REQUIRE(env->CreateDirectories(foreign).ok());
  REQUIRE(WriteCheckpoint(*env, foreign, 15, RunId::Random()).ok());
  const absl::StatusOr<std::string> mixed = Save(manager, *env, 20);
  CHECK(absl::IsFailedPrecondition(mixed.status()));
  CHECK(Contains(mixed.status(), "two runs are saving checkpoints into one directory"));
  CHECK(Contains(mixed.status(), foreign));
  CHECK(Names(*env) == std::vector<std::string>{"ckpt-10", "ckpt-15"});
}

TEST_CASE(
    "a checkpoint directory renamed to another step is neither resumed nor kept as that step") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager manager(kRoot, 3, env.get());
  REQUIRE(Save(manager, *env, 10).ok());
  REQUIRE(env->RenameFile(Ckpt(10), Ckpt(20)).ok());
  const absl::Status resumed = CheckpointManager(kRoot, 3, env.get()).ResumeRun().status();
  CHECK(absl::IsDataLoss(resumed));
  CHECK(Contains(resumed, absl::StrCat(Ckpt(20), " holds the checkpoint of step 10")));
  const absl::StatusOr<std::string> saved = Save(manager, *env, 20);
  CHECK(absl::IsFailedPrecondition(saved.status()));
  CHECK(Contains(saved.status(), "holds the checkpoint of step 10, not of step 20"));
}

TEST_CASE("a fresh run refuses a root holding checkpoints, unless told to overwrite them") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager old_run(kRoot, 3, env.get());
  for (int64_t step : {1000, 2000, 3000}) REQUIRE(Save(old_run, *env, step).ok());
  REQUIRE(WriteFileAtomically(*env, absl::StrCat(kRoot, "/notes"), "mine", false).ok());
  REQUIRE(env->CreateDirectories(absl::StrCat(kRoot, "/ckpt-4000.tmp-0000000000000001")).ok());
  const std::vector<std::string> before = Names(*env);

  CheckpointManager new_run(kRoot, 3, env.get());
  const absl::Status refused = new_run.BeginFreshRun(/*overwrite=*/false);
  CHECK(absl::IsFailedPrecondition(refused));
  CHECK(Contains(refused, absl::StrCat(kRoot, " already holds 3 checkpoint(s) (", Ckpt(1000),
                                       " .. ", Ckpt(3000), ")")));
  CHECK(Names(*env) == before);

  REQUIRE(new_run.BeginFreshRun(/*overwrite=*/true).ok());
  CHECK(new_run.run_id() != old_run.run_id());
  CHECK(Names(*env) == std::vector<std::string>{"notes"});  // only the checkpoints went
  // The new run's first checkpoint, of a lower step, is kept, and is what a resume continues.
  REQUIRE(Save(new_run, *env, 400).ok());
  CHECK(new_run.Checkpoints() == std::vector<std::string>{Ckpt(400)});
  CheckpointManager resumed(kRoot, 3, env.get());
  absl::StatusOr<std::optional<std::string>> latest = resumed.ResumeRun();
  REQUIRE(latest.ok());
  CHECK(*latest == Ckpt(400));
  CHECK(resumed.run_id() == new_run.run_id());

  // A root with nothing complete in it starts fresh without being told.
  std::unique_ptr<MemEnv> empty = NewMemEnv();
  CHECK(CheckpointManager("/runs/new", 3, empty.get()).BeginFreshRun(false).ok());
  CHECK(empty->FileExists("/runs/new"));
}

TEST_CASE("a run that cannot write its root stops before training, naming the root") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  env->FailWritesUnder(kRoot, absl::PermissionDeniedError("read-only"));
  CheckpointManager manager(kRoot, 3, env.get());
  const absl::Status fresh = manager.BeginFreshRun(false);
  CHECK(absl::IsPermissionDenied(fresh));
  CHECK(Contains(fresh, absl::StrCat("checkpoints cannot be written into ", kRoot)));
  CHECK(absl::IsPermissionDenied(manager.ResumeRun().status()));
}

TEST_CASE("an overwrite that cannot delete an old checkpoint refuses to start, naming it") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager old_run(kRoot, 3, env.get());
  for (int64_t step : {10, 20}) REQUIRE(Save(old_run, *env, step).ok());
  env->FailWritesUnder(Ckpt(20), absl::PermissionDeniedError("not yours"));
  CheckpointManager new_run(kRoot, 3, env.get());
  const absl::Status status = new_run.BeginFreshRun(true);
  CHECK(absl::IsPermissionDenied(status));
  CHECK(Contains(status, absl::StrCat("deleting the old checkpoint ", Ckpt(20))));
  env->FailWritesUnder("/", absl::OkStatus());
  // What could not be deleted is whole: still a complete checkpoint of the old run.
  CHECK(new_run.Checkpoints() == std::vector<std::string>{Ckpt(20)});
  CHECK(RunOf(*env, Ckpt(20)) == old_run.run_id());
}

TEST_CASE("a resumed run adopts its checkpoints' run, and refuses a root mixing several runs") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CheckpointManager first(kRoot, 5, env.get());
  CHECK(*first.ResumeRun() == std::nullopt);  // nothing to resume: a fresh run
  for (int64_t step : {10, 20}) REQUIRE(Save(first, *env, step).ok());

  CheckpointManager second(kRoot, 5, env.get());
  absl::StatusOr<std::optional<std::string>> latest = second.ResumeRun();
  REQUIRE(latest.ok());
  CHECK(*latest == Ckpt(20));
  CHECK(second.run_id() == first.run_id());
  REQUIRE(Save(second, *env, 30).ok());  // its own run's checkpoints are no strangers

  // Another run's checkpoint lands in the root: which run to continue cannot be told.
  REQUIRE(env->CreateDirectories(Ckpt(40)).ok());
  const RunId stranger = RunId::Random();
  REQUIRE(WriteCheckpoint(*env, Ckpt(40), 40, stranger).ok());
  const absl::Status mixed = CheckpointManager(kRoot, 5, env.get()).ResumeRun().status();
  CHECK(absl::IsFailedPrecondition(mixed));
  CHECK(Contains(mixed, "holds the checkpoints of 2 runs"));
  CHECK(Contains(mixed, absl::StrCat("run ", stranger.ToString(), ": ", Ckpt(40))));
  CHECK(Contains(mixed, absl::StrCat("run ", first.run_id().ToString(), ": ", Ckpt(10), ", ",
                                     Ckpt(20), ", ", Ckpt(30))));
}

TEST_CASE("checkpoints without a run id are resumed under a new one, with a warning") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  for (int64_t step : {10, 20}) {
    REQUIRE(env->CreateDirectories(Ckpt(step)).ok());
    REQUIRE(WriteCheckpoint(*env, Ckpt(step), step, RunId{}).ok());  // as older builds wrote
  }
  CapturedLog log;
  CheckpointManager manager(kRoot, 2, env.get());
  absl::StatusOr<std::optional<std::string>> latest = manager.ResumeRun();
  REQUIRE(latest.ok());
  CHECK(*latest == Ckpt(20));
  CHECK_FALSE(manager.run_id().empty());
  CHECK(absl::StrContains(log.text(), "have no run id"));
  CHECK(absl::StrContains(log.text(), manager.run_id().ToString()));
  // They belong to no run: kept and counted with this run's own.
  REQUIRE(Save(manager, *env, 30).ok());
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(20), Ckpt(30)});
}

TEST_CASE(
    "retention never removes the checkpoint just saved, and what it cannot remove stays whole") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  for (int64_t step : {100, 200}) {
    REQUIRE(env->CreateDirectories(Ckpt(step)).ok());
    REQUIRE(WriteCheckpoint(*env, Ckpt(step), step, RunId{}).ok());
  }
  CheckpointManager manager(kRoot, 2, env.get());
  REQUIRE(Save(manager, *env, 50).ok());  // older than what is there: still kept
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(50), Ckpt(100), Ckpt(200)});

  env->FailWritesUnder(Ckpt(50), absl::PermissionDeniedError("busy"));
  REQUIRE(Save(manager, *env, 300).ok());  // retention is best effort
  env->FailWritesUnder("/", absl::OkStatus());
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(50), Ckpt(200), Ckpt(300)});
  CHECK(RunOf(*env, Ckpt(50)) == manager.run_id());  // whole, manifest and all
  REQUIRE(Save(manager, *env, 400).ok());
  CHECK(manager.Checkpoints() == std::vector<std::string>{Ckpt(300), Ckpt(400)});
}

}  // namespace
}  // namespace tessera
