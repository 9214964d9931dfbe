#include "schema/base/internal/file_io.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace tessera {
namespace schema_internal {

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

}  // namespace schema_internal
}  // namespace tessera
