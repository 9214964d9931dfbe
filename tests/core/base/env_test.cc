// The Env contract (tessera/env.h): one table of operations, errors included, run on the real
// filesystem and on the in-memory fake, which must give the same answers; then what only the
// fake has (its clock and injected failures).
#include "tessera/env.h"

#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/mem_env.h"
#include "tests/fifo_watchdog.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

// A fresh directory under the system temp dir, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera_env_XXXXXX").string();
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::string Outcome(const absl::Status& status) {
  return status.ok() ? "OK" : absl::StatusCodeToString(status.code());
}

std::string Outcome(const absl::StatusOr<std::vector<std::string>>& names) {
  if (!names.ok()) return Outcome(names.status());
  return absl::StrCat("[", absl::StrJoin(*names, " "), "]");
}

std::string Outcome(const absl::StatusOr<uint64_t>& size) {
  if (!size.ok()) return Outcome(size.status());
  return absl::StrCat(*size);
}

std::string Outcome(const absl::StatusOr<std::string>& bytes) {
  if (!bytes.ok()) return Outcome(bytes.status());
  std::string shown;
  for (char c : *bytes) shown += c == '\0' ? std::string("\\0") : std::string(1, c);
  return absl::StrCat("\"", shown, "\"");
}

std::string Outcome(bool b) { return b ? "true" : "false"; }

// One step of the table: what it does (under `root`, which exists and is empty at the start),
// and what it must give, on any Env.
struct Step {
  const char* what;
  std::function<std::string(Env& env, const std::string& root)> run;
  const char* expected;
};

absl::StatusOr<std::string> Read(Env& env, const std::string& path) {
  return ReadFileBounded(env, path, 1 << 20);
}

// The steps run in order, each on what the previous ones left.
const std::vector<Step>& Table() {
  static const auto* steps = new std::vector<Step>{
      {"create nested directories",
       [](Env& env, const std::string& r) { return Outcome(env.CreateDirectories(r + "/a/b/c")); },
       "OK"},
      {"create them again",
       [](Env& env, const std::string& r) { return Outcome(env.CreateDirectories(r + "/a/b/c")); },
       "OK"},
      {"a directory exists",
       [](Env& env, const std::string& r) { return Outcome(env.FileExists(r + "/a/b")); }, "true"},
      {"a missing path does not",
       [](Env& env, const std::string& r) { return Outcome(env.FileExists(r + "/a/zz")); },
       "false"},
      {"write a file atomically",
       [](Env& env, const std::string& r) {
         return Outcome(WriteFileAtomically(env, r + "/a/f", "hello", /*sync_directory=*/true));
       },
       "OK"},
      {"its size", [](Env& env, const std::string& r) { return Outcome(env.FileSize(r + "/a/f")); },
       "5"},
      {"read it whole", [](Env& env, const std::string& r) { return Outcome(Read(env, r + "/a/f")); },
       "\"hello\""},
      {"read it with a bound below its size",
       [](Env& env, const std::string& r) { return Outcome(ReadFileBounded(env, r + "/a/f", 4)); },
       "DATA_LOSS"},
      {"list a directory: sorted names, no temporary files left",
       [](Env& env, const std::string& r) { return Outcome(env.ListDirectory(r + "/a")); },
       "[b f]"},
      {"list a missing directory",
       [](Env& env, const std::string& r) { return Outcome(env.ListDirectory(r + "/nope")); },
       "NOT_FOUND"},
      {"list a file",
       [](Env& env, const std::string& r) { return Outcome(env.ListDirectory(r + "/a/f")); },
       "FAILED_PRECONDITION"},
      {"size of a missing file",
       [](Env& env, const std::string& r) { return Outcome(env.FileSize(r + "/a/zz")); },
       "NOT_FOUND"},
      {"size of a directory",
       [](Env& env, const std::string& r) { return Outcome(env.FileSize(r + "/a/b")); },
       "DATA_LOSS"},
      {"open a missing file",
       [](Env& env, const std::string& r) {
         return Outcome(env.NewRandomAccessFile(r + "/a/zz").status());
       },
       "NOT_FOUND"},
      {"open a directory as a file",
       [](Env& env, const std::string& r) {
         return Outcome(env.NewRandomAccessFile(r + "/a/b").status());
       },
       "DATA_LOSS"},
      {"open a path through a file",
       [](Env& env, const std::string& r) {
         return Outcome(env.NewRandomAccessFile(r + "/a/f/x").status());
       },
       "FAILED_PRECONDITION"},
      {"map a file",
       [](Env& env, const std::string& r) {
         auto region = env.NewReadOnlyMemoryRegion(r + "/a/f");
         if (!region.ok()) return Outcome(region.status());
         const bool aligned = reinterpret_cast<uintptr_t>((*region)->data()) % 8 == 0;
         return absl::StrCat(std::string((*region)->data(), (*region)->size()),
                             aligned ? "" : " (unaligned)");
       },
       "hello"},
      {"map a missing file",
       [](Env& env, const std::string& r) {
         return Outcome(env.NewReadOnlyMemoryRegion(r + "/a/zz").status());
       },
       "NOT_FOUND"},
      {"map a directory",
       [](Env& env, const std::string& r) {
         return Outcome(env.NewReadOnlyMemoryRegion(r + "/a/b").status());
       },
       "DATA_LOSS"},
      {"read past the end of a file",
       [](Env& env, const std::string& r) {
         auto file = env.NewRandomAccessFile(r + "/a/f");
         if (!file.ok()) return Outcome(file.status());
         char out[8];
         return Outcome((*file)->ReadAt(3, 5, out));
       },
       "DATA_LOSS"},
      {"read the middle of a file",
       [](Env& env, const std::string& r) {
         auto file = env.NewRandomAccessFile(r + "/a/f");
         if (!file.ok()) return Outcome(file.status());
         std::string out(3, '?');
         absl::Status status = (*file)->ReadAt(1, 3, out.data());
         return status.ok() ? out : Outcome(status);
       },
       "ell"},
      {"write atomically into a missing directory",
       [](Env& env, const std::string& r) {
         return Outcome(WriteFileAtomically(env, r + "/nope/f", "x", /*sync_directory=*/true));
       },
       "NOT_FOUND"},
      {"create directories through a file",
       [](Env& env, const std::string& r) { return Outcome(env.CreateDirectories(r + "/a/f/x")); },
       "FAILED_PRECONDITION"},
      {"create a directory where a file is",
       [](Env& env, const std::string& r) { return Outcome(env.CreateDirectories(r + "/a/f")); },
       "FAILED_PRECONDITION"},
      {"rename a file",
       [](Env& env, const std::string& r) { return Outcome(env.RenameFile(r + "/a/f", r + "/a/g")); },
       "OK"},
      {"the old name is gone",
       [](Env& env, const std::string& r) { return Outcome(env.FileExists(r + "/a/f")); }, "false"},
      {"the new name reads the same",
       [](Env& env, const std::string& r) { return Outcome(Read(env, r + "/a/g")); }, "\"hello\""},
      {"rename a missing file",
       [](Env& env, const std::string& r) { return Outcome(env.RenameFile(r + "/a/f", r + "/a/h")); },
       "NOT_FOUND"},
      {"rename into a missing directory",
       [](Env& env, const std::string& r) {
         return Outcome(env.RenameFile(r + "/a/g", r + "/nope/g"));
       },
       "NOT_FOUND"},
      {"rename a file over a directory",
       [](Env& env, const std::string& r) { return Outcome(env.RenameFile(r + "/a/g", r + "/a/b")); },
       "FAILED_PRECONDITION"},
      {"rename a file over another replaces it",
       [](Env& env, const std::string& r) {
         absl::Status status = WriteFileAtomically(env, r + "/a/h", "other", false);
         if (!status.ok()) return Outcome(status);
         status = env.RenameFile(r + "/a/h", r + "/a/g");
         if (!status.ok()) return Outcome(status);
         return absl::StrCat(Outcome(Read(env, r + "/a/g")), " ",
                             Outcome(env.ListDirectory(r + "/a")));
       },
       "\"other\" [b g]"},
      {"a writable file: a write past a gap, sync, close; the gap reads as zeros",
       [](Env& env, const std::string& r) {
         auto file = env.NewWritableFile(r + "/a/w");
         if (!file.ok()) return Outcome(file.status());
         absl::Status status = (*file)->WriteAt(2, "xy");
         if (status.ok()) status = (*file)->WriteAt(0, "a");
         if (status.ok()) status = (*file)->Sync();
         if (status.ok()) status = (*file)->Close();
         if (!status.ok()) return Outcome(status);
         return absl::StrCat(Outcome((*file)->WriteAt(0, "late")), " ",
                             Outcome(Read(env, r + "/a/w")));
       },
       "FAILED_PRECONDITION \"a\\0xy\""},
      {"a new writable file truncates an existing one",
       [](Env& env, const std::string& r) {
         auto file = env.NewWritableFile(r + "/a/w");
         if (!file.ok()) return Outcome(file.status());
         return absl::StrCat(Outcome((*file)->Close()), " ", Outcome(env.FileSize(r + "/a/w")));
       },
       "OK 0"},
      {"a writable file in a missing directory",
       [](Env& env, const std::string& r) {
         return Outcome(env.NewWritableFile(r + "/nope/w").status());
       },
       "NOT_FOUND"},
      {"a writable file over a directory",
       [](Env& env, const std::string& r) {
         return Outcome(env.NewWritableFile(r + "/a/b").status());
       },
       "FAILED_PRECONDITION"},
      {"an open file keeps reading what it opened after a rename replaces it",
       [](Env& env, const std::string& r) {
         absl::Status status = WriteFileAtomically(env, r + "/a/r", "one", false);
         if (!status.ok()) return Outcome(status);
         auto file = env.NewRandomAccessFile(r + "/a/r");
         if (!file.ok()) return Outcome(file.status());
         status = WriteFileAtomically(env, r + "/a/r", "two!", false);
         if (!status.ok()) return Outcome(status);
         std::string old(3, '?');
         status = (*file)->ReadAt(0, 3, old.data());
         if (!status.ok()) return Outcome(status);
         return absl::StrCat(old, " ", (*file)->size(), " ", Outcome(Read(env, r + "/a/r")));
       },
       "one 3 \"two!\""},
      {"a reader of a file truncated under it reports the loss",
       [](Env& env, const std::string& r) {
         auto file = env.NewRandomAccessFile(r + "/a/r");
         if (!file.ok()) return Outcome(file.status());
         auto truncate = env.NewWritableFile(r + "/a/r");
         if (!truncate.ok()) return Outcome(truncate.status());
         char out[4];
         return Outcome((*file)->ReadAt(0, 4, out));
       },
       "DATA_LOSS"},
      {"rename a directory with what it holds",
       [](Env& env, const std::string& r) {
         absl::Status status = env.CreateDirectories(r + "/d1/x");
         if (status.ok()) status = WriteFileAtomically(env, r + "/d1/x/f", "deep", false);
         if (status.ok()) status = env.RenameFile(r + "/d1", r + "/d2");
         if (!status.ok()) return Outcome(status);
         return absl::StrCat(Outcome(env.FileExists(r + "/d1")), " ",
                             Outcome(Read(env, r + "/d2/x/f")));
       },
       "false \"deep\""},
      {"rename a directory over a non-empty one",
       [](Env& env, const std::string& r) { return Outcome(env.RenameFile(r + "/a", r + "/d2")); },
       "FAILED_PRECONDITION"},
      {"sync a directory",
       [](Env& env, const std::string& r) { return Outcome(env.SyncDirectory(r + "/a")); }, "OK"},
      {"sync a missing directory",
       [](Env& env, const std::string& r) { return Outcome(env.SyncDirectory(r + "/nope")); },
       "NOT_FOUND"},
      {"remove a tree",
       [](Env& env, const std::string& r) {
         const std::string removed = Outcome(env.RemoveTree(r + "/a"));
         return absl::StrCat(removed, " ", Outcome(env.FileExists(r + "/a/b/c")), " ",
                             Outcome(env.FileExists(r + "/a")));
       },
       "OK false false"},
      {"remove it again",
       [](Env& env, const std::string& r) { return Outcome(env.RemoveTree(r + "/a")); },
       "NOT_FOUND"},
      {"remove a file",
       [](Env& env, const std::string& r) { return Outcome(env.RemoveTree(r + "/d2/x/f")); },
       "OK"},
      {"what is left, with no temporary file of a failed write",
       [](Env& env, const std::string& r) {
         return absl::StrCat(Outcome(env.ListDirectory(r)), " ",
                             Outcome(env.ListDirectory(r + "/d2/x")));
       },
       "[d2] []"},
  };
  return *steps;
}

void RunTable(Env& env, const std::string& root) {
  for (const Step& step : Table()) {
    const std::string what = step.what;
    CAPTURE(what);
    CHECK(step.run(env, root) == step.expected);
  }
}

TEST_CASE("the real Env follows the Env contract on every operation of the table") {
  TempDir dir;
  RunTable(*Env::Default(), dir.path());
}

TEST_CASE("the in-memory Env gives the same answers as the real one on the table") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  // The same root string as a real one, and a relative one: both name a directory of the fake.
  REQUIRE(env->CreateDirectories("/tmp/tessera_env_fake").ok());
  RunTable(*env, "/tmp/tessera_env_fake");
  REQUIRE(env->CreateDirectories("relative/root").ok());
  RunTable(*env, "relative/root");
}

TEST_CASE("the in-memory Env normalizes paths and lists nested names apart from look-alikes") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/x/b/c").ok());
  REQUIRE(env->CreateDirectories("/x/b-sibling").ok());
  REQUIRE(WriteFileAtomically(*env, "/x/b/./c/../f", "v", false).ok());
  CHECK(Outcome(Read(*env, "x//b/f")) == "\"v\"");
  CHECK(Outcome(env->ListDirectory("/x/b/")) == "[c f]");
  CHECK(Outcome(env->ListDirectory("/x")) == "[b b-sibling]");
  CHECK(Outcome(env->ListDirectory("/")) == "[x]");
  // "/x/b-sibling" sorts between "/x/b" and "/x/b/c": removal still takes the whole tree.
  REQUIRE(env->RemoveTree("/x/b").ok());
  CHECK(Outcome(env->ListDirectory("/x")) == "[b-sibling]");
  CHECK_FALSE(env->FileExists("/x/b/c"));
}

TEST_CASE("the in-memory Env serves writers and readers on several threads at once") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/shared").ok());
  constexpr int kThreads = 4;
  constexpr int kFiles = 50;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&env, &failures, t] {
      for (int i = 0; i < kFiles; ++i) {
        // Every thread also rewrites one common file: readers see one whole version or another.
        const std::string mine = absl::StrCat("/shared/t", t, "-", i);
        const std::string content = absl::StrCat("thread ", t, " file ", i);
        if (!WriteFileAtomically(*env, mine, content, true).ok()) ++failures[t];
        if (!WriteFileAtomically(*env, "/shared/common", content, false).ok()) ++failures[t];
        absl::StatusOr<std::string> common = ReadFileBounded(*env, "/shared/common", 100);
        if (!common.ok() || common->rfind("thread ", 0) != 0) ++failures[t];
        if (Outcome(ReadFileBounded(*env, mine, 100)) != absl::StrCat("\"", content, "\"")) {
          ++failures[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(failures == std::vector<int>(kThreads, 0));
  absl::StatusOr<std::vector<std::string>> names = env->ListDirectory("/shared");
  REQUIRE(names.ok());
  CHECK(names->size() == kThreads * kFiles + 1);  // no temporary file left behind
}

TEST_CASE("the real Env refuses a FIFO at once, for reading and for mapping") {
  TempDir dir;
  const std::string fifo = dir.path() + "/fifo";
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  // Should a reader wait for a writer (the bug), the watchdog plays the writer after 5 s, so the
  // test fails on the elapsed time instead of hanging.
  absl::Status read, mapped;
  std::chrono::steady_clock::duration elapsed;
  {
    testing::FifoWatchdog watchdog(fifo, absl::Seconds(5));
    const auto start = std::chrono::steady_clock::now();
    read = Env::Default()->NewRandomAccessFile(fifo).status();
    mapped = Env::Default()->NewReadOnlyMemoryRegion(fifo).status();
    elapsed = std::chrono::steady_clock::now() - start;
    CHECK(!watchdog.fired());
  }
  CHECK(absl::IsDataLoss(read));
  CHECK(std::string(read.message()).find("is not a regular file") != std::string::npos);
  CHECK(absl::IsDataLoss(mapped));
  CHECK(elapsed < std::chrono::seconds(2));
  // A regular file opened the same way reads normally (O_NONBLOCK is cleared again).
  REQUIRE(WriteFileAtomically(*Env::Default(), dir.path() + "/f", "data", false).ok());
  auto file = Env::Default()->NewRandomAccessFile(dir.path() + "/f");
  REQUIRE(file.ok());
  char out[4];
  CHECK((*file)->ReadAt(0, 4, out).ok());
  CHECK(std::string(out, 4) == "data");
}

TEST_CASE("the real Env removes a symbolic link, never what it points to") {
  TempDir outside;
  TempDir dir;
  REQUIRE(WriteFileAtomically(*Env::Default(), outside.path() + "/keep", "kept", false).ok());
  REQUIRE(Env::Default()->CreateDirectories(dir.path() + "/tree").ok());
  std::filesystem::create_directory_symlink(outside.path(), dir.path() + "/tree/link");
  std::filesystem::create_directory_symlink(outside.path(), dir.path() + "/top");
  CHECK(Env::Default()->RemoveTree(dir.path() + "/tree").ok());
  CHECK(Env::Default()->RemoveTree(dir.path() + "/top").ok());
  CHECK(Outcome(Env::Default()->ListDirectory(dir.path())) == "[]");
  CHECK(Outcome(Read(*Env::Default(), outside.path() + "/keep")) == "\"kept\"");
}

TEST_CASE("ModifiedTime is when a file was last written, on the real Env and in memory") {
  TempDir dir;
  const absl::Time before = absl::Now() - absl::Seconds(5);  // a coarse filesystem clock
  REQUIRE(WriteFileAtomically(*Env::Default(), dir.path() + "/f", "x", false).ok());
  const absl::Time written = testing::ValueOrDie(Env::Default()->ModifiedTime(dir.path() + "/f"));
  CHECK(written >= before);
  CHECK(written <= absl::Now() + absl::Seconds(5));
  CHECK(absl::IsNotFound(Env::Default()->ModifiedTime(dir.path() + "/missing").status()));
  CHECK(absl::IsDataLoss(Env::Default()->ModifiedTime(dir.path()).status()));

  MemEnv env(absl::FromUnixSeconds(1000));
  REQUIRE(env.CreateDirectories("/d").ok());
  {
    auto file = env.NewWritableFile("/d/f");
    REQUIRE(file.ok());
    env.AdvanceClock(absl::Seconds(5));
    REQUIRE((*file)->WriteAt(0, "abc").ok());  // written at 1005
    env.AdvanceClock(absl::Seconds(5));
    REQUIRE((*file)->Close().ok());
  }
  CHECK(testing::ValueOrDie(env.ModifiedTime("/d/f")) == absl::FromUnixSeconds(1005));
  REQUIRE(env.RenameFile("/d/f", "/d/g").ok());  // a rename is no write
  CHECK(testing::ValueOrDie(env.ModifiedTime("/d/g")) == absl::FromUnixSeconds(1005));
  env.AdvanceClock(absl::Seconds(5));
  REQUIRE(WriteFileAtomically(env, "/d/g", "new", false).ok());
  CHECK(testing::ValueOrDie(env.ModifiedTime("/d/g")) == absl::FromUnixSeconds(1015));
  CHECK(absl::IsNotFound(env.ModifiedTime("/d/f").status()));
  CHECK(absl::IsDataLoss(env.ModifiedTime("/d").status()));
}

TEST_CASE("the real Env makes directories as mkdir -p does: 0777 less the umask") {
  TempDir dir;
  struct stat info;
  const mode_t old_mask = ::umask(002);  // a group that shares its directories
  const absl::Status made = Env::Default()->CreateDirectories(dir.path() + "/ckpt/ckpt-10");
  ::umask(022);
  const absl::Status usual = Env::Default()->CreateDirectories(dir.path() + "/private");
  ::umask(old_mask);
  REQUIRE(made.ok());
  REQUIRE(usual.ok());
  for (const char* sub : {"/ckpt", "/ckpt/ckpt-10"}) {
    REQUIRE(::stat((dir.path() + sub).c_str(), &info) == 0);
    CHECK_MESSAGE((info.st_mode & 0777) == 0775, sub);  // the group may write into it
  }
  REQUIRE(::stat((dir.path() + "/private").c_str(), &info) == 0);
  CHECK((info.st_mode & 0777) == 0755);
}

// Writes a file of a few MiB as a slice file is written and worse: pieces of any size in order,
// holes, rewrites of bytes still staged and of bytes long written (a header, written last), a
// Sync in the middle; what is read back must be what a plain file would hold, on a disk's
// filesystem, on tmpfs and in memory.
void CheckWritesReadBack(Env& env, const std::string& path, uint32_t seed) {
  std::mt19937 random(seed);
  auto below = [&random](uint64_t n) {
    return std::uniform_int_distribution<uint64_t>(0, n - 1)(random);
  };
  std::string expected;
  auto file = env.NewWritableFile(path);
  REQUIRE(file.ok());
  auto write = [&](uint64_t offset, size_t size) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>('a' + below(26));
    if (expected.size() < offset + size) expected.resize(offset + size, '\0');
    expected.replace(offset, size, bytes);
    REQUIRE((*file)->WriteAt(offset, bytes).ok());
  };
  uint64_t at = 200;  // a header's room, written last
  bool synced = false;
  while (at < (uint64_t{7} << 19)) {
    const uint64_t kind = below(20);
    if (kind == 0) {
      at += below(uint64_t{3} << 19);  // a hole, up to 1.5 MiB
    } else if (kind == 1 && at > 0) {
      write(below(at), static_cast<size_t>(1 + below(5000)));  // a rewrite behind
      continue;
    } else if (kind == 2 && !synced && at > (uint64_t{5} << 19)) {
      REQUIRE((*file)->Sync().ok());
      synced = true;
      continue;
    }
    const size_t size = static_cast<size_t>(1 + below(kind < 10 ? 4096 : 300000));
    write(at, size);
    at += size;
  }
  write(0, 200);
  REQUIRE((*file)->Sync().ok());
  REQUIRE((*file)->Close().ok());
  auto read = ReadFileBounded(env, path, int64_t{64} << 20);
  REQUIRE(read.ok());
  CHECK(read->size() == expected.size());
  CHECK(*read == expected);
}

TEST_CASE("files read back as written: any order of offsets, holes, rewrites, a Sync between") {
  TempDir dir;
  MemEnv mem;
  REQUIRE(mem.CreateDirectories("/mem").ok());
  for (uint32_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    CheckWritesReadBack(*Env::Default(), absl::StrCat(dir.path(), "/f", seed), seed);
    CheckWritesReadBack(mem, absl::StrCat("/mem/f", seed), seed);
  }
  if (std::filesystem::is_directory("/dev/shm")) {  // tmpfs
    std::string pattern = "/dev/shm/tessera_env_XXXXXX";
    REQUIRE(mkdtemp(pattern.data()) != nullptr);
    CheckWritesReadBack(*Env::Default(), pattern + "/f", 7);
    std::filesystem::remove_all(pattern);
  }
}

TEST_CASE("the real Env's clock is absl::Now") {
  const absl::Time before = absl::Now();
  const absl::Time now = Env::Default()->Now();
  CHECK(before <= now);
  CHECK(now <= absl::Now());
}

TEST_CASE("the in-memory Env's clock moves only when the test moves it") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  CHECK(env->Now() == absl::UnixEpoch());
  CHECK(env->Now() == absl::UnixEpoch());
  env->AdvanceClock(absl::Seconds(90));
  CHECK(env->Now() == absl::UnixEpoch() + absl::Seconds(90));
  const absl::Time later = absl::FromUnixSeconds(1'800'000'000);
  env->SetNow(later);
  CHECK(env->Now() == later);
}

TEST_CASE("an atomic write that fails part way leaves the old file whole and no temporary file") {
  std::unique_ptr<MemEnv> env = NewMemEnv();
  REQUIRE(env->CreateDirectories("/d").ok());
  REQUIRE(WriteFileAtomically(*env, "/d/file", "old", true).ok());

  SUBCASE("the write itself fails") {
    const absl::Status status = WriteFileAtomically(
        *env, "/d/file",
        [](WritableFile& out) -> absl::Status {
          absl::Status first = out.WriteAt(0, "new");
          if (!first.ok()) return first;
          return absl::UnavailableError("the disk went away");
        },
        true);
    CHECK(absl::IsUnavailable(status));
  }
  SUBCASE("the Env refuses every change under the directory") {
    env->FailWritesUnder("/d/", absl::UnavailableError("injected"));
    const absl::Status status = WriteFileAtomically(*env, "/d/file", "new", true);
    CHECK(absl::IsUnavailable(status));
    CHECK(status.message().find("injected") != absl::string_view::npos);
    CHECK(absl::IsUnavailable(env->CreateDirectories("/d/sub")));
    CHECK(absl::IsUnavailable(env->RemoveTree("/d/file")));
    env->FailWritesUnder("/d/", absl::OkStatus());
  }
  CHECK(Outcome(Read(*env, "/d/file")) == "\"old\"");
  CHECK(Outcome(env->ListDirectory("/d")) == "[file]");
}

}  // namespace
}  // namespace tessera
