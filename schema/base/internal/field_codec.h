// Converters between core values and the fields every schema shares (schema/base/common.capnp):
// shapes, dtypes, texts, key/value maps and checksummed float data.
//
// Decoders take untrusted Readers. They validate counts and shapes before allocating anything
// (an element count is checked against the bytes actually present), and return DataLoss naming
// `what` (e.g. "variable emb") for anything malformed. Cap'n Proto accessors may still throw
// kj::Exception; callers run inside ReadSealedMessage (message.h), which catches it.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "schema/base/common.capnp.h"
#include "tessera/tensor.h"

namespace tessera {
namespace schema_internal {

// Float data is split into chunks of at most this many bytes, each with its own CRC-32.
inline constexpr size_t kMaxChunkBytes = size_t{1} << 20;

// Texts.
std::string DecodeText(capnp::Text::Reader text);
capnp::Text::Reader TextOf(const std::string& s);
std::vector<std::string> DecodeTexts(capnp::List<capnp::Text>::Reader texts);
void EncodeTexts(const std::vector<std::string>& texts, capnp::List<capnp::Text>::Builder out);

// The version of Tessera that wrote a file (tessera/version.h): "" when the field is absent (a
// file written before versions were recorded); DataLoss naming `what` when it is present but not a
// version string (IsVersionString: at most 64 printable characters, no spaces).
absl::StatusOr<std::string> DecodeWriterVersion(bool present, capnp::Text::Reader version,
                                                absl::string_view what);

// Shapes: DataLoss for a rank above kMaxRank, a negative dimension, or more than kMaxElements
// elements (Note [Limits on tensors from outside], tessera/tensor.h). Signature dims may also be
// -1 (the batch dimension).
absl::StatusOr<Shape> DecodeShape(capnp::List<int64_t>::Reader dims, absl::string_view what);
absl::StatusOr<std::vector<int64_t>> DecodeSignatureDims(capnp::List<int64_t>::Reader dims,
                                                         absl::string_view what);
kj::ArrayPtr<const int64_t> DimsOf(const std::vector<int64_t>& dims);

// DTypes: DataLoss for a value that names none.
absl::StatusOr<DType> DecodeDType(wire::DType dtype, absl::string_view what);
wire::DType EncodeDType(DType dtype);

// Maps as entry lists in key order. Decoding requires strictly increasing keys (so it rejects
// duplicates, and a decoded map encodes to the same bytes): DataLoss otherwise.
absl::StatusOr<std::map<std::string, double>> DecodeNumberMap(
    capnp::List<wire::NumberEntry>::Reader entries, absl::string_view what);
void EncodeNumberMap(const std::map<std::string, double>& map,
                     capnp::List<wire::NumberEntry>::Builder out);
absl::StatusOr<std::map<std::string, std::string>> DecodeTextMap(
    capnp::List<wire::TextEntry>::Reader entries, absl::string_view what);
void EncodeTextMap(const std::map<std::string, std::string>& map,
                   capnp::List<wire::TextEntry>::Builder out);

// Float data in 1 MiB chunks (format-1 exports; a slice file's CRC list has one per chunk).
size_t NumChunks(size_t num_values);
// Exactly `num_values` floats from `chunks`, after checking that the chunks hold exactly that many
// bytes (before allocating) and that every chunk's CRC-32 matches: DataLoss "checksum mismatch in
// <what> chunk i" otherwise.
absl::StatusOr<std::vector<float>> DecodeValues(capnp::List<wire::Chunk>::Reader chunks,
                                                int64_t num_values, absl::string_view what);

// Tensors: a shape and its values (format-1 exports, read only).
absl::StatusOr<Tensor> DecodeTensor(wire::Tensor::Reader tensor, absl::string_view what);

}  // namespace schema_internal
}  // namespace tessera
