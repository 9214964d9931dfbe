// Env: the filesystem and the clock, behind one small interface, so code that touches files or
// reads the time can run on the real machine (Env::Default()) or on an in-memory fake
// (core/base/mem_env.h's NewMemEnv) in tests — deterministic, with no disk, sleep or polling.
//
// Code that needs files or time takes an `Env*` from its caller, defaulting to Env::Default(),
// and never reaches for the filesystem or absl::Now() itself.
//
// Errors are absl::Status values with canonical codes, never exceptions:
//   NotFound            the path (or a directory on the way to it) does not exist
//   FailedPrecondition  the path is the wrong kind (a file where a directory is needed, ...)
//   DataLoss            a read past a file's end, or a regular file expected and something else
//                       found (what a reader of a corrupt directory sees)
//   Unavailable         an I/O error (EIO, and any errno Abseil has no canonical code for)
// plus the codes absl::ErrnoToStatus gives for the rest (PermissionDenied, ResourceExhausted for
// a full disk, ...). Messages name the path.
//
// Thread-safety: an Env and its files may be used from any thread; an Env outlives the files it
// opened. A RandomAccessFile may be read concurrently; a WritableFile is used by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tessera {

// Bytes read at given offsets: what a decoder that reads only the parts it needs, straight into
// their destination, reads from. Its size is fixed when it is opened.
class RandomAccessFile {
 public:
  virtual ~RandomAccessFile() = default;
  virtual uint64_t size() const = 0;
  // Exactly `n` bytes at `offset` into `out`. DataLoss when they are not all there (the range is
  // outside size(), or the file shrank since it was opened); Unavailable for an I/O error.
  virtual absl::Status ReadAt(uint64_t offset, size_t n, char* out) = 0;
};

// A file's bytes in memory, read-only, for as long as the region lives: a memory mapping on the
// POSIX Env, so only the pages read are loaded (and the kernel may drop them again). data() is
// aligned to 8 bytes at least. A mapped file that shrinks while mapped makes a read past its new
// end fault (SIGBUS): map only files that are replaced by rename, never rewritten in place.
class ReadOnlyMemoryRegion {
 public:
  virtual ~ReadOnlyMemoryRegion() = default;
  virtual const char* data() const = 0;
  virtual uint64_t size() const = 0;
  // A hint that bytes [offset, offset + n) will not be read again soon: a mapping drops the
  // whole pages among them from this process (they stay in the page cache, and a later read
  // maps them back). Reading them again stays valid. Does nothing by default.
  virtual void DropPages(uint64_t offset, uint64_t n) const {}
};

// Bytes written at given offsets (gaps are filled later, or read as zeros).
class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual absl::Status WriteAt(uint64_t offset, absl::string_view bytes) = 0;
  // Makes everything written so far durable (fsync).
  virtual absl::Status Sync() = 0;
  // Closes the file, reporting an error close() may carry (e.g. a delayed write error). Nothing
  // may be written after it. A file destroyed without Close() is closed silently.
  virtual absl::Status Close() = 0;
};

class Env {
 public:
  virtual ~Env() = default;

  // The real filesystem (POSIX) and clock (absl::Now). Lives for the whole process.
  static Env* Default();

  // Creates `path` and every missing directory above it; OK when it already is a directory.
  // FailedPrecondition when `path` or a directory on the way is something else.
  virtual absl::Status CreateDirectories(const std::string& path) = 0;

  // The names (not paths) of the entries of directory `path`, sorted, without "." and "..".
  // NotFound when it does not exist; FailedPrecondition when it is not a directory.
  virtual absl::StatusOr<std::vector<std::string>> ListDirectory(const std::string& path) = 0;

  // Whether `path` exists (a file or a directory).
  virtual bool FileExists(const std::string& path) = 0;

  // The size of regular file `path`. NotFound when it does not exist; DataLoss when it is not a
  // regular file.
  virtual absl::StatusOr<uint64_t> FileSize(const std::string& path) = 0;

  // When regular file `path` was last written (MemEnv: its clock's time then). The same errors
  // as FileSize.
  virtual absl::StatusOr<absl::Time> ModifiedTime(const std::string& path) = 0;

  // Removes `path`: a file, or a directory with everything under it. NotFound when it does not
  // exist (so a caller that only wants it gone tests absl::IsNotFound).
  virtual absl::Status RemoveTree(const std::string& path) = 0;

  // Renames file or directory `from` to `to`, atomically replacing a file at `to`. NotFound when
  // `from` or `to`'s directory does not exist; FailedPrecondition when a file would replace a
  // directory (or a directory a file, or a non-empty directory); InvalidArgument when a
  // directory would move under itself.
  virtual absl::Status RenameFile(const std::string& from, const std::string& to) = 0;

  // `path` opened for reading. NotFound when it does not exist; DataLoss when it is not a
  // regular file (a directory, a FIFO, a device: refused without blocking, so a FIFO with no
  // writer never hangs the reader).
  virtual absl::StatusOr<std::unique_ptr<RandomAccessFile>> NewRandomAccessFile(
      const std::string& path) = 0;

  // Regular file `path` mapped read-only (MemEnv: a copy of its bytes). The same errors as
  // NewRandomAccessFile, and ResourceExhausted when the address space cannot hold it.
  virtual absl::StatusOr<std::unique_ptr<ReadOnlyMemoryRegion>> NewReadOnlyMemoryRegion(
      const std::string& path) = 0;

  // `path` created empty for writing (an existing file is truncated). NotFound when its
  // directory does not exist; FailedPrecondition when `path` is a directory.
  virtual absl::StatusOr<std::unique_ptr<WritableFile>> NewWritableFile(
      const std::string& path) = 0;

  // Makes the entries of directory `path` durable (a rename into it survives a crash). NotFound
  // when it does not exist.
  virtual absl::Status SyncDirectory(const std::string& path) = 0;

  // The current time.
  virtual absl::Time Now() = 0;
};

// Writes `path` through `env` so that a reader sees either the old file or the whole new one,
// never a part: `write` fills a temporary file in the same directory, which is synced, closed and
// renamed over `path`; with `sync_directory` the directory is synced too, so the rename itself is
// durable. On failure the temporary file is removed and the error returned (`write`'s, or the
// Env's: e.g. NotFound when the directory does not exist).
absl::Status WriteFileAtomically(Env& env, const std::string& path,
                                 absl::FunctionRef<absl::Status(WritableFile&)> write,
                                 bool sync_directory);
// The same with the whole content given.
absl::Status WriteFileAtomically(Env& env, const std::string& path, absl::string_view bytes,
                                 bool sync_directory);

// The whole content of regular file `path`. Errors of NewRandomAccessFile; DataLoss when it is
// larger than `max_bytes` (checked before anything is allocated or read).
absl::StatusOr<std::string> ReadFileBounded(Env& env, const std::string& path, int64_t max_bytes);

// The directory part of `path` ("a/b/c" -> "a/b", "c" -> ".", "/c" -> "/").
std::string DirectoryOf(const std::string& path);

}  // namespace tessera
