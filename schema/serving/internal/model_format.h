// The format of an exported model file (Note [Model file layout] below): its format versions, and
// the ExportedModel message of schema/serving/model.capnp built from and parsed into a
// ModelDescription. model_writer.cc writes files with it, model_reader.cc reads them; the data
// section after the message is model_data.h's.
//
// Thread-safety: pure functions over Cap'n Proto Readers and Builders.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "core/serving/exported_model.h"
#include "schema/serving/internal/model_data.h"
#include "schema/serving/model.capnp.h"

namespace tessera {
namespace schema_internal {

// Note [Model file layout]
// An exported model file of format 2 is
//
//   header     schema/base/internal/envelope.h's 24 bytes; its tail is everything after the message
//   message    an ExportedModel: spec, signatures, step, the piece size, where the checksum table
//              starts, and per variable its name, shape, dtype (float32) and data offset — sizes,
//              never values, so it is complete before the first value is read
//   data       each variable's float32s, raw little-endian, in name order, each followed by zeros
//              to a multiple of 8 bytes (so every variable starts 8-byte aligned in the file, and
//              in a page-aligned mapping of it)
//   checksums  the CRC-32C of every piece of every variable, in order, as uint32s, then zeros to
//              a multiple of 8: a piece is kModelPieceBytes (64 KiB) of one variable's data, its
//              last piece shorter and including the variable's padding
//   seal       the CRC-32C of the checksums (padding included) and the number of pieces
//
// Offsets in the message count from the start of the data; a reader recomputes the whole layout
// from the shapes and the piece size (LayOutModel) and refuses a file whose offsets, table or size
// differ, so variables can neither overlap nor leave gaps, and every byte is covered by exactly
// one check: the header's CRC-32 the message, a piece's CRC-32C its data and padding, the seal
// the table, the piece count itself.
//
// A writer streams: the header and message go first (their sizes follow from the shapes), then
// each variable's rows as the source yields them, each piece checksummed as it passes, then the
// table — one sequential pass in buffers of a few MiB, whatever the model's size. A reader maps
// the file, checks the header, the message and the table (kilobytes), and serves the variables in
// place, verifying a piece the first time a prediction reads a row in it: opening a 2.6 GB model
// reads a few hundred KiB, and a prediction touches the pages of the rows it looks up.
//
// Format 1 kept the values inside the message as 1 MiB checksummed chunks (field_codec.cc): a
// reader had to read and decode all of it, a writer to hold it all. It is still read.

inline constexpr uint32_t kModelFormatVersion = 2;
inline constexpr uint32_t kInlineModelFormatVersion = 1;

// Fills `out` with a format-2 message: `model`'s description, the piece size, and per variable of
// `layout` its name, shape, dtype and data offset (sizes, never values).
void BuildModel(const ModelDescription& model, const ModelLayout& layout,
                wire::ExportedModel::Builder out);

// The description (spec, signatures, step, writer version) a message of either format holds:
// exactly what BuildModel wrote, so a loaded model exports to the same bytes. DataLoss for bad
// content.
absl::StatusOr<ModelDescription> ParseDescription(wire::ExportedModel::Reader in);

}  // namespace schema_internal
}  // namespace tessera
