#include "schema/checkpoint_io.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "schema/checkpoint.capnp.h"
#include "schema/internal/crc32c.h"
#include "schema/internal/envelope.h"
#include "schema/internal/field_codec.h"
#include "schema/internal/file_io.h"
#include "schema/internal/message.h"

namespace tessera {
namespace {

using schema_internal::DecodeDType;
using schema_internal::DecodeNumberMap;
using schema_internal::DecodeShape;
using schema_internal::DecodeText;
using schema_internal::DecodeTexts;
using schema_internal::FileKind;
using schema_internal::RandomAccessReader;
using schema_internal::RandomAccessWriter;
using schema_internal::TextOf;

// The versions this build writes and reads. Bump one when the meaning of its schema changes in a
// way an older reader would misread; readers refuse any other version.
constexpr uint32_t kSliceFormatVersion = 2;
constexpr uint32_t kManifestFormatVersion = 1;

absl::Status CheckFormatVersion(FileKind kind, uint32_t got, uint32_t want) {
  if (got == want) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(schema_internal::FileKindName(kind),
                                                 " has format version ", got,
                                                 "; this build reads format version ", want));
}

// Note [Slice file layout]
// A slice file (format 2) is
//
//   header   schema/internal/envelope.h's 24 bytes; its tail is the data section below
//   message  a TensorSlice: names, shapes, offsets, step, and the CRC-32C of every 1 MiB chunk
//            of each tensor's data (value.chunks and the slots' chunks stay empty)
//   data     the value's float32s, then each slot's in order, raw little-endian (a row block of
//            the shard's memory, byte for byte), then zeros up to a multiple of 8 bytes
//
// Every byte is covered by exactly one check: the header's CRC-32 covers the message, the chunk
// CRC-32Cs cover the data, and the padding must be zero. So a save streams the shard's own
// memory into the file (each chunk checksummed just before it is written, while it is in cache:
// no snapshot copy and no message copy), and a restore reads each chunk straight into the
// tensor it belongs to and checks it there (no file buffer and no decode copy). Format 1 kept
// the floats inside the message: one copy more each way, and a second CRC pass (zlib's, ~1 GB/s)
// for the envelope over the same bytes.

// Float data is stored as raw bytes: little-endian float32, the host's layout (as field_codec.cc).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "schema/ assumes a little-endian host");

constexpr size_t kChunkBytes = schema_internal::kMaxChunkBytes;

uint64_t PaddedToWords(uint64_t bytes) { return (bytes + 7) / 8 * 8; }

// Writes a format-2 slice file (Note [Slice file layout]) through `out`.
absl::Status WriteSlice(const TensorSliceView& slice, RandomAccessWriter& out) {
  RETURN_IF_ERROR(ValidateTensorSlice(slice));
  const uint64_t tensor_bytes = static_cast<uint64_t>(slice.value.size()) * sizeof(float);
  const uint64_t data_bytes = tensor_bytes * (1 + slice.slots.size());
  const unsigned chunks = static_cast<unsigned>(schema_internal::NumChunks(slice.value.size()));
  capnp::MallocMessageBuilder message;
  std::string head;  // header space and message, serialized once to learn its size, then again
  try {
    wire::TensorSlice::Builder root = message.initRoot<wire::TensorSlice>();
    root.setFormatVersion(kSliceFormatVersion);
    root.setVariable(TextOf(slice.variable));
    root.setFullShape(schema_internal::DimsOf(slice.full_shape.dims()));
    root.setDtype(schema_internal::EncodeDType(slice.dtype));
    root.setRowOffset(slice.row_offset);
    root.initValue().setShape(schema_internal::DimsOf(slice.value.shape().dims()));
    root.initValueCrc32c(chunks);
    auto slots = root.initSlots(static_cast<unsigned>(slice.slots.size()));
    for (unsigned i = 0; i < slots.size(); ++i) {
      slots[i].setName(TextOf(slice.slot_names[i]));
      slots[i].initCrc32c(chunks);
    }
    root.setStep(slice.step);
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode the slice file: ", e.getDescription().cStr()));
  }
  // The CRCs are filled in below; they do not change the message's size.
  ASSIGN_OR_RETURN(head, schema_internal::SerializeAfterHeaderSpace(FileKind::kSlice, message));
  uint64_t at = head.size();
  auto write_tensor = [&](ConstTensorView tensor, capnp::List<uint32_t>::Builder crcs) {
    const char* data = reinterpret_cast<const char*>(tensor.data());
    for (unsigned i = 0; i < chunks; ++i) {
      const uint64_t offset = uint64_t{i} * kChunkBytes;
      const absl::string_view chunk(data + offset, std::min<uint64_t>(kChunkBytes,
                                                                      tensor_bytes - offset));
      crcs.set(i, schema_internal::Crc32c(chunk));
      RETURN_IF_ERROR(out.WriteAt(at, chunk));
      at += chunk.size();
    }
    return absl::OkStatus();
  };
  wire::TensorSlice::Builder root = message.getRoot<wire::TensorSlice>();
  RETURN_IF_ERROR(write_tensor(slice.value, root.getValueCrc32c()));
  for (size_t i = 0; i < slice.slots.size(); ++i) {
    RETURN_IF_ERROR(write_tensor(slice.slots[i], root.getSlots()[i].getCrc32c()));
  }
  const uint64_t tail_bytes = PaddedToWords(data_bytes);
  if (tail_bytes > data_bytes) {
    RETURN_IF_ERROR(out.WriteAt(at, std::string(tail_bytes - data_bytes, '\0')));
  }
  ASSIGN_OR_RETURN(head, schema_internal::SerializeAfterHeaderSpace(FileKind::kSlice, message));
  schema_internal::SealInPlace(FileKind::kSlice, head, tail_bytes);
  return out.WriteAt(0, head);
}

// Reads one tensor's data (`crcs.size()` chunks) at `at` in `in` into `out`, checking each
// chunk's CRC-32C right after reading it.
absl::Status ReadTensorData(RandomAccessReader& in, uint64_t at,
                            capnp::List<uint32_t>::Reader crcs, Tensor& out,
                            absl::string_view what) {
  char* data = reinterpret_cast<char*>(out.data());
  const uint64_t bytes = static_cast<uint64_t>(out.size()) * sizeof(float);
  for (unsigned i = 0; i < crcs.size(); ++i) {
    const uint64_t offset = uint64_t{i} * kChunkBytes;
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunkBytes, bytes - offset));
    RETURN_IF_ERROR(in.ReadAt(at + offset, n, data + offset));
    if (schema_internal::Crc32c(absl::string_view(data + offset, n)) != crcs[i]) {
      return absl::DataLossError(absl::StrCat("checksum mismatch in ", what, " chunk ", i));
    }
  }
  return absl::OkStatus();
}

// Decodes a format-2 slice: the message `in` (its checksum checked), then the data section of
// `tail_bytes` at `data_at` in `file`, sized from the message and checked against the file
// before anything is allocated.
absl::StatusOr<TensorSlice> ParseSlice(wire::TensorSlice::Reader in, RandomAccessReader& file,
                                       uint64_t data_at, uint64_t tail_bytes) {
  RETURN_IF_ERROR(CheckFormatVersion(FileKind::kSlice, in.getFormatVersion(), kSliceFormatVersion));
  TensorSlice slice;
  slice.variable = DecodeText(in.getVariable());
  const std::string what = absl::StrCat("slice of ", slice.variable);
  ASSIGN_OR_RETURN(slice.full_shape, DecodeShape(in.getFullShape(), what));
  ASSIGN_OR_RETURN(slice.dtype, DecodeDType(in.getDtype(), what));
  slice.row_offset = in.getRowOffset();
  ASSIGN_OR_RETURN(Shape shape, DecodeShape(in.getValue().getShape(), what));
  const auto slots = in.getSlots();
  bool inline_data = in.getValue().getChunks().size() != 0;
  for (wire::TensorSlice::Slot::Reader slot : slots) {
    slice.slot_names.push_back(DecodeText(slot.getName()));
    inline_data = inline_data || slot.getChunks().size() != 0;
  }
  if (inline_data) {
    return absl::DataLossError(
        absl::StrCat(what, ": data chunks inside the message (format 2 keeps them after it)"));
  }
  // The data's size, from the message, must be the tail's: checked before allocating.
  const uint64_t tensors = 1 + uint64_t{slots.size()};
  const uint64_t elements = static_cast<uint64_t>(shape.num_elements());
  if (elements > std::numeric_limits<uint64_t>::max() / sizeof(float) / tensors) {
    return absl::DataLossError(absl::StrCat(what, ": invalid element count ", elements));
  }
  const uint64_t data_bytes = elements * sizeof(float) * tensors;
  if (PaddedToWords(data_bytes) != tail_bytes) {
    return absl::DataLossError(absl::StrCat(what, ": ", tail_bytes, " bytes of data for ", tensors,
                                            " x ", elements, " float32 values"));
  }
  const size_t chunks = schema_internal::NumChunks(static_cast<size_t>(elements));
  bool crcs_match = in.getValueCrc32c().size() == chunks;
  for (wire::TensorSlice::Slot::Reader slot : slots) {
    crcs_match = crcs_match && slot.getCrc32c().size() == chunks;
  }
  if (!crcs_match) {
    return absl::DataLossError(
        absl::StrCat(what, ": the checksums do not match the ", chunks, " chunks of each tensor"));
  }
  slice.step = in.getStep();
  // The rest of the metadata, before allocating for the data.
  TensorSliceView shapes;
  shapes.variable = slice.variable;
  shapes.full_shape = slice.full_shape;
  shapes.dtype = slice.dtype;
  shapes.row_offset = slice.row_offset;
  shapes.value = ConstTensorView(nullptr, shape);
  shapes.slot_names = slice.slot_names;
  shapes.slots.assign(slots.size(), ConstTensorView(nullptr, shape));
  shapes.step = slice.step;
  RETURN_IF_ERROR(ValidateTensorSlice(shapes));

  const uint64_t tensor_bytes = elements * sizeof(float);
  slice.value = Tensor(shape);
  RETURN_IF_ERROR(ReadTensorData(file, data_at, in.getValueCrc32c(), slice.value, what));
  for (unsigned i = 0; i < slots.size(); ++i) {
    slice.slots.emplace_back(shape);
    RETURN_IF_ERROR(ReadTensorData(file, data_at + (1 + uint64_t{i}) * tensor_bytes,
                                   slots[i].getCrc32c(), slice.slots.back(),
                                   absl::StrCat(what, " slot ", slice.slot_names[i])));
  }
  char padding[8] = {};
  RETURN_IF_ERROR(file.ReadAt(data_at + data_bytes, tail_bytes - data_bytes, padding));
  if (std::any_of(padding, padding + 8, [](char c) { return c != 0; })) {
    return absl::DataLossError(absl::StrCat(what, ": non-zero padding after the data"));
  }
  return slice;
}

// Reads a slice file (Note [Slice file layout]) through `in`: the header, then the message,
// then the data straight into the slice's tensors.
absl::StatusOr<TensorSlice> ReadSlice(RandomAccessReader& in) {
  char header_bytes[schema_internal::kEnvelopeHeaderBytes];
  const bool has_header = in.size() >= sizeof(header_bytes);
  if (has_header) RETURN_IF_ERROR(in.ReadAt(0, sizeof(header_bytes), header_bytes));
  ASSIGN_OR_RETURN(const schema_internal::EnvelopeHeader header,
                   schema_internal::ParseEnvelopeHeader(
                       FileKind::kSlice, absl::string_view(header_bytes, has_header ? 24 : 0),
                       in.size()));
  // Word-aligned for the parser; sized by bytes the file really has (ParseEnvelopeHeader).
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(header.message_bytes() / 8);
  const absl::string_view message(reinterpret_cast<const char*>(words.begin()),
                                  header.message_bytes());
  RETURN_IF_ERROR(in.ReadAt(sizeof(header_bytes), message.size(),
                            reinterpret_cast<char*>(words.begin())));
  RETURN_IF_ERROR(schema_internal::CheckMessageChecksum(FileKind::kSlice, header, message));
  absl::StatusOr<TensorSlice> slice = absl::DataLossError("slice file: not decoded");
  RETURN_IF_ERROR(schema_internal::ReadMessage(
      FileKind::kSlice, message, [&](capnp::MessageReader& reader) {
        slice = ParseSlice(reader.getRoot<wire::TensorSlice>(), in,
                           sizeof(header_bytes) + message.size(), header.tail_bytes);
        return slice.status();
      }));
  return slice;
}

void BuildManifest(const CheckpointManifest& manifest, wire::Manifest::Builder out) {
  out.setFormatVersion(kManifestFormatVersion);
  out.setGlobalStep(manifest.global_step);
  auto variables = out.initVariables(manifest.variables.size());
  for (size_t i = 0; i < manifest.variables.size(); ++i) {
    const CheckpointVariable& v = manifest.variables[i];
    wire::Manifest::Variable::Builder b = variables[i];
    b.setName(TextOf(v.name));
    b.setShape(schema_internal::DimsOf(v.shape.dims()));
    b.setDtype(schema_internal::EncodeDType(v.dtype));
    if (v.optimizer.has_value()) {
      wire::Manifest::OptimizerSpec::Builder spec = b.getOptimizer().initSpec();
      spec.setName(TextOf(v.optimizer->name));
      schema_internal::EncodeNumberMap(v.optimizer->params,
                                       spec.initParams(v.optimizer->params.size()));
    } else {
      b.getOptimizer().setNone();
    }
    schema_internal::EncodeTexts(v.slot_names, b.initSlotNames(v.slot_names.size()));
    b.setStep(v.step);
    auto slices = b.initSlices(v.slices.size());
    for (size_t k = 0; k < v.slices.size(); ++k) {
      slices[k].setFile(TextOf(v.slices[k].file));
      slices[k].setRowOffset(v.slices[k].row_offset);
      slices[k].setRows(v.slices[k].rows);
    }
  }
}

absl::StatusOr<CheckpointVariable> ParseVariable(wire::Manifest::Variable::Reader in) {
  CheckpointVariable v;
  v.name = DecodeText(in.getName());
  const std::string what = absl::StrCat("checkpoint variable ", v.name);
  ASSIGN_OR_RETURN(v.shape, DecodeShape(in.getShape(), what));
  ASSIGN_OR_RETURN(v.dtype, DecodeDType(in.getDtype(), what));
  switch (in.getOptimizer().which()) {
    case wire::Manifest::Variable::Optimizer::NONE:
      break;
    case wire::Manifest::Variable::Optimizer::SPEC: {
      wire::Manifest::OptimizerSpec::Reader spec = in.getOptimizer().getSpec();
      OptimizerSpec optimizer;
      optimizer.name = DecodeText(spec.getName());
      ASSIGN_OR_RETURN(optimizer.params,
                       DecodeNumberMap(spec.getParams(), absl::StrCat(what, " optimizer")));
      v.optimizer = std::move(optimizer);
      break;
    }
    default:
      return absl::DataLossError(absl::StrCat(what, ": unknown optimizer variant"));
  }
  v.slot_names = DecodeTexts(in.getSlotNames());
  v.step = in.getStep();
  for (wire::Manifest::SliceRef::Reader ref : in.getSlices()) {
    v.slices.push_back({DecodeText(ref.getFile()), ref.getRowOffset(), ref.getRows()});
  }
  return v;
}

absl::StatusOr<CheckpointManifest> ParseManifest(wire::Manifest::Reader in) {
  RETURN_IF_ERROR(
      CheckFormatVersion(FileKind::kManifest, in.getFormatVersion(), kManifestFormatVersion));
  CheckpointManifest manifest;
  manifest.global_step = in.getGlobalStep();
  for (wire::Manifest::Variable::Reader variable : in.getVariables()) {
    ASSIGN_OR_RETURN(CheckpointVariable v, ParseVariable(variable));
    manifest.variables.push_back(std::move(v));
  }
  RETURN_IF_ERROR(ValidateManifest(manifest));
  return manifest;
}

}  // namespace

absl::StatusOr<std::string> EncodeSlice(const TensorSlice& slice) {
  std::string bytes;
  schema_internal::StringWriter out(&bytes);
  RETURN_IF_ERROR(WriteSlice(ViewOf(slice), out));
  return bytes;
}

absl::StatusOr<TensorSlice> DecodeSlice(const std::string& bytes) {
  schema_internal::StringReader in(bytes);
  return ReadSlice(in);
}

absl::StatusOr<std::string> EncodeManifest(const CheckpointManifest& manifest) {
  RETURN_IF_ERROR(ValidateManifest(manifest));
  return schema_internal::BuildSealedMessage(
      FileKind::kManifest, 0, [&manifest](capnp::MessageBuilder& message) {
        BuildManifest(manifest, message.initRoot<wire::Manifest>());
      });
}

absl::StatusOr<CheckpointManifest> DecodeManifest(const std::string& bytes) {
  absl::StatusOr<CheckpointManifest> manifest =
      absl::DataLossError("checkpoint manifest: not decoded");
  RETURN_IF_ERROR(schema_internal::ReadSealedMessage(
      FileKind::kManifest, bytes, [&manifest](capnp::MessageReader& message) {
        manifest = ParseManifest(message.getRoot<wire::Manifest>());
        return manifest.status();
      }));
  return manifest;
}

absl::Status WriteSliceFile(const std::string& path, const TensorSliceView& slice) {
  RETURN_IF_ERROR(ValidateTensorSlice(slice));
  return schema_internal::WriteFileAtomically(
      path, [&slice](RandomAccessWriter& out) { return WriteSlice(slice, out); },
      /*sync_directory=*/false);
}

absl::Status WriteSliceFile(const std::string& path, const TensorSlice& slice) {
  return WriteSliceFile(path, ViewOf(slice));
}

absl::StatusOr<TensorSlice> ReadSliceFile(const std::string& path) {
  ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessReader> file,
                   schema_internal::OpenFileForReading(path));
  absl::StatusOr<TensorSlice> slice = ReadSlice(*file);
  if (!slice.ok()) return Annotate(slice.status(), path);
  return slice;
}

absl::Status WriteManifest(const std::string& dir, const CheckpointManifest& manifest) {
  ASSIGN_OR_RETURN(const std::string bytes, EncodeManifest(manifest));
  // The manifest makes the checkpoint visible: its rename must survive a crash too.
  return schema_internal::WriteFileAtomically(absl::StrCat(dir, "/", kManifestFile), bytes,
                                              /*sync_directory=*/true);
}

absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", kManifestFile);
  absl::StatusOr<std::string> bytes =
      schema_internal::ReadFileBounded(path, schema_internal::MaxFileBytes(FileKind::kManifest));
  if (absl::IsNotFound(bytes.status())) {
    return absl::NotFoundError(
        absl::StrCat("no checkpoint in ", dir, " (", path, " does not exist)"));
  }
  if (!bytes.ok()) return bytes.status();
  absl::StatusOr<CheckpointManifest> manifest = DecodeManifest(*bytes);
  if (!manifest.ok()) return Annotate(manifest.status(), path);
  return manifest;
}

}  // namespace tessera
