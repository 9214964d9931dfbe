// MemEnv: an Env (tessera/env.h) held entirely in memory, for tests — LevelDB's NewMemEnv. Files
// and directories live in one map; the clock stands still until the test moves it; an error can be
// injected into the operations on chosen paths.
//
// It behaves like Env::Default() on every operation and error of the Env contract
// (tests/core/base/env_test.cc runs the same table on both). Paths are '/'-separated; "." and empty
// components are ignored and ".." goes up, and relative paths are taken from the root, so "a/b"
// and "/a/b" name the same file. The root always exists (removing it is InvalidArgument).
//
// Durability is not modelled: Sync and SyncDirectory only check that their target exists. An
// open RandomAccessFile keeps reading the file it opened, even after a rename replaces it or a
// removal unlinks it (as POSIX does); writes through another handle to that same file show. A
// memory region is a copy of the file's bytes when it was opened.
//
// Thread-safety: every operation, on the Env or its files, takes one internal lock.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tessera/env.h"

namespace tessera {

class MemEnv : public Env {
 public:
  // Starts empty (only the root) at `now`.
  explicit MemEnv(absl::Time now = absl::UnixEpoch());
  ~MemEnv() override;

  // The test's clock: Now() returns what was set last, moved by every Advance.
  void SetNow(absl::Time now);
  void AdvanceClock(absl::Duration by);

  // From now on, every operation that would change a path starting with `path_prefix` (create,
  // write, sync, close, rename from or to it, remove, create a directory) fails with `error`
  // before it changes anything. An OK `error` clears the injection. Reads are never failed.
  //
  // Example: env.FailWritesUnder("/ckpt/ckpt-30/manifest", absl::UnavailableError("disk"));
  void FailWritesUnder(std::string path_prefix, absl::Status error);

  absl::Status CreateDirectories(const std::string& path) override;
  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override;
  bool FileExists(const std::string& path) override;
  absl::StatusOr<uint64_t> FileSize(const std::string& path) override;
  absl::StatusOr<absl::Time> ModifiedTime(const std::string& path) override;
  absl::Status RemoveTree(const std::string& path) override;
  absl::Status RenameFile(const std::string& from, const std::string& to) override;
  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override;
  absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> NewReadOnlyMemoryRegion(
      const std::string& path) override;
  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override;
  absl::Status SyncDirectory(const std::string& path) override;
  absl::Time Now() override;

  struct State;  // shared with the open files

 private:
  std::shared_ptr<State> state_;
};

// A new, empty MemEnv whose clock starts at the Unix epoch.
std::unique_ptr<MemEnv> NewMemEnv();

}  // namespace tessera
