// CowSnapshot: a shard's tensors as of a cut, read by a writer thread while the shard goes on.
//
// Note [Copy-on-write snapshots]
// A background save (Note [Checkpoints without pausing], coordinator/checkpoint/save_restore.cc)
// must write the shard as it was at the cut while later updates change it. It used to copy the
// whole block and slots at the cut, in the shard's mailbox: training waited for that copy (~9 ms a
// checkpoint for the default recsys, most of a cut), and a node held a second copy of every shard
// it saved (gigabytes at the RFC's scale). Now the cut only marks the tensors. The writer reads
// them in chunks of kSliceChunkBytes, the slice file's checksum unit
// (core/checkpoint/checkpoint.h); the shard protects them in pages of kCowPageBytes:
//
//   - the writer reads a chunk still untouched straight from the shard's memory (the shard waits,
//     if it must write there meanwhile, until that one chunk is written: ~0.1 ms);
//   - the shard, before its first write into a page the writer has not read, copies that page
//     aside (BeforeWrite*), and the writer later reads the chunk with the copy in its place.
//
// So every chunk reaches the file exactly as it was at the cut, the cut costs no copy, and the
// memory held is the pages written to before the writer reached them, each freed once written.
// Pages, not chunks, because a sparse step touches rows all over a table: at the RFC's scale
// (4000-byte rows, 1 MiB chunks) the first steps after a cut copied a whole chunk for each row
// they updated, gigabytes; a page copies about the row. A shard that replaces or frees its
// tensors (a restore, a new optimizer, its end) first copies every page not yet read
// (BeforeWriteAll). Once the writer is done (Finish, also on its failure), the shard's calls
// return at once and it drops the snapshot.
//
// Rows of the value still waiting for their initializer at the cut (Note [Rows initialized on
// first touch], core/ps/first_touch.h) are not initialized by the cut: the writer computes them
// itself (UnfilledRows), the values the shard would give them, so the cut stays a mark at any
// scale (initializing the RFC-scale model's untouched rows at its cut took 1.5-1.9 s, with
// training stopped) and they cost the shard no memory. The shard initializing such a row later
// is a write like any other (BeforeWriteRows first); a page of nothing but such rows needs no
// copy, since the writer never reads it.
//
// Thread-safety: the Before* calls come from the shard's thread, ReadChunk and Finish from the
// writer's; all are safe against each other (one mutex; the pages of the chunk being read are
// the only ones a writer may touch unlocked, and no Before* call returns while one of them is
// being read).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

// What the shard copies before it writes where the writer has not read yet (Note [Copy-on-write
// snapshots]); kSliceChunkBytes is a whole number of them.
inline constexpr int64_t kCowPageBytes = int64_t{4} << 10;

// The rows of the value (tensor 0) that had no value yet at the cut, and how to compute them.
struct UnfilledRows {
  std::vector<uint8_t> rows;  // per row of the value, 1 for a row without a value; empty: none
  // Writes rows [begin, begin + out.rows()) as the shard would initialize them.
  std::function<void(int64_t begin, TensorView out)> fill;
};

class CowSnapshot {
 public:
  // Over `tensors`, as they are now (the shard's value, then each slot: one shape, which may be a
  // scalar's), but for the value's `unfilled` rows, which the writer reads as `unfilled.fill`
  // gives them. The shard must call a Before* method ahead of every write into their memory,
  // and BeforeWriteAll before it frees or replaces any of them.
  explicit CowSnapshot(std::vector<ConstTensorView> tensors, UnfilledRows unfilled = {});
  CowSnapshot(const CowSnapshot&) = delete;
  CowSnapshot& operator=(const CowSnapshot&) = delete;

  // The shard, before writing rows `rows` (block-local, each in range) of any of the tensors.
  void BeforeWriteRows(absl::Span<const int64_t> rows);
  // The same for rows [begin, end).
  void BeforeWriteRange(int64_t begin, int64_t end);
  // The same for everything.
  void BeforeWriteAll();
  // The shard, before it initializes rows `rows` (or [begin, end)) of the value: the slots are
  // not written.
  void BeforeFillRows(absl::Span<const int64_t> rows);
  void BeforeFillRange(int64_t begin, int64_t end);
  // True once the writer is done: the Before* calls do nothing any more.
  bool finished() const { return finished_.load(std::memory_order_acquire); }

  // The writer: calls `use` with the bytes of chunk `chunk` of tensor `tensor` (0 the value, then
  // the slots) as they were at the cut, and returns what it returns. Each chunk may be read once;
  // InvalidArgument for a chunk out of range or read before.
  absl::Status ReadChunk(size_t tensor, int64_t chunk,
                         absl::FunctionRef<absl::Status(absl::string_view)> use);
  // The writer is done (or gave up): frees every copy, and the shard goes on without it.
  void Finish();

  // Tensor `i` (0 the value, then the slots): its shape; its data is the shard's memory now, to be
  // read through ReadChunk only.
  const ConstTensorView& tensor(size_t i) const { return tensors_[i]; }
  size_t num_tensors() const { return tensors_.size(); }
  // Chunks of one tensor (of its byte size in kSliceChunkBytes, the last shorter; 0 when empty).
  int64_t chunks() const { return chunks_; }
  // Bytes of copies held now (pages the shard wrote to before the writer read them).
  int64_t copied_bytes() const;

 private:
  // kFilled: a page of the value holding only unfilled rows, written to by the shard; the writer
  // computes it, so it was not copied.
  enum class Page : uint8_t { kLive, kReading, kCopied, kFilled, kDone };

  // Under mu_: makes pages [first, last] of the first `tensors` tensors safe to write.
  void Protect(std::unique_lock<std::mutex>& lock, int64_t first, int64_t last, size_t tensors);
  void ProtectRows(absl::Span<const int64_t> rows, size_t tensors);
  void ProtectRange(int64_t begin, int64_t end, size_t tensors);
  // Byte range [begin, begin + size) of tensor `tensor`, in the shard's memory.
  absl::string_view Bytes(size_t tensor, int64_t begin, int64_t size) const;
  absl::string_view PageBytes(size_t tensor, int64_t page) const;
  // Whether page `page` of the value holds nothing but unfilled rows.
  bool OnlyUnfilled(int64_t page) const;
  // Overwrites the unfilled rows' bytes in `chunk`, bytes [begin, begin + chunk.size()) of the
  // value, with their computed values.
  void FillRows(int64_t begin, char* chunk, int64_t size) const;
  // Whether bytes [begin, begin + size) of the value hold part of an unfilled row.
  bool TouchesUnfilled(int64_t begin, int64_t size) const;

  const std::vector<ConstTensorView> tensors_;
  const int64_t tensor_bytes_;  // each tensor's
  const int64_t row_bytes_;     // a row's (a scalar: the whole tensor)
  const int64_t chunks_;
  const int64_t pages_;  // each tensor's
  const UnfilledRows unfilled_;
  std::atomic<bool> finished_{false};
  std::atomic<int64_t> live_;  // pages kLive or kReading, over every tensor: 0, nothing to do
  mutable std::mutex mu_;
  std::condition_variable read_;          // kReading pages became kDone
  std::vector<std::vector<Page>> state_;  // [tensor][page]
  // [tensor]: page -> its copy, kCopied pages only.
  std::vector<absl::flat_hash_map<int64_t, std::unique_ptr<char[]>>> copies_;
  int64_t copied_bytes_ = 0;
};

}  // namespace tessera
