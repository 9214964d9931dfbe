#include "schema/internal/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace schema_internal {
namespace {

absl::Status ErrnoError(int error, absl::string_view action, absl::string_view path) {
  return absl::ErrnoToStatus(error, absl::StrCat(action, " ", path));
}

// Closes a descriptor on every path out of a function.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  // Closes now, reporting the error close() may carry (e.g. a delayed write error).
  int Close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

std::string DirectoryOf(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "writing", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

absl::Status WriteAndSync(const std::string& temp, absl::string_view bytes) {
  FileDescriptor fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoError(errno, "creating", temp);
  absl::Status status = WriteAll(fd.get(), bytes, temp);
  if (!status.ok()) return status;
  if (::fsync(fd.get()) != 0) return ErrnoError(errno, "syncing", temp);
  if (fd.Close() != 0) return ErrnoError(errno, "closing", temp);
  return absl::OkStatus();
}

absl::Status SyncDirectory(const std::string& dir) {
  FileDescriptor fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, "opening directory", dir);
  if (::fsync(fd.get()) != 0) return ErrnoError(errno, "syncing directory", dir);
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes,
                                 bool sync_directory) {
  // Unique among concurrent writers of this process (pid) and of other processes (pid differs).
  static std::atomic<uint64_t> counter{0};
  const std::string temp = absl::StrCat(path, ".tmp-", ::getpid(), "-", counter++);
  absl::Status status = WriteAndSync(temp, bytes);
  if (status.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    status = ErrnoError(errno, absl::StrCat("renaming ", temp, " to"), path);
  }
  if (!status.ok()) {
    ::unlink(temp.c_str());
    return status;
  }
  if (sync_directory) return SyncDirectory(DirectoryOf(path));
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadFileBounded(const std::string& path, int64_t max_bytes) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, "opening", path);
  struct stat info;
  if (::fstat(fd.get(), &info) != 0) return ErrnoError(errno, "inspecting", path);
  if (!S_ISREG(info.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  }
  if (info.st_size > max_bytes) {
    return absl::DataLossError(
        absl::StrCat(path, " has ", info.st_size, " bytes, more than the ", max_bytes, " allowed"));
  }
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(errno, "reading", path);
    }
    if (n == 0) {
      return absl::DataLossError(
          absl::StrCat(path, " ended after ", done, " of ", bytes.size(), " bytes"));
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

}  // namespace schema_internal
}  // namespace tessera
