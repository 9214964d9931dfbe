// Env::Default(): the POSIX filesystem and absl::Now().
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/env.h"

namespace tessera {
namespace {

// errno as a Status naming `action` and `path`. Abseil's mapping, except that the I/O errors it
// leaves Unknown (EIO among them) are Unavailable, as the Env contract says.
absl::Status ErrnoError(int error, absl::string_view action, absl::string_view path) {
  absl::Status status = absl::ErrnoToStatus(error, absl::StrCat(action, " ", path));
  if (absl::IsUnknown(status)) return absl::UnavailableError(status.message());
  return status;
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

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  absl::Status WriteAt(uint64_t offset, absl::string_view bytes) override {
    if (fd_.get() < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    while (!bytes.empty()) {
      const ssize_t n = ::pwrite(fd_.get(), bytes.data(), bytes.size(), static_cast<off_t>(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoError(errno, "writing", path_);
      }
      bytes.remove_prefix(static_cast<size_t>(n));
      offset += static_cast<uint64_t>(n);
    }
    return absl::OkStatus();
  }
  absl::Status Sync() override {
    if (fd_.get() < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    if (::fsync(fd_.get()) != 0) return ErrnoError(errno, "syncing", path_);
    return absl::OkStatus();
  }
  absl::Status Close() override {
    if (fd_.get() < 0) return absl::FailedPreconditionError(absl::StrCat(path_, " is closed"));
    if (fd_.Close() != 0) return ErrnoError(errno, "closing", path_);
    return absl::OkStatus();
  }

 private:
  FileDescriptor fd_;
  std::string path_;
};

class PosixRandomAccessFile : public RandomAccessFile {
 public:
  PosixRandomAccessFile(int fd, uint64_t size, std::string path)
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

class PosixMemoryRegion : public ReadOnlyMemoryRegion {
 public:
  PosixMemoryRegion(void* address, uint64_t size) : address_(address), size_(size) {}
  PosixMemoryRegion(const PosixMemoryRegion&) = delete;
  PosixMemoryRegion& operator=(const PosixMemoryRegion&) = delete;
  ~PosixMemoryRegion() override {
    if (size_ > 0) ::munmap(address_, static_cast<size_t>(size_));
  }
  const char* data() const override { return static_cast<const char*>(address_); }
  uint64_t size() const override { return size_; }
  void DropPages(uint64_t offset, uint64_t n) const override {
    // Only whole pages inside the range; a private read-only mapping of a file refaults them
    // from the file.
    const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
    const uint64_t begin = (offset + page - 1) / page * page;
    const uint64_t end = std::min(offset + n, size_) / page * page;
    if (begin < end) {
      ::madvise(static_cast<char*>(address_) + begin, static_cast<size_t>(end - begin),
                MADV_DONTNEED);
    }
  }

 private:
  void* address_;
  uint64_t size_;
};

// Note [Opening a FIFO]
// open(O_RDONLY) of a FIFO blocks until some process opens it for writing: a model or slice path
// that names a FIFO would hang its reader forever. Opening with O_NONBLOCK returns at once for any
// kind of file; fstat then refuses what is not a regular file, and O_NONBLOCK is cleared again
// (it means nothing for regular files, but a later reader should not inherit a surprise).
absl::StatusOr<int> OpenRegularFileForReading(const std::string& path, struct stat& info) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  if (fd.get() < 0) return ErrnoError(errno, "opening", path);
  if (::fstat(fd.get(), &info) != 0) return ErrnoError(errno, "inspecting", path);
  if (!S_ISREG(info.st_mode)) {
    return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) {
    return ErrnoError(errno, "opening", path);
  }
  return fd.Release();
}

class PosixEnv : public Env {
 public:
  absl::Status CreateDirectories(const std::string& path) override {
    // Each prefix in turn, so the errors are ours (std::filesystem reports a file in the way
    // differently across library versions). Mode 0777 less the umask, as mkdir -p: a group that
    // shares a checkpoint directory (a PS running as another user than the coordinator, umask
    // 002) can write into what either made.
    for (size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
      const std::string prefix = path.substr(0, end);
      if (::mkdir(prefix.c_str(), 0777) != 0) {
        const int error = errno;
        struct stat info;
        if (error != EEXIST) return ErrnoError(error, "creating directory", prefix);
        if (::stat(prefix.c_str(), &info) != 0) return ErrnoError(errno, "inspecting", prefix);
        if (!S_ISDIR(info.st_mode)) {
          return absl::FailedPreconditionError(
              absl::StrCat("creating directory ", path, ": ", prefix, " is not a directory"));
        }
      }
      if (end == std::string::npos) return absl::OkStatus();
    }
  }

  absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) override {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return ErrnoError(errno, "listing", path);
    std::vector<std::string> names;
    errno = 0;
    while (const struct dirent* entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    const int error = errno;
    ::closedir(dir);
    if (error != 0) return ErrnoError(error, "listing", path);
    std::sort(names.begin(), names.end());
    return names;
  }

  bool FileExists(const std::string& path) override {
    struct stat info;
    return ::stat(path.c_str(), &info) == 0;
  }

  absl::StatusOr<uint64_t> FileSize(const std::string& path) override {
    struct stat info;
    if (::stat(path.c_str(), &info) != 0) return ErrnoError(errno, "inspecting", path);
    if (!S_ISREG(info.st_mode)) {
      return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
    }
    return static_cast<uint64_t>(info.st_size);
  }

  absl::StatusOr<absl::Time> ModifiedTime(const std::string& path) override {
    struct stat info;
    if (::stat(path.c_str(), &info) != 0) return ErrnoError(errno, "inspecting", path);
    if (!S_ISREG(info.st_mode)) {
      return absl::DataLossError(absl::StrCat(path, " is not a regular file"));
    }
    return absl::TimeFromTimespec(info.st_mtim);
  }

  absl::Status RemoveTree(const std::string& path) override {
    struct stat info;
    if (::lstat(path.c_str(), &info) != 0) return ErrnoError(errno, "removing", path);
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return ErrnoError(ec.value(), "removing", path);
    return absl::OkStatus();
  }

  absl::Status RenameFile(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return ErrnoError(errno, absl::StrCat("renaming ", from, " to"), to);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) override {
    struct stat info;
    absl::StatusOr<int> fd = OpenRegularFileForReading(path, info);  // Note [Opening a FIFO]
    if (!fd.ok()) return fd.status();
    return std::make_unique<PosixRandomAccessFile>(*fd, static_cast<uint64_t>(info.st_size), path);
  }

  absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> NewReadOnlyMemoryRegion(
      const std::string& path) override {
    struct stat info;
    absl::StatusOr<int> opened = OpenRegularFileForReading(path, info);
    if (!opened.ok()) return opened.status();
    FileDescriptor fd(*opened);  // the mapping outlives the descriptor
    const uint64_t size = static_cast<uint64_t>(info.st_size);
    if (size == 0) return std::make_unique<PosixMemoryRegion>(nullptr, 0);  // mmap refuses 0
    if (size > std::numeric_limits<size_t>::max()) {
      return absl::ResourceExhaustedError(absl::StrCat("mapping ", path, ": ", size,
                                                       " bytes do not fit the address space"));
    }
    void* address = ::mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_PRIVATE, fd.get(), 0);
    if (address == MAP_FAILED) return ErrnoError(errno, "mapping", path);
    return std::make_unique<PosixMemoryRegion>(address, size);
  }

  absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ErrnoError(errno, "creating", path);
    return std::make_unique<PosixWritableFile>(fd, path);
  }

  absl::Status SyncDirectory(const std::string& path) override {
    FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (fd.get() < 0) return ErrnoError(errno, "opening directory", path);
    if (::fsync(fd.get()) != 0) return ErrnoError(errno, "syncing directory", path);
    return absl::OkStatus();
  }

  absl::Time Now() override { return absl::Now(); }
};

}  // namespace

Env* Env::Default() {
  static Env* const env = new PosixEnv;  // never destroyed: files may outlive static destructors
  return env;
}

}  // namespace tessera
