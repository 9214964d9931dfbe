#include "schema/internal/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

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
  // Gives up ownership.
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
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

class FileWriter : public RandomAccessWriter {
 public:
  FileWriter(int fd, const std::string& path) : fd_(fd), path_(path) {}
  absl::Status WriteAt(uint64_t offset, absl::string_view bytes) override {
    while (!bytes.empty()) {
      const ssize_t n = ::pwrite(fd_, bytes.data(), bytes.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, "writing", path_);
      }
      bytes.remove_prefix(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }

 private:
  int fd_;
  const std::string& path_;
};

class FileReader : public RandomAccessReader {
 public:
  FileReader(int fd, uint64_t size, std::string path)
      : fd_(fd), size_(size), path_(std::move(path)) {}
  uint64_t size() const override { return size_; }
  absl::Status ReadAt(uint64_t offset, size_t n, char* out) override {
    if (offset > size_ || n > size_ - offset) {
      return absl::DataLossError(absl::StrCat(path_, ": reading ", n, " bytes at ", offset,
                                              ", past its end at ", size_));
    }
    while (n > 0) {
      const ssize_t got = ::pread(fd_.get(), out, n, static_cast<off_t>(offset));
      if (got < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, "reading", path_);
      }
      if (got == 0) {
        return absl::DataLossError(absl::StrCat(path_, " ended at ", offset, " of ", size_,
                                                " bytes (it shrank while being read)"));
      }
      out += got;
      offset += static_cast<uint64_t>(got);
      n -= static_cast<size_t>(got);
    }
    return absl::OkStatus();
  }

 private:
  FileDescriptor fd_;
  uint64_t size_;
  std::string path_;
};

absl::Status WriteAndSync(const std::string& temp,
                          absl::FunctionRef<absl::Status(RandomAccessWriter&)> write) {
  FileDescriptor fd(::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) return ErrnoError(errno, "creating", temp);
  FileWriter writer(fd.get(), temp);
  absl::Status status = write(writer);
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
  return WriteFileAtomically(
      path, [bytes](RandomAccessWriter& out) { return out.WriteAt(0, bytes); }, sync_directory);
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::FunctionRef<absl::Status(RandomAccessWriter&)> write,
                                 bool sync_directory) {
  // Unique among concurrent writers of this process (pid) and of other processes (pid differs).
  static std::atomic<uint64_t> counter{0};
  const std::string temp = absl::StrCat(path, ".tmp-", ::getpid(), "-", counter++);
  absl::Status status = WriteAndSync(temp, write);
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
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessReader> file, OpenFileForReading(path));
  if (file->size() > static_cast<uint64_t>(max_bytes)) {
    return absl::DataLossError(absl::StrCat(path, " has ", file->size(), " bytes, more than the ",
                                            max_bytes, " allowed"));
  }
  std::string bytes(static_cast<size_t>(file->size()), '\0');
  RETURN_IF_ERROR(file->ReadAt(0, bytes.size(), bytes.data()));
  return bytes;
}

absl::Status StringReader::ReadAt(uint64_t offset, size_t n, char* out) {
  if (offset > bytes_.size() || n > bytes_.size() - offset) {
    return absl::DataLossError(absl::StrCat("reading ", n, " bytes at ", offset,
                                            " of a buffer of ", bytes_.size()));
  }
  if (n > 0) std::memcpy(out, bytes_.data() + offset, n);
  return absl::OkStatus();
}

absl::Status StringWriter::WriteAt(uint64_t offset, absl::string_view bytes) {
  if (out_->size() < offset + bytes.size()) out_->resize(offset + bytes.size());
  if (!bytes.empty()) std::memcpy(out_->data() + offset, bytes.data(), bytes.size());
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RandomAccessReader>> OpenFileForReading(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(errno, "opening", path);
  struct stat info;
  if (::fstat(fd.get(), &info) != 0) return ErrnoError(errno, "inspecting", path);
  if (!S_ISREG(info.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  }
  return std::make_unique<FileReader>(fd.Release(), static_cast<uint64_t>(info.st_size), path);
}

}  // namespace schema_internal
}  // namespace tessera
