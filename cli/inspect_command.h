// `tessera inspect PATH`: what a checkpoint or an exported model holds, as text.
//
//   checkpoint /tmp/ckpt
//   global step: 1200
//   variables: 2
//     user_embedding  [13, 4]  float32  step 1199
//       optimizer: adagrad {learning_rate: 0.05}
//       slots: accumulator
//       slices: 2
//         user_embedding.part_0.tsr  rows [0, 7)
//         user_embedding.part_1.tsr  rows [7, 13)
//     ...
//
//   exported model /tmp/export
//   format: 2
//   name: recsys
//   ...
//
// Thread-safety: pure functions over files and streams.
#pragma once

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "core/checkpoint/checkpoint.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"

namespace tessera::cli {

// A checkpoint's global step, its run, the version that wrote it and, per variable, its shape,
// dtype, optimizer, slot names, step and slice files with their row ranges (its shards when it
// was saved).
void DescribeCheckpoint(const CheckpointManifest& manifest, std::ostream& out);

// An exported model's file format, the version that wrote it, its name and step, signatures
// (inputs, outputs), layers, outputs, loss and variables with their shapes (nothing of their
// values is read).
void DescribeExportedModel(const OpenedModel& model, std::ostream& out);

// The command: describes what PATH holds — a checkpoint directory (a manifest), an export
// directory (a model), or both; PATH may also name the manifest or model file itself.
// NotFound when PATH does not exist or holds neither; the reader's DataLoss / InvalidArgument,
// naming the file, when one is corrupt. With `verify`, an exported model's values are read and
// checked too (every checksum; serving checks them lazily): DataLoss naming the variable and rows
// of the first bad piece.
absl::Status RunInspect(const std::string& path, std::ostream& out, bool verify = false);

}  // namespace tessera::cli
