// In-memory files for schema/'s encoders and decoders: the same RandomAccessFile / WritableFile
// interfaces (tessera/env.h) that an Env's files implement, over a string. Encode* and Decode* go
// through them, so the in-memory and on-file paths share every line of the format code.
//
// Thread-safety: like any file: a StringReader may be read concurrently, a StringWriter is used
// by one thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "tessera/env.h"

namespace tessera {
namespace schema_internal {

// Over `bytes`, which must outlive the reader.
class StringReader : public RandomAccessFile {
 public:
  explicit StringReader(absl::string_view bytes) : bytes_(bytes) {}
  uint64_t size() const override { return bytes_.size(); }
  absl::Status ReadAt(uint64_t offset, size_t n, char* out) override;

 private:
  absl::string_view bytes_;
};

// Into `*out`, which grows to hold what is written. Sync and Close do nothing.
class StringWriter : public WritableFile {
 public:
  explicit StringWriter(std::string* out) : out_(out) {}
  absl::Status WriteAt(uint64_t offset, absl::string_view bytes) override;
  absl::Status Sync() override { return absl::OkStatus(); }
  absl::Status Close() override { return absl::OkStatus(); }

 private:
  std::string* out_;
};

}  // namespace schema_internal
}  // namespace tessera
