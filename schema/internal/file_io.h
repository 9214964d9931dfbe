// Whole-file reads and atomic writes for schema/'s files, over POSIX.
//
// Thread-safety: pure functions over files; concurrent calls on different paths are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/string_view.h"

namespace tessera {
namespace schema_internal {

// Writes `bytes` to `path` so that a reader sees either the old file or the whole new one, never
// a part: writes a temporary file in the same directory, fsyncs it, renames it over `path`, and
// with `sync_directory` also fsyncs the directory so the rename itself is durable. On failure the
// temporary file is removed and the error (from errno: e.g. NotFound for a missing directory) is
// returned naming the path.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes,
                                 bool sync_directory);

// The whole content of `path`. NotFound when it does not exist; DataLoss when it is larger than
// `max_bytes` (checked before reading) or not a regular file; other errors from errno.
absl::StatusOr<std::string> ReadFileBounded(const std::string& path, int64_t max_bytes);

// Reading bytes at given offsets, from a file or from memory: what a decoder that reads only the
// parts it needs, straight into their destination, reads from.
class RandomAccessReader {
 public:
  virtual ~RandomAccessReader() = default;
  virtual uint64_t size() const = 0;
  // Exactly `n` bytes at `offset` into `out`. DataLoss when they are not all there (the range is
  // outside size(), or the file shrank); other errors from errno.
  virtual absl::Status ReadAt(uint64_t offset, size_t n, char* out) = 0;
};

// Writing bytes at given offsets (gaps are filled later, or read as zeros).
class RandomAccessWriter {
 public:
  virtual ~RandomAccessWriter() = default;
  virtual absl::Status WriteAt(uint64_t offset, absl::string_view bytes) = 0;
};

// Over `bytes`, which must outlive the reader.
class StringReader : public RandomAccessReader {
 public:
  explicit StringReader(absl::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, size_t n, char* out) override;

 private:
  absl::string_view bytes_;
};

// Into `*out`, which grows to hold what is written.
class StringWriter : public RandomAccessWriter {
 public:
  explicit StringWriter(std::string* out) : out_(out) {}
  absl::Status WriteAt(uint64_t offset, absl::string_view bytes) override;

 private:
  std::string* out_;
};

// `path` opened for reading. NotFound when it does not exist; DataLoss when it is not a regular
// file; other errors from errno.
absl::StatusOr<std::unique_ptr<RandomAccessReader>> OpenFileForReading(const std::string& path);

// WriteFileAtomically with the content written by `write` (into the temporary file).
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::FunctionRef<absl::Status(RandomAccessWriter&)> write,
                                 bool sync_directory);

}  // namespace schema_internal
}  // namespace tessera
