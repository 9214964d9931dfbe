// The data section of a format-2 exported model file (Note [Model file layout] in
// model_format.h): where each variable's raw floats sit, the streaming writer that checksums them
// piece by piece as they go to the file, and the served view of a mapped file that verifies a
// piece the first time a prediction reads from it. No Cap'n Proto here: model_format.h builds and
// parses the message, model_writer.cc and model_reader.cc write and read it.
//
// Example (writing; model_writer.cc does this after the header and message):
//   TESSERA_ASSIGN_OR_RETURN(ModelLayout layout, LayOutModel(variables, kModelPieceBytes));
//   ModelDataWriter data(out, head.size(), layout);
//   for each variable, in order: TESSERA_RETURN_IF_ERROR(data.Append(bytes)); ...
//   data.EndVariable(); TESSERA_RETURN_IF_ERROR(data.Finish());  // the checksum table and its seal
//
// Thread-safety: a layout is a value; a ModelDataWriter is used by one thread; MappedVariables is
// safe to share (its verified-pieces bitmap is atomic).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/serving/exported_model.h"
#include "tessera/env.h"
#include "tessera/tensor.h"

namespace tessera {
namespace schema_internal {

// The piece size this build writes: a lookup of one row verifies at most two pieces (a row of up
// to 64 KiB), i.e. reads at most 128 KiB of the file, whatever the table's size.
inline constexpr uint32_t kModelPieceBytes = 64 << 10;
// What a reader accepts: powers of two no one would write by accident in between.
inline constexpr uint32_t kMinModelPieceBytes = 4 << 10;
inline constexpr uint32_t kMaxModelPieceBytes = 64 << 20;
// The largest format-2 message a reader parses: it holds no values, only names and shapes.
inline constexpr uint64_t kMaxModelMessageBytes = uint64_t{64} << 20;
// The seal after the checksum table: its CRC-32C and the number of pieces, two uint32s.
inline constexpr uint64_t kModelSealBytes = 8;

struct VariableExtent {
  std::string name;
  Shape shape;
  uint64_t offset = 0;       // from the start of the data section; a multiple of 8
  uint64_t bytes = 0;        // its float32s
  uint64_t padded = 0;       // bytes, then zeros up to a multiple of 8
  uint64_t first_piece = 0;  // index of its first piece in the checksum table
  uint64_t pieces = 0;       // ceil(padded / piece_bytes)
};

struct ModelLayout {
  uint64_t piece_bytes = kModelPieceBytes;
  std::vector<VariableExtent> variables;  // in name order, back to back
  uint64_t checksums_offset = 0;          // the table: a uint32 per piece, then zeros to 8
  uint64_t num_pieces = 0;
  uint64_t table_bytes = 0;  // padded
  uint64_t data_bytes = 0;   // the whole section: variables, table, seal
};

// Lays out `variables` (name, shape), in name order, in pieces of `piece_bytes`. InvalidArgument
// for a piece size outside [kMinModelPieceBytes, kMaxModelPieceBytes] or not a power of two, names
// not strictly increasing, and sizes that overflow or exceed what a model file may hold
// (MaxFileBytes). A reader computes the same layout from the message and requires the message's
// offsets to be exactly these.
absl::StatusOr<ModelLayout> LayOutModel(const std::vector<std::pair<std::string, Shape>>& variables,
                                        uint64_t piece_bytes);

// Writes the data section through `out`, strictly sequentially from byte `at`, in buffers of a
// few MiB: each variable's bytes (Append, in order, then EndVariable), then the checksum table and
// its seal (Finish). Each piece's CRC-32C is taken as its bytes pass, while they are in cache.
class ModelDataWriter {
 public:
  ModelDataWriter(WritableFile& out, uint64_t at, const ModelLayout& layout);
  absl::Status Append(absl::string_view bytes);
  // Pads the current variable to 8 bytes and closes its last piece.
  absl::Status EndVariable();
  // InternalError when the bytes appended do not match the layout.
  absl::Status Finish();

 private:
  absl::Status Flush();
  void EndPiece();

  WritableFile& out_;
  uint64_t at_;
  const ModelLayout& layout_;
  std::string buffer_;  // bytes not yet written
  uint64_t in_variable_ = 0;
  uint64_t in_piece_ = 0;
  uint32_t crc_ = 0;
  std::vector<uint32_t> crcs_;
};

// The values of a format-2 file held in `region` (its data section starting at byte `data_at`),
// served in place. `crcs` is the checksum table, already checked against its seal. A piece is
// verified — its CRC-32C, and every float in it finite — the first time CheckRows or CheckAll
// covers it, and marked so; a piece that fails is never marked, so every request reading it fails
// with DataLoss naming `file`, the variable and the piece's rows. CheckAll of a large variable
// drops the pages it has verified (ReadOnlyMemoryRegion::DropPages) as it goes.
class MappedVariables final : public ServedVariables {
 public:
  MappedVariables(std::unique_ptr<ReadOnlyMemoryRegion> region, uint64_t data_at,
                  ModelLayout layout, std::vector<uint32_t> crcs, std::string file);
  const std::map<std::string, ConstTensorView>& views() const override { return views_; }
  absl::Status CheckRows(const std::string& name, absl::Span<const int64_t> rows) const override;
  absl::Status CheckAll(const std::string& name) const override;
  const ModelLayout& layout() const { return layout_; }

 private:
  absl::StatusOr<const VariableExtent*> Find(const std::string& name) const;
  absl::Status VerifyPiece(const VariableExtent& v, uint64_t piece) const;

  std::unique_ptr<ReadOnlyMemoryRegion> region_;
  const char* data_;
  ModelLayout layout_;
  std::vector<uint32_t> crcs_;
  std::string file_;
  std::map<std::string, ConstTensorView> views_;
  std::map<std::string, size_t> index_;
  std::unique_ptr<std::atomic<uint64_t>[]> verified_;  // a bit per piece
};

// The checksum table of a data section of `layout.data_bytes` bytes at `data`, after checking its
// seal. DataLoss naming what is wrong.
absl::StatusOr<std::vector<uint32_t>> ReadChecksumTable(const char* data,
                                                        const ModelLayout& layout);

}  // namespace schema_internal
}  // namespace tessera
