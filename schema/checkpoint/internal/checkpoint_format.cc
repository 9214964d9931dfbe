#include "schema/checkpoint/internal/checkpoint_format.h"

#include "absl/strings/str_cat.h"

namespace tessera {
namespace schema_internal {

void EncodeRunId(const RunId& id, wire::RunId::Builder out) {
  out.setHigh(id.high);
  out.setLow(id.low);
}
RunId DecodeRunId(bool present, wire::RunId::Reader in) {
  return present ? RunId{in.getHigh(), in.getLow()} : RunId{};
}

absl::Status CheckFormatVersion(FileKind kind, uint32_t got, uint32_t want) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(schema_internal::FileKindName(kind),
                                                 " has format version ", got,
                                                 "; this build reads format version ", want));
}

}  // namespace schema_internal
}  // namespace tessera
