// Reading and writing checkpoints (core/checkpoint/checkpoint.h) as Cap'n Proto files. The only
// code that touches the checkpoint schemas' Readers and Builders
// (schema/checkpoint/checkpoint.capnp).
//
// Files carry a format version and checksums over every byte (a slice file's float data: a
// CRC-32C per 1 MiB chunk, read and written straight from and into the tensors; Note [Slice file
// layout] in slice_file.cc). Reading enforces capnp's traversal
// and nesting limits and validates everything: malformed, truncated or forged bytes become
// DataLoss (corrupt data, a bad checksum) or InvalidArgument (well-formed but inconsistent
// content), never a crash, an exception escaping, or an allocation sized by the file.
//
// Files go through an Env (tessera/env.h): the real filesystem unless the caller passes another
// (tests pass core/base/mem_env.h's in-memory one).
//
// slice_file.cc implements the slice files, manifest_file.cc the manifests.
//
// Thread-safety: pure functions over files; concurrent calls on different paths are safe.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/checkpoint/checkpoint.h"
#include "core/checkpoint/save.h"
#include "tessera/env.h"

namespace tessera {

// The manifest's file name inside a checkpoint directory.
inline constexpr char kManifestFile[] = "manifest.tsr";

// Writes `slice` to `path` (validated first, InvalidArgument). The file is complete when this
// returns OK (written to a temporary name, fsync'd, renamed). The view's tensors are read in
// place, never copied.
absl::Status WriteSliceFile(const std::string& path, const TensorSliceView& slice,
                            Env* env = Env::Default());
absl::Status WriteSliceFile(const std::string& path, const TensorSlice& slice,
                            Env* env = Env::Default());
absl::StatusOr<TensorSlice> ReadSliceFile(const std::string& path, Env* env = Env::Default());

// The block of rows [offset, offset + rows) of `variable` (a manifest entry) from the checkpoint
// in `dir`: what AssembleSlice gives from the slice files PlanSliceReads names, but reading only
// the chunks holding the block's rows, straight into the block (a chunk across a read's edge goes
// through a 1 MiB buffer), each checked. Nothing is allocated for the block before every file's
// header and message are read and match the manifest. Errors: those of ReadSliceFile (naming the
// file), and InvalidArgument as PlanSliceReads and AssembleSlice.
absl::StatusOr<TensorSlice> ReadSliceBlock(const std::string& dir,
                                           const CheckpointVariable& variable, int64_t offset,
                                           int64_t rows, Env* env = Env::Default());

// The SliceStore (core/checkpoint/save.h) of slice files in an Env: what the shards of a PS node
// save and the mirrored replicas save into and load from (the machine's own filesystem by default).
class FileSliceStore final : public SliceStore {
 public:
  explicit FileSliceStore(Env* env = Env::Default()) : env_(env) {}
  absl::Status Write(const std::string& path, const TensorSliceView& slice) const override {
    return WriteSliceFile(path, slice, env_);
  }
  absl::StatusOr<TensorSlice> ReadBlock(const std::string& dir, const CheckpointVariable& variable,
                                        int64_t offset, int64_t rows) const override {
    return ReadSliceBlock(dir, variable, offset, rows, env_);
  }

 private:
  Env* env_;
};

// Writes dir/manifest.tsr atomically (temporary file, fsync, rename, fsync of the directory).
absl::Status WriteManifest(const std::string& dir, const CheckpointManifest& manifest,
                           Env* env = Env::Default());
// NotFound when the directory has no manifest (an incomplete checkpoint is invisible).
absl::StatusOr<CheckpointManifest> ReadManifest(const std::string& dir,
                                                Env* env = Env::Default());

// The same encodings in memory (for tests, fuzzers and the network).
absl::StatusOr<std::string> EncodeSlice(const TensorSlice& slice);
absl::StatusOr<TensorSlice> DecodeSlice(const std::string& bytes);
absl::StatusOr<std::string> EncodeManifest(const CheckpointManifest& manifest);
absl::StatusOr<CheckpointManifest> DecodeManifest(const std::string& bytes);

}  // namespace tessera
