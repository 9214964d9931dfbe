// Slice files (checkpoint_io.h): a shard's block of one variable, its value and slots, in format 2
// (Note [Slice file layout] below) — written straight from the shard's memory, read whole or a
// block of rows at a time straight into the tensors, every chunk checked.
#include <capnp/message.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/process.h"
#include "schema/base/internal/crc32c.h"
#include "schema/base/internal/envelope.h"
#include "schema/base/internal/field_codec.h"
#include "schema/base/internal/file_io.h"
#include "schema/base/internal/message.h"
#include "schema/checkpoint/checkpoint.capnp.h"
#include "schema/checkpoint/checkpoint_io.h"
#include "schema/checkpoint/internal/checkpoint_format.h"
#include "tessera/status.h"

namespace tessera {
namespace {

using schema_internal::CheckFormatVersion;
using schema_internal::DecodeDType;
using schema_internal::DecodeRunId;
using schema_internal::DecodeShape;
using schema_internal::DecodeText;
using schema_internal::EncodeRunId;
using schema_internal::FileKind;
using schema_internal::kSliceFormatVersion;
using schema_internal::MaxFileBytes;
using schema_internal::TextOf;

// Note [Slice file layout]
// A slice file (format 2) is
//
//   header   schema/base/internal/envelope.h's 24 bytes; its tail is the data section below
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
// the floats inside the message: one copy more each way, and two CRC-32 passes (zlib's, about a
// third of CRC-32C's speed here) over the same bytes, the chunk's and the envelope's.

// Float data is stored as raw bytes: little-endian float32, the host's layout (as field_codec.cc).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "schema/ assumes a little-endian host");

constexpr size_t kChunkBytes = schema_internal::kMaxChunkBytes;
static_assert(kChunkBytes == static_cast<size_t>(kSliceChunkBytes),
              "a copy-on-write snapshot hands out the slice file's chunks");

uint64_t PaddedToWords(uint64_t bytes) { return (bytes + 7) / 8 * 8; }

// Writes a format-2 slice file (Note [Slice file layout]) through `out`.
absl::Status WriteSlice(const TensorSliceView& slice, WritableFile& out) {
  TESSERA_RETURN_IF_ERROR(ValidateTensorSlice(slice));
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
    if (!slice.checkpoint.run.empty()) {
      EncodeRunId(slice.checkpoint.run, root.initRunId());
      root.setCheckpointStep(slice.checkpoint.global_step);
    }
  } catch (const kj::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode the slice file: ", e.getDescription().cStr()));
  }
  // The CRCs are filled in below; they do not change the message's size.
  TESSERA_ASSIGN_OR_RETURN(head,
                           schema_internal::SerializeAfterHeaderSpace(FileKind::kSlice, message));
  const uint64_t tail_bytes = PaddedToWords(data_bytes);
  if (head.size() + tail_bytes > static_cast<uint64_t>(MaxFileBytes(FileKind::kSlice))) {
    return absl::InvalidArgumentError(
        absl::StrCat("slice of ", slice.variable, ": ", head.size() + tail_bytes,
                     " bytes, more than a slice file may hold (", MaxFileBytes(FileKind::kSlice),
                     "): save it in more shards"));
  }
  uint64_t at = head.size();
  // Each chunk from the view, or from slice.chunks when it is set (a copy-on-write snapshot).
  auto write_tensor = [&](size_t t, ConstTensorView tensor,
                          capnp::List<uint32_t>::Builder crcs) -> absl::Status {
    const char* data = reinterpret_cast<const char*>(tensor.data());
    for (unsigned i = 0; i < chunks; ++i) {
      const uint64_t offset = uint64_t{i} * kChunkBytes;
      const uint64_t size = std::min<uint64_t>(kChunkBytes, tensor_bytes - offset);
      auto write = [&](absl::string_view chunk) -> absl::Status {
        if (chunk.size() != size) {
          return absl::InternalError(absl::StrCat("slice of ", slice.variable, ": chunk ", i,
                                                  " has ", chunk.size(), " bytes, not ", size));
        }
        crcs.set(i, schema_internal::Crc32c(chunk));
        TESSERA_RETURN_IF_ERROR(out.WriteAt(at, chunk));
        at += chunk.size();
        return absl::OkStatus();
      };
      if (slice.chunks) {
        TESSERA_RETURN_IF_ERROR(slice.chunks(t, i, write));
      } else {
        TESSERA_RETURN_IF_ERROR(write(absl::string_view(data + offset, size)));
      }
    }
    return absl::OkStatus();
  };
  wire::TensorSlice::Builder root = message.getRoot<wire::TensorSlice>();
  TESSERA_RETURN_IF_ERROR(write_tensor(0, slice.value, root.getValueCrc32c()));
  for (size_t i = 0; i < slice.slots.size(); ++i) {
    TESSERA_RETURN_IF_ERROR(write_tensor(1 + i, slice.slots[i], root.getSlots()[i].getCrc32c()));
  }
  if (tail_bytes > data_bytes) {
    TESSERA_RETURN_IF_ERROR(out.WriteAt(at, std::string(tail_bytes - data_bytes, '\0')));
  }
  TESSERA_ASSIGN_OR_RETURN(head,
                           schema_internal::SerializeAfterHeaderSpace(FileKind::kSlice, message));
  schema_internal::SealInPlace(FileKind::kSlice, head, tail_bytes);
  return out.WriteAt(0, head);
}

// An open slice file whose header and message have been read and checked: its metadata (the
// tensors as views without data: shapes only), and where each tensor's data lies in the file
// with the CRC-32C of each of its chunks.
struct OpenedSlice {
  std::unique_ptr<RandomAccessFile> owned;  // null when the reader belongs to the caller
  RandomAccessFile* file = nullptr;
  TensorSliceView meta;
  std::vector<std::vector<uint32_t>> crcs;  // value, then each slot
  uint64_t data_at = 0;                     // the value's first byte; the slots follow
  uint64_t tensor_bytes = 0;
  uint64_t padding = 0;  // zero bytes after the data, up to a whole word
};

// Fills `opened` from a format-2 message (its checksum checked) of a file whose tail is
// `tail_bytes`: the data's size, from the message, must be the tail's, checked before any data
// is read or allocated for.
absl::Status ParseSliceMetadata(wire::TensorSlice::Reader in, uint64_t tail_bytes,
                                OpenedSlice& opened) {
  TESSERA_RETURN_IF_ERROR(
      CheckFormatVersion(FileKind::kSlice, in.getFormatVersion(), kSliceFormatVersion));
  TensorSliceView& meta = opened.meta;
  meta.variable = DecodeText(in.getVariable());
  const std::string what = absl::StrCat("slice of ", meta.variable);
  TESSERA_ASSIGN_OR_RETURN(meta.full_shape, DecodeShape(in.getFullShape(), what));
  TESSERA_ASSIGN_OR_RETURN(meta.dtype, DecodeDType(in.getDtype(), what));
  meta.row_offset = in.getRowOffset();
  TESSERA_ASSIGN_OR_RETURN(Shape shape, DecodeShape(in.getValue().getShape(), what));
  const auto slots = in.getSlots();
  bool inline_data = in.getValue().getChunks().size() != 0;
  for (wire::TensorSlice::Slot::Reader slot : slots) {
    meta.slot_names.push_back(DecodeText(slot.getName()));
    inline_data = inline_data || slot.getChunks().size() != 0;
  }
  if (inline_data) {
    return absl::DataLossError(
        absl::StrCat(what, ": data chunks inside the message (format 2 keeps them after it)"));
  }
  const uint64_t tensors = 1 + uint64_t{slots.size()};
  const uint64_t elements = static_cast<uint64_t>(shape.num_elements());
  if (elements > std::numeric_limits<uint64_t>::max() / sizeof(float) / tensors) {
    return absl::DataLossError(absl::StrCat(what, ": invalid element count ", elements));
  }
  opened.tensor_bytes = elements * sizeof(float);
  const uint64_t data_bytes = opened.tensor_bytes * tensors;
  if (PaddedToWords(data_bytes) != tail_bytes) {
    return absl::DataLossError(absl::StrCat(what, ": ", tail_bytes, " bytes of data for ", tensors,
                                            " x ", elements, " float32 values"));
  }
  opened.padding = tail_bytes - data_bytes;
  const size_t chunks = schema_internal::NumChunks(static_cast<size_t>(elements));
  auto copy_crcs = [&](capnp::List<uint32_t>::Reader list) {
    if (list.size() != chunks) return false;
    std::vector<uint32_t>& crcs = opened.crcs.emplace_back();
    crcs.reserve(chunks);  // bounded by the message: 4 bytes each
    for (uint32_t crc : list) crcs.push_back(crc);
    return true;
  };
  bool crcs_match = copy_crcs(in.getValueCrc32c());
  for (wire::TensorSlice::Slot::Reader slot : slots)
    crcs_match = crcs_match && copy_crcs(slot.getCrc32c());
  if (!crcs_match) {
    return absl::DataLossError(
        absl::StrCat(what, ": the checksums do not match the ", chunks, " chunks of each tensor"));
  }
  meta.step = in.getStep();
  const RunId run = DecodeRunId(in.hasRunId(), in.getRunId());
  if (!run.empty()) meta.checkpoint = {run, in.getCheckpointStep()};  // else: no identity
  meta.value = ConstTensorView(nullptr, shape);
  meta.slots.assign(slots.size(), ConstTensorView(nullptr, shape));
  return ValidateTensorSlice(meta);
}

// Opens a slice file (Note [Slice file layout]) through `in`: reads and checks its header and
// message. Nothing of the data is read yet.
absl::Status OpenSlice(RandomAccessFile& in, OpenedSlice& opened) {
  opened.file = &in;
  char header_bytes[schema_internal::kEnvelopeHeaderBytes];
  const bool has_header = in.size() >= sizeof(header_bytes);
  if (has_header) TESSERA_RETURN_IF_ERROR(in.ReadAt(0, sizeof(header_bytes), header_bytes));
  TESSERA_ASSIGN_OR_RETURN(
      const schema_internal::EnvelopeHeader header,
      schema_internal::ParseEnvelopeHeader(
          FileKind::kSlice, absl::string_view(header_bytes, has_header ? sizeof(header_bytes) : 0),
          in.size()));
  // Word-aligned for the parser; sized by bytes the file really has (ParseEnvelopeHeader).
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(header.message_bytes() / 8);
  const absl::string_view message(reinterpret_cast<const char*>(words.begin()),
                                  header.message_bytes());
  TESSERA_RETURN_IF_ERROR(
      in.ReadAt(sizeof(header_bytes), message.size(), reinterpret_cast<char*>(words.begin())));
  TESSERA_RETURN_IF_ERROR(schema_internal::CheckMessageChecksum(FileKind::kSlice, header, message));
  opened.data_at = sizeof(header_bytes) + message.size();
  return schema_internal::ReadMessage(
      FileKind::kSlice, message, [&](capnp::MessageReader& reader) {
        return ParseSliceMetadata(reader.getRoot<wire::TensorSlice>(), header.tail_bytes, opened);
      });
}

// Copies bytes [begin, end) of tensor `t` (0: the value, 1 + i: slot i) of an opened slice to
// `out`, checking every chunk it touches: a chunk inside the range is read straight into `out`
// and checked there; one across an edge of the range is read whole into `bounce` first.
absl::Status ReadTensorBytes(OpenedSlice& opened, size_t t, uint64_t begin, uint64_t end,
                             char* out, std::vector<char>& bounce) {
  if (begin >= end) return absl::OkStatus();
  const uint64_t at = opened.data_at + t * opened.tensor_bytes;
  for (uint64_t c = begin / kChunkBytes; c * kChunkBytes < end; ++c) {
    const uint64_t chunk_begin = c * kChunkBytes;
    const uint64_t chunk_end = std::min(chunk_begin + kChunkBytes, opened.tensor_bytes);
    const size_t n = static_cast<size_t>(chunk_end - chunk_begin);
    const bool inside = chunk_begin >= begin && chunk_end <= end;
    char* to = out + (chunk_begin - begin);
    if (!inside) {
      bounce.resize(kChunkBytes);
      to = bounce.data();
    }
    TESSERA_RETURN_IF_ERROR(opened.file->ReadAt(at + chunk_begin, n, to));
    if (schema_internal::Crc32c(absl::string_view(to, n)) != opened.crcs[t][c]) {
      const std::string tensor =
          t == 0 ? "" : absl::StrCat(" slot ", opened.meta.slot_names[t - 1]);
      return absl::DataLossError(absl::StrCat("checksum mismatch in slice of ",
                                              opened.meta.variable, tensor, " chunk ", c));
    }
    if (!inside) {
      const uint64_t from = std::max(chunk_begin, begin), to_end = std::min(chunk_end, end);
      std::memcpy(out + (from - begin), bounce.data() + (from - chunk_begin),
                  static_cast<size_t>(to_end - from));
    }
  }
  return absl::OkStatus();
}

// The whole slice `in` holds.
absl::StatusOr<TensorSlice> ReadSlice(RandomAccessFile& in) {
  OpenedSlice opened;
  TESSERA_RETURN_IF_ERROR(OpenSlice(in, opened));
  TensorSlice slice;
  slice.variable = opened.meta.variable;
  slice.full_shape = opened.meta.full_shape;
  slice.dtype = opened.meta.dtype;
  slice.row_offset = opened.meta.row_offset;
  slice.slot_names = opened.meta.slot_names;
  slice.step = opened.meta.step;
  slice.checkpoint = opened.meta.checkpoint;
  std::vector<char> bounce;
  slice.value = Tensor(opened.meta.value.shape());
  TESSERA_RETURN_IF_ERROR(ReadTensorBytes(opened, 0, 0, opened.tensor_bytes,
                                          reinterpret_cast<char*>(slice.value.data()), bounce));
  for (size_t i = 0; i < opened.meta.slots.size(); ++i) {
    slice.slots.emplace_back(opened.meta.value.shape());
    TESSERA_RETURN_IF_ERROR(ReadTensorBytes(opened, 1 + i, 0, opened.tensor_bytes,
                                            reinterpret_cast<char*>(slice.slots.back().data()),
                                            bounce));
  }
  char padding[8] = {};
  TESSERA_RETURN_IF_ERROR(in.ReadAt(opened.data_at + opened.crcs.size() * opened.tensor_bytes,
                                    opened.padding, padding));
  if (std::any_of(padding, padding + 8, [](char c) { return c != 0; })) {
    return absl::DataLossError(
        absl::StrCat("slice of ", slice.variable, ": non-zero padding after the data"));
  }
  return slice;
}

}  // namespace

absl::StatusOr<TensorSlice> ReadSliceBlock(const std::string& dir,
                                           const CheckpointVariable& variable, int64_t offset,
                                           int64_t rows, Env* env) {
  TESSERA_ASSIGN_OR_RETURN(const std::vector<SliceRead> reads,
                           PlanSliceReads(variable, offset, rows));
  // Headers and messages first: every file must be the one the manifest names before anything
  // is allocated for the block.
  std::vector<OpenedSlice> opened(reads.size());
  std::vector<const TensorSliceView*> metas;
  for (size_t i = 0; i < reads.size(); ++i) {
    const std::string path = absl::StrCat(dir, "/", variable.slices[reads[i].slice].file);
    TESSERA_ASSIGN_OR_RETURN(opened[i].owned, env->NewRandomAccessFile(path));
    TESSERA_RETURN_IF_ERROR(Annotate(OpenSlice(*opened[i].owned, opened[i]), path));
    metas.push_back(&opened[i].meta);
  }
  TESSERA_ASSIGN_OR_RETURN(const int64_t step,
                           CheckSliceReads(variable, offset, rows, reads, metas));
  TensorSlice block = EmptyBlock(variable, offset, rows, step);
  // Written whole next: back its pages in one call rather than one fault per page in the copy.
  PopulateForWrite(block.value.data(), block.value.size());
  for (Tensor& slot : block.slots) PopulateForWrite(slot.data(), slot.size());
  const uint64_t row_bytes = static_cast<uint64_t>(block.value.shape().row_size()) * sizeof(float);
  std::vector<char> bounce;
  for (size_t i = 0; i < reads.size(); ++i) {
    const SliceRead& read = reads[i];
    const uint64_t begin = static_cast<uint64_t>(read.source_row) * row_bytes;
    const uint64_t end = begin + static_cast<uint64_t>(read.rows) * row_bytes;
    const uint64_t to = static_cast<uint64_t>(read.target_row) * row_bytes;
    const std::string path = absl::StrCat(dir, "/", variable.slices[read.slice].file);
    TESSERA_RETURN_IF_ERROR(
        Annotate(ReadTensorBytes(opened[i], 0, begin, end,
                                 reinterpret_cast<char*>(block.value.data()) + to, bounce),
                 path));
    for (size_t k = 0; k < block.slots.size(); ++k) {
      TESSERA_RETURN_IF_ERROR(
          Annotate(ReadTensorBytes(opened[i], 1 + k, begin, end,
                                   reinterpret_cast<char*>(block.slots[k].data()) + to, bounce),
                   path));
    }
  }
  return block;
}

absl::StatusOr<std::string> EncodeSlice(const TensorSlice& slice) {
  std::string bytes;
  schema_internal::StringWriter out(&bytes);
  TESSERA_RETURN_IF_ERROR(WriteSlice(ViewOf(slice), out));
  return bytes;
}

absl::StatusOr<TensorSlice> DecodeSlice(const std::string& bytes) {
  schema_internal::StringReader in(bytes);
  return ReadSlice(in);
}

absl::Status WriteSliceFile(const std::string& path, const TensorSliceView& slice, Env* env) {
  TESSERA_RETURN_IF_ERROR(ValidateTensorSlice(slice));
  return WriteFileAtomically(
      *env, path, [&slice](WritableFile& out) { return WriteSlice(slice, out); },
      /*sync_directory=*/false);
}

absl::Status WriteSliceFile(const std::string& path, const TensorSlice& slice, Env* env) {
  return WriteSliceFile(path, ViewOf(slice), env);
}

absl::StatusOr<TensorSlice> ReadSliceFile(const std::string& path, Env* env) {
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<RandomAccessFile> file, env->NewRandomAccessFile(path));
  absl::StatusOr<TensorSlice> slice = ReadSlice(*file);
  if (!slice.ok()) return Annotate(slice.status(), path);
  return slice;
}

}  // namespace tessera
