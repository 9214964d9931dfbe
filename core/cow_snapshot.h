// CowSnapshot: a shard's tensors as of a cut, read by a writer thread while the shard goes on.
//
// Note [Copy-on-write snapshots]
// A background save (Note [Checkpoints without pausing], coordinator/checkpoint.cc) must write the
// shard as it was at the cut while later updates change it. It used to copy the whole block and
// slots at the cut, in the shard's mailbox: training waited for that copy (~9 ms a checkpoint for
// the default recsys, most of a cut), and a node held a second copy of every shard it saved
// (gigabytes at the RFC's scale). Now the cut only marks the tensors, and each is read in chunks
// of kSliceChunkBytes, the slice file's checksum unit (core/checkpoint.h):
//
//   - the writer reads a chunk still untouched straight from the shard's memory (the shard waits,
//     if it must write there meanwhile, until that one chunk is written: ~0.1 ms);
//   - the shard, before its first write into a chunk the writer has not read, copies that chunk
//     aside (BeforeWrite*), and the writer later takes the copy instead.
//
// So every chunk reaches the file exactly as it was at the cut, the cut costs no copy, and the
// memory held is the chunks written to before the writer reached them, each freed once written.
// A shard that replaces or frees its tensors (a restore, a new optimizer, its end) first copies
// every chunk not yet read (BeforeWriteAll). Once the writer is done (Finish, also on its
// failure), the shard's calls return at once and it drops the snapshot.
//
// Thread-safety: the Before* calls come from the shard's thread, ReadChunk and Finish from the
// writer's; all are safe against each other (one mutex; the chunk being read is the only one a
// writer may touch unlocked, and no Before* call returns while that chunk is being read).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/tensor.h"

namespace tessera {

class CowSnapshot {
 public:
  // Over `tensors`, as they are now (the shard's value, then each slot: one shape, which may be a
  // scalar's). The shard must call a Before* method ahead of every write into their memory, and
  // BeforeWriteAll before it frees or replaces any of them.
  explicit CowSnapshot(std::vector<ConstTensorView> tensors);
  CowSnapshot(const CowSnapshot&) = delete;
  CowSnapshot& operator=(const CowSnapshot&) = delete;

  // The shard, before writing rows `rows` (block-local, each in range) of any of the tensors.
  void BeforeWriteRows(absl::Span<const int64_t> rows);
  // The same for rows [begin, end).
  void BeforeWriteRange(int64_t begin, int64_t end);
  // The same for everything.
  void BeforeWriteAll();
  // True once the writer is done: the Before* calls do nothing any more.
  bool finished() const { return finished_.load(std::memory_order_acquire); }

  // The writer: calls `use` with the bytes of chunk `chunk` of tensor `tensor` (0 the value, then
  // the slots) as they were at the cut, and returns what it returns. Each chunk may be read once;
  // InvalidArgument for a chunk out of range or read before.
  absl::Status ReadChunk(size_t tensor, int64_t chunk,
                         absl::FunctionRef<absl::Status(absl::string_view)> use);
  // The writer is done (or gave up): frees every copy, and the shard goes on without it.
  void Finish();

  // Chunks of one tensor (of its byte size in kSliceChunkBytes, the last shorter; 0 when empty).
  int64_t chunks() const { return chunks_; }
  // Bytes of copies held now (chunks the shard wrote to before the writer read them).
  int64_t copied_bytes() const;

 private:
  enum class Chunk : uint8_t { kLive, kReading, kCopied, kDone };

  // Under mu_: makes chunks [first, last] of every tensor safe to write.
  void Protect(std::unique_lock<std::mutex>& lock, int64_t first, int64_t last);
  absl::string_view Bytes(size_t tensor, int64_t chunk) const;

  const std::vector<ConstTensorView> tensors_;
  const int64_t tensor_bytes_;  // each tensor's
  const int64_t row_bytes_;     // a row's (a scalar: the whole tensor)
  const int64_t chunks_;
  std::atomic<bool> finished_{false};
  std::atomic<int64_t> live_;  // chunks kLive or kReading, over every tensor: 0, nothing to do
  mutable std::mutex mu_;
  std::condition_variable read_;                              // a kReading chunk became kDone
  std::vector<std::vector<Chunk>> state_;                     // [tensor][chunk]
  std::vector<std::vector<std::unique_ptr<char[]>>> copies_;  // [tensor][chunk], kCopied only
  int64_t copied_bytes_ = 0;
};

}  // namespace tessera
