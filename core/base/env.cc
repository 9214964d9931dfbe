#include "tessera/env.h"

#include <unistd.h>

#include <atomic>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteFileAtomically(Env& env, const std::string& path,
                                 absl::FunctionRef<absl::Status(WritableFile&)> write,
                                 bool sync_directory) {
  // Unique among concurrent writers of this process (the counter) and of other processes (the
  // pid), so two writers of one path never share a temporary file.
  static std::atomic<uint64_t> counter{0};
  const std::string temp = absl::StrCat(path, ".tmp-", ::getpid(), "-", counter++);
  absl::Status status = [&]() -> absl::Status {
    TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> file, env.NewWritableFile(temp));
    TESSERA_RETURN_IF_ERROR(write(*file));
    TESSERA_RETURN_IF_ERROR(file->Sync());
    TESSERA_RETURN_IF_ERROR(file->Close());
    return env.RenameFile(temp, path);
  }();
  if (!status.ok()) {
    env.RemoveTree(temp).IgnoreError();  // may not exist: the first step failed
    return status;
  }
  if (sync_directory) return env.SyncDirectory(DirectoryOf(path));
  return absl::OkStatus();
}

absl::Status WriteFileAtomically(Env& env, const std::string& path, absl::string_view bytes,
                                 bool sync_directory) {
  return WriteFileAtomically(
      env, path, [bytes](WritableFile& out) { return out.WriteAt(0, bytes); }, sync_directory);
}

absl::StatusOr<std::string> ReadFileBounded(Env& env, const std::string& path,
                                            int64_t max_bytes) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env.NewRandomAccessFile(path));
  if (max_bytes < 0 || file->size() > static_cast<uint64_t>(max_bytes)) {
    return absl::DataLossError(absl::StrCat(path, " has ", file->size(), " bytes, more than the ",
                                            max_bytes, " allowed"));
  }
  std::string bytes(static_cast<size_t>(file->size()), '\0');
  TESSERA_RETURN_IF_ERROR(file->ReadAt(0, bytes.size(), bytes.data()));
  return bytes;
}

}  // namespace tessera
