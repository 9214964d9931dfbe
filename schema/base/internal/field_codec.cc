#include "schema/base/internal/field_codec.h"

#include <cstring>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "schema/base/internal/envelope.h"
#include "tessera/status.h"
#include "tessera/version.h"

// Float data is stored as raw bytes: little-endian float32, the host's layout.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "schema/ assumes a little-endian host");

namespace tessera {
namespace schema_internal {

// Note [Checksums]
// Two layers of CRC-32 protect a manifest or a format-1 exported model. The envelope's
// (envelope.h) covers every byte of the message: names, shapes, offsets, steps — corruption
// anywhere is caught before Cap'n Proto even parses it, so a file that reads OK reads exactly what
// was written. The per-chunk CRCs of a format-1 model cover the float data again, 1 MiB at a
// time: they name the tensor and chunk that went bad. Reading costs two CRC passes over the data.
// Slice files and format-2 models, the large ones, keep their float data after the message and
// check each byte once instead (Note [Slice file layout] in slice_file.cc, Note [Model file
// layout] in model_format.h); only format-1 models are still decoded here, never written.

std::string DecodeText(capnp::Text::Reader text) { return std::string(text.cStr(), text.size()); }

capnp::Text::Reader TextOf(const std::string& s) {
  return capnp::Text::Reader(s.c_str(), s.size());
}

std::vector<std::string> DecodeTexts(capnp::List<capnp::Text>::Reader texts) {
  std::vector<std::string> out;
  out.reserve(texts.size());  // bounded by the message: each text costs at least a pointer
  for (capnp::Text::Reader text : texts) out.push_back(DecodeText(text));
  return out;
}

void EncodeTexts(const std::vector<std::string>& texts, capnp::List<capnp::Text>::Builder out) {
  for (size_t i = 0; i < texts.size(); ++i) out.set(i, TextOf(texts[i]));
}

absl::StatusOr<std::string> DecodeWriterVersion(bool present, capnp::Text::Reader version,
                                                absl::string_view what) {
  if (!present) return std::string();
  // Checked on the reader's bytes before copying: a forged field may be large.
  const absl::string_view text(version.cStr(), version.size());
  if (!IsVersionString(text)) {
    return absl::DataLossError(absl::StrCat(
        what, ": the version that wrote it is not a version string (", text.size(), " bytes)"));
  }
  return std::string(text);
}

absl::StatusOr<Shape> DecodeShape(capnp::List<int64_t>::Reader dims, absl::string_view what) {
  if (dims.size() > static_cast<unsigned>(kMaxRank)) {
    return absl::DataLossError(absl::StrCat(what, ": shape of rank ", dims.size()));
  }
  std::vector<int64_t> out;
  int64_t elements = 1;
  for (int64_t d : dims) {
    out.push_back(d);
    if (d < 0) {
      return absl::DataLossError(absl::StrCat(what, ": invalid shape ", Shape(out).ToString()));
    }
    if (d != 0 && elements > kMaxElements / d) {
      return absl::DataLossError(absl::StrCat(what, ": invalid shape ", Shape(out).ToString(),
                                              " (more than ", kMaxElements, " elements)"));
    }
    elements *= d;
  }
  return Shape(std::move(out));
}

absl::StatusOr<std::vector<int64_t>> DecodeSignatureDims(capnp::List<int64_t>::Reader dims,
                                                         absl::string_view what) {
  if (dims.size() > static_cast<unsigned>(kMaxRank)) {
    return absl::DataLossError(absl::StrCat(what, ": shape of rank ", dims.size()));
  }
  std::vector<int64_t> out;
  for (int64_t d : dims) {
    if (d < -1) return absl::DataLossError(absl::StrCat(what, ": dimension ", d));
    out.push_back(d);
  }
  return out;
}

kj::ArrayPtr<const int64_t> DimsOf(const std::vector<int64_t>& dims) {
  return kj::arrayPtr(dims.data(), dims.size());
}

absl::StatusOr<DType> DecodeDType(wire::DType dtype, absl::string_view what) {
  switch (dtype) {
    case wire::DType::FLOAT32:
      return DType::kFloat32;
    case wire::DType::INT64:
      return DType::kInt64;
    case wire::DType::STRING:
      return DType::kString;
    default:
      break;
  }
  return absl::DataLossError(absl::StrCat(what, ": invalid dtype ", static_cast<int>(dtype)));
}

wire::DType EncodeDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return wire::DType::FLOAT32;
    case DType::kInt64:
      return wire::DType::INT64;
    case DType::kString:
      return wire::DType::STRING;
  }
  return wire::DType::UNSPECIFIED;  // never valid: rejected when read
}

namespace {

template <typename Value, typename Entries, typename DecodeValue>
absl::StatusOr<std::map<std::string, Value>> DecodeMap(Entries entries, absl::string_view what,
                                                       DecodeValue decode_value) {
  std::map<std::string, Value> map;
  for (auto entry : entries) {
    std::string key = DecodeText(entry.getKey());
    if (!map.empty() && !(map.rbegin()->first < key)) {
      return absl::DataLossError(
          absl::StrCat(what, ": key '", key, "' is out of order or repeated"));
    }
    map.emplace_hint(map.end(), std::move(key), decode_value(entry));
  }
  return map;
}

}  // namespace

absl::StatusOr<std::map<std::string, double>> DecodeNumberMap(
    capnp::List<wire::NumberEntry>::Reader entries, absl::string_view what) {
  return DecodeMap<double>(entries, what, [](wire::NumberEntry::Reader e) { return e.getValue(); });
}

void EncodeNumberMap(const std::map<std::string, double>& map,
                     capnp::List<wire::NumberEntry>::Builder out) {
  unsigned i = 0;
  for (const auto& [key, value] : map) {
    out[i].setKey(TextOf(key));
    out[i].setValue(value);
    ++i;
  }
}

absl::StatusOr<std::map<std::string, std::string>> DecodeTextMap(
    capnp::List<wire::TextEntry>::Reader entries, absl::string_view what) {
  return DecodeMap<std::string>(entries, what,
                                [](wire::TextEntry::Reader e) { return DecodeText(e.getValue()); });
}

void EncodeTextMap(const std::map<std::string, std::string>& map,
                   capnp::List<wire::TextEntry>::Builder out) {
  unsigned i = 0;
  for (const auto& [key, value] : map) {
    out[i].setKey(TextOf(key));
    out[i].setValue(TextOf(value));
    ++i;
  }
}

size_t NumChunks(size_t num_values) {
  const size_t bytes = num_values * sizeof(float);
  return (bytes + kMaxChunkBytes - 1) / kMaxChunkBytes;
}

absl::StatusOr<std::vector<float>> DecodeValues(capnp::List<wire::Chunk>::Reader chunks,
                                                int64_t num_values, absl::string_view what) {
  // First the sizes alone, so a forged element count cannot make us allocate: the floats must
  // all be present in the message.
  const uint64_t want = static_cast<uint64_t>(num_values);
  if (num_values < 0 || want > std::numeric_limits<uint64_t>::max() / sizeof(float)) {
    return absl::DataLossError(absl::StrCat(what, ": invalid element count ", num_values));
  }
  uint64_t have = 0;
  for (unsigned i = 0; i < chunks.size(); ++i) {
    const size_t n = chunks[i].getData().size();
    if (n == 0 || n > kMaxChunkBytes) {
      return absl::DataLossError(absl::StrCat(what, ": chunk ", i, " has ", n, " bytes"));
    }
    have += n;
  }
  if (have != want * sizeof(float)) {
    return absl::DataLossError(
        absl::StrCat(what, ": ", have, " bytes of data for ", num_values, " float32 values"));
  }
  std::vector<float> values(static_cast<size_t>(num_values));
  char* out = reinterpret_cast<char*>(values.data());
  for (unsigned i = 0; i < chunks.size(); ++i) {
    const capnp::Data::Reader blob = chunks[i].getData();
    const absl::string_view bytes(reinterpret_cast<const char*>(blob.begin()), blob.size());
    if (Crc32(bytes) != chunks[i].getCrc32()) {
      return absl::DataLossError(absl::StrCat("checksum mismatch in ", what, " chunk ", i));
    }
    std::memcpy(out, bytes.data(), bytes.size());
    out += bytes.size();
  }
  return values;
}

absl::StatusOr<Tensor> DecodeTensor(wire::Tensor::Reader tensor, absl::string_view what) {
  TESSERA_ASSIGN_OR_RETURN(Shape shape, DecodeShape(tensor.getShape(), what));
  const int64_t elements = shape.num_elements();
  TESSERA_ASSIGN_OR_RETURN(std::vector<float> values,
                           DecodeValues(tensor.getChunks(), elements, what));
  return Tensor::FromVector(std::move(shape), std::move(values));
}

}  // namespace schema_internal
}  // namespace tessera
