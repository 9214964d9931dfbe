#include "schema/serving/internal/model_data.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "schema/base/internal/crc32c.h"
#include "schema/base/internal/envelope.h"
#include "tessera/status.h"

namespace tessera {
namespace schema_internal {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "schema/ assumes a little-endian host");

// Bytes gathered before each write: a few MiB keeps the writes large and the memory small.
constexpr size_t kWriteBufferBytes = size_t{4} << 20;

uint64_t PaddedToWords(uint64_t bytes) { return (bytes + 7) / 8 * 8; }

void StoreLE32(char* at, uint32_t value) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}
uint32_t LoadLE32(const char* at) {
  uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= uint32_t{static_cast<unsigned char>(at[i])} << (8 * i);
  return value;
}

}  // namespace

absl::StatusOr<ModelLayout> LayOutModel(const std::vector<std::pair<std::string, Shape>>& variables,
                                        uint64_t piece_bytes) {
  if (piece_bytes < kMinModelPieceBytes || piece_bytes > kMaxModelPieceBytes ||
      (piece_bytes & (piece_bytes - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("exported model: piece size ", piece_bytes, " is not a power of two in [",
                     kMinModelPieceBytes, ", ", kMaxModelPieceBytes, "]"));
  }
  // Every size below is bounded by `limit` before the next is added, so nothing overflows.
  const uint64_t limit = static_cast<uint64_t>(MaxFileBytes(FileKind::kModel));
  ModelLayout layout;
  layout.piece_bytes = piece_bytes;
  uint64_t at = 0;
  for (const auto& [name, shape] : variables) {
    if (!layout.variables.empty() && !(layout.variables.back().name < name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("exported model: variable '", name, "' is out of order or repeated"));
    }
    VariableExtent v;
    v.name = name;
    v.shape = shape;
    uint64_t elements = 1;
    for (int64_t d : shape.dims()) {
      if (d < 0 || (d > 0 && elements > limit / static_cast<uint64_t>(d))) {
        return absl::InvalidArgumentError(
            absl::StrCat("exported model: variable '", name, "' of shape ", shape.ToString(),
                         " is larger than a model file may hold (", limit, " bytes)"));
      }
      elements *= static_cast<uint64_t>(d);
    }
    v.bytes = elements * sizeof(float);
    v.padded = PaddedToWords(v.bytes);
    if (v.padded > limit - at) {
      return absl::InvalidArgumentError(absl::StrCat("exported model: the variables up to '", name,
                                                     "' take more than a model file may hold (",
                                                     limit, " bytes)"));
    }
    v.offset = at;
    v.first_piece = layout.num_pieces;
    v.pieces = (v.padded + piece_bytes - 1) / piece_bytes;
    at += v.padded;
    layout.num_pieces += v.pieces;
    layout.variables.push_back(std::move(v));
  }
  layout.checksums_offset = at;
  layout.table_bytes = PaddedToWords(layout.num_pieces * 4);
  if (layout.table_bytes + kModelSealBytes > limit - at) {
    return absl::InvalidArgumentError(absl::StrCat(
        "exported model: the variables and their checksums take more than a model file may hold (",
        limit, " bytes)"));
  }
  layout.data_bytes = at + layout.table_bytes + kModelSealBytes;
  return layout;
}

ModelDataWriter::ModelDataWriter(WritableFile& out, uint64_t at, const ModelLayout& layout)
    : out_(out), at_(at), layout_(layout) {
  buffer_.reserve(kWriteBufferBytes + 8);
  crcs_.reserve(static_cast<size_t>(layout.num_pieces));  // 4 bytes per 64 KiB of data
}

void ModelDataWriter::EndPiece() {
  if (in_piece_ == 0) return;
  crcs_.push_back(crc_);
  crc_ = 0;
  in_piece_ = 0;
}

absl::Status ModelDataWriter::Flush() {
  if (buffer_.empty()) return absl::OkStatus();
  TESSERA_RETURN_IF_ERROR(out_.WriteAt(at_, buffer_));
  at_ += buffer_.size();
  buffer_.clear();
  return absl::OkStatus();
}

absl::Status ModelDataWriter::Append(absl::string_view bytes) {
  while (!bytes.empty()) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(
        {bytes.size(), layout_.piece_bytes - in_piece_, kWriteBufferBytes - buffer_.size()}));
    const absl::string_view part = bytes.substr(0, n);
    crc_ = Crc32c(part, crc_);
    buffer_.append(part.data(), part.size());
    in_piece_ += n;
    in_variable_ += n;
    if (in_piece_ == layout_.piece_bytes) EndPiece();
    if (buffer_.size() == kWriteBufferBytes) TESSERA_RETURN_IF_ERROR(Flush());
    bytes.remove_prefix(n);
  }
  return absl::OkStatus();
}

absl::Status ModelDataWriter::EndVariable() {
  static constexpr char kZeros[8] = {};
  TESSERA_RETURN_IF_ERROR(
      Append(absl::string_view(kZeros, PaddedToWords(in_variable_) - in_variable_)));
  EndPiece();
  in_variable_ = 0;
  return absl::OkStatus();
}

absl::Status ModelDataWriter::Finish() {
  if (crcs_.size() != layout_.num_pieces) {
    return absl::InternalError(absl::StrCat("exported model: wrote ", crcs_.size(),
                                            " pieces of data, the layout has ",
                                            layout_.num_pieces));
  }
  TESSERA_RETURN_IF_ERROR(Flush());
  std::string table(static_cast<size_t>(layout_.table_bytes + kModelSealBytes), '\0');
  for (size_t i = 0; i < crcs_.size(); ++i) StoreLE32(table.data() + 4 * i, crcs_[i]);
  const size_t table_bytes = static_cast<size_t>(layout_.table_bytes);
  StoreLE32(table.data() + table_bytes, Crc32c(absl::string_view(table.data(), table_bytes)));
  StoreLE32(table.data() + table_bytes + 4, static_cast<uint32_t>(crcs_.size()));
  return out_.WriteAt(at_, table);
}

absl::StatusOr<std::vector<uint32_t>> ReadChecksumTable(const char* data,
                                                        const ModelLayout& layout) {
  const char* table = data + layout.checksums_offset;
  const size_t table_bytes = static_cast<size_t>(layout.table_bytes);
  const uint32_t stored = LoadLE32(table + table_bytes);
  const uint32_t computed = Crc32c(absl::string_view(table, table_bytes));
  if (stored != computed) {
    return absl::DataLossError(absl::StrFormat(
        "exported model: checksum mismatch in its table of checksums (stored %08x, computed %08x)",
        stored, computed));
  }
  const uint32_t pieces = LoadLE32(table + table_bytes + 4);
  if (pieces != layout.num_pieces) {
    return absl::DataLossError(absl::StrCat("exported model: its table lists ", pieces,
                                            " pieces of data, its variables have ",
                                            layout.num_pieces));
  }
  std::vector<uint32_t> crcs(static_cast<size_t>(layout.num_pieces));
  for (size_t i = 0; i < crcs.size(); ++i) crcs[i] = LoadLE32(table + 4 * i);
  for (size_t at = crcs.size() * 4; at < table_bytes; ++at) {
    if (table[at] != 0) return absl::DataLossError("exported model: non-zero padding in its table");
  }
  return crcs;
}

MappedVariables::MappedVariables(std::unique_ptr<ReadOnlyMemoryRegion> region, uint64_t data_at,
                                 ModelLayout layout, std::vector<uint32_t> crcs, std::string file)
    : region_(std::move(region)),
      data_(region_->data() + data_at),
      layout_(std::move(layout)),
      crcs_(std::move(crcs)),
      file_(std::move(file)),
      verified_(new std::atomic<uint64_t>[(layout_.num_pieces + 63) / 64]) {
  for (uint64_t i = 0; i < (layout_.num_pieces + 63) / 64; ++i) verified_[i] = 0;
  for (size_t i = 0; i < layout_.variables.size(); ++i) {
    const VariableExtent& v = layout_.variables[i];
    // 8-byte aligned: the region is, and so are the data section and every offset in it.
    views_.emplace(v.name,
                   ConstTensorView(reinterpret_cast<const float*>(data_ + v.offset), v.shape));
    index_.emplace(v.name, i);
  }
}

absl::StatusOr<const VariableExtent*> MappedVariables::Find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(file_, ": no variable '", name, "'"));
  }
  return &layout_.variables[it->second];
}

absl::Status MappedVariables::VerifyPiece(const VariableExtent& v, uint64_t piece) const {
  const uint64_t g = v.first_piece + piece;
  std::atomic<uint64_t>& word = verified_[g / 64];
  const uint64_t bit = uint64_t{1} << (g % 64);
  if (word.load(std::memory_order_acquire) & bit) return absl::OkStatus();
  const uint64_t begin = piece * layout_.piece_bytes;
  const uint64_t end = std::min(begin + layout_.piece_bytes, v.padded);
  const char* bytes = data_ + v.offset + begin;
  const int64_t row_bytes = std::max<int64_t>(v.shape.row_size(), 1) * 4;
  const auto rows = [&] {
    const int64_t last = static_cast<int64_t>((std::min(end, v.bytes) - 1) / row_bytes);
    return absl::StrCat("rows [", static_cast<int64_t>(begin / row_bytes), ", ", last + 1, ")");
  };
  const uint32_t crc = Crc32c(absl::string_view(bytes, static_cast<size_t>(end - begin)));
  if (crc != crcs_[g]) {
    return absl::DataLossError(absl::StrFormat(
        "%s: checksum mismatch in variable '%s' %s (piece %d: stored %08x, computed %08x)", file_,
        v.name, rows(), piece, crcs_[g], crc));
  }
  // The floats of the piece (not the padding after the variable's last value).
  const uint64_t floats_end = std::min(end, v.bytes);
  if (floats_end > begin) {
    const auto values = absl::MakeConstSpan(reinterpret_cast<const float*>(bytes),
                                            static_cast<size_t>((floats_end - begin) / 4));
    if (const auto bad = FirstNonFinite(values)) {
      const uint64_t at = begin + static_cast<uint64_t>(*bad) * 4;
      return absl::DataLossError(absl::StrCat(
          file_, ": variable '", v.name, "' row ", at / static_cast<uint64_t>(row_bytes),
          " holds a non-finite value (", values[*bad], "), which no export writes"));
    }
  }
  word.fetch_or(bit, std::memory_order_release);
  return absl::OkStatus();
}

absl::Status MappedVariables::CheckRows(const std::string& name,
                                        absl::Span<const int64_t> rows) const {
  TESSERA_ASSIGN_OR_RETURN(const VariableExtent* v, Find(name));
  const uint64_t row_bytes = static_cast<uint64_t>(std::max<int64_t>(v->shape.row_size(), 1)) * 4;
  const int64_t num_rows = v->shape.rows();
  uint64_t next = 0;  // pieces below this one are verified already by this call
  for (int64_t row : rows) {
    if (row < 0 || row >= num_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(file_, ": variable '", name, "' has no row ", row));
    }
    const uint64_t begin = static_cast<uint64_t>(row) * row_bytes;
    const uint64_t first = std::max(next, begin / layout_.piece_bytes);
    const uint64_t last = (begin + row_bytes - 1) / layout_.piece_bytes;
    for (uint64_t p = first; p <= last; ++p) TESSERA_RETURN_IF_ERROR(VerifyPiece(*v, p));
    next = std::max(next, last + 1);
  }
  return absl::OkStatus();
}

absl::Status MappedVariables::CheckAll(const std::string& name) const {
  TESSERA_ASSIGN_OR_RETURN(const VariableExtent* v, Find(name));
  // A large variable read whole (inspect --verify, a copy into memory) is let go of as it goes,
  // so this process never holds more than a window of it: a model larger than the memory can
  // be verified. Small ones (dense variables, read by every prediction) stay mapped in.
  constexpr uint64_t kWindowBytes = uint64_t{64} << 20;
  const bool drop = v->padded > kWindowBytes;
  const uint64_t at = static_cast<uint64_t>(data_ - region_->data()) + v->offset;
  uint64_t dropped = 0;
  for (uint64_t p = 0; p < v->pieces; ++p) {
    TESSERA_RETURN_IF_ERROR(VerifyPiece(*v, p));
    const uint64_t done = std::min((p + 1) * layout_.piece_bytes, v->padded);
    if (drop && (done - dropped >= kWindowBytes || p + 1 == v->pieces)) {
      region_->DropPages(at + dropped, done - dropped);
      dropped = done;
    }
  }
  return absl::OkStatus();
}

}  // namespace schema_internal
}  // namespace tessera
