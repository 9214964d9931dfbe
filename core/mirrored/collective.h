// Collectives between the replicas of a mirrored strategy, as plain data and pure arithmetic apart
// from any transport: the reduce operations (TF's tf.distribute.ReduceOp), the ring all-reduce
// one replica runs, and what the strategy does with per-replica values on the driver (Reduce,
// Gather).
//
// Note [Ring all-reduce]
// N replicas each hold a buffer of the same length L and all end with the element-wise sum (or
// mean) of the N buffers. The buffer is cut into chunks of at most `chunk_elements` floats, and
// each chunk runs its own ring independently, so chunks pipeline: while replica r reduces one
// chunk's segment the network carries another's. Within a chunk the N replicas form a ring
// (r sends only to r + 1 and receives only from r - 1, mod N) and the chunk is cut into N
// segments (RingSegments). A chunk takes 2(N - 1) steps:
//   - reduce-scatter, steps s = 0 .. N-2: r sends segment (r - s) and adds the segment it
//     receives, (r - s - 1), into its own. After the last one r holds segment (r + 1) summed over
//     every replica; with kMean it divides it by N there, once.
//   - all-gather, steps N-1+t for t = 0 .. N-2: r sends segment (r + 1 - t) and copies the
//     segment it receives, (r - t), over its own.
// What r sends at step k > 0 is exactly the segment it received at step k - 1, so a replica
// sends the next step of a chunk as soon as it has taken in the previous one, and each replica
// sends and receives 2(N - 1)/N of the buffer in all — the bandwidth-optimal ring. Every final
// segment is computed by one replica and copied verbatim to the others, so the N results are the
// same bits, whatever the order messages arrive in. One replica (N = 1) needs no step: the
// result is its buffer (divided by 1).
//
// Note [Ring segments read in place]
// A message does not copy the segment it carries: it shares the sender's buffer (RingValues),
// and the receiver reads the segment where the sender wrote it — in one process, the one copy a
// step needs is the receiver's add (or, in the all-gather, its copy) out of its neighbour's
// buffer; across processes the transport serializes straight from the buffer. This is safe
// without locks because of the ring's causality: r changes a segment it has sent only in a later
// step (the all-gather's copy over it), and the message that makes r do so descends, around the
// ring, from the one r + 1 sent after reading r's segment. The one write no chain orders is the
// next collective's: r may finish while r + 1 has yet to read r's last segments. So a buffer is
// written again only once no message shares it (RingBufferPool); a replica alternates between
// two buffers, and the second one is free whenever the first is still shared.
//
// Note [Ring of two in one process]
// With two replicas the reduce-scatter is one step and the all-gather one step back to the same
// neighbour, which copies the segment it just sent away, now summed. When the reduce-scatter's
// message is shared in place (both replicas in one process), the receiver writes the sum into
// both buffers in the same pass — the sender's segment is one the sender leaves alone until the
// all-gather's message for it arrives (Note [Ring segments read in place]) — and marks that
// message `in_place`, so the sender only counts it. That message shares the sender's own segment,
// the result, rather than the receiver's: the last reference a collective leaves in a neighbour's
// mailbox is then to the neighbour's own buffer, so the next collective finds its buffer free at
// once (sharing its own, a replica that finished first waited for its slower neighbour to take
// the message, often past RingBufferPool's patience, and the pool then alternated between two
// buffers: 0.2-0.4x memcpy at 4 MiB instead of 0.75-0.9x). Each replica then reads and writes every
// element once instead of reading it again for the copy, and the two results are the same bits
// (one sum, stored twice). Across processes the values arrive as the message's own, nothing is
// written back, and the all-gather copies as usual.
//
// Thread-safety: RingAllReduce and RingBufferPool are values one owner drives; RingValues are
// read-only and may be read on any thread; the functions are pure.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "tessera/mirrored.h"
#include "tessera/tensor.h"

namespace tessera {

// ReduceOp (tessera/mirrored.h): its numeric values are part of the wire format; never renumber.
absl::string_view ReduceOpName(ReduceOp op);  // "sum", "mean"
// "sum" or "mean"; InvalidArgument otherwise.
absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// [begin, end) of a buffer.
struct RingSpan {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// The `members` segments of [begin, end): consecutive, sizes differing by at most one (the
// longer ones first), some empty when the range is shorter than `members`.
// Precondition: members >= 1, begin <= end.
std::vector<RingSpan> RingSegments(int64_t begin, int64_t end, int32_t members);

// The most members a ring may have (a bound on what a message can make a replica allocate).
inline constexpr int32_t kMaxRingMembers = 4096;

// The default largest chunk: 256 Ki floats (1 MiB), so a 4 MiB tensor pipelines in 4 chunks.
inline constexpr int64_t kDefaultRingChunkElements = int64_t{1} << 18;

// The buffer one replica all-reduces, shared with the messages that carry its segments (Note
// [Ring segments read in place]).
using RingBuffer = std::shared_ptr<std::vector<float>>;

// The floats of one ring message, read-only: a segment of the sender's buffer itself, or values
// of the message's own (one that arrived over the network).
class RingValues {
 public:
  RingValues() = default;
  // A tensor's values, flat.
  static RingValues Own(Tensor values);
  // buffer[span], sharing the buffer. Precondition: span lies within it.
  static RingValues Share(RingBuffer buffer, RingSpan span);

  absl::Span<const float> span() const { return absl::Span<const float>(data_, size_); }
  int64_t size() const { return static_cast<int64_t>(size_); }
  // The sender's segment itself, for a receiver in the sender's process to write the result
  // into (Note [Ring of two in one process]); null for values of the message's own.
  float* shared_segment() const { return shared_; }

 private:
  std::shared_ptr<const void> owner_;
  float* shared_ = nullptr;
  const float* data_ = nullptr;
  size_t size_ = 0;
};

// One ring message: step `step` of chunk `chunk`, the segment's values.
struct RingChunk {
  int64_t chunk = 0;
  int32_t step = 0;
  RingValues values;
  // The values are already in the receiver's buffer (Note [Ring of two in one process]). Set
  // only in process and never serialized: a message that crossed processes has it false.
  bool in_place = false;
};

// The buffers of one replica's back-to-back all-reduces: Take hands out one that no message
// shares any more, so writing it cannot race a neighbour still reading a segment of the last
// collective (Note [Ring segments read in place]). It keeps at most two spares.
class RingBufferPool {
 public:
  // A buffer of `size` floats no message shares: the most recently given spare that is free,
  // resized (its contents are whatever it last held, new elements zero), or a new one when every
  // spare is still shared. When the most recent spare is still shared it first waits up to
  // `patience` for its messages to be read (yielding the core): back-to-back collectives then
  // reuse one buffer, whose lines are still in the caches, instead of alternating between two
  // (measured: a 4 MiB all-reduce in process ~2x slower when alternating).
  RingBuffer Take(size_t size, absl::Duration patience = absl::ZeroDuration());
  // Gives a buffer back for a later Take (messages may still share it).
  void Give(RingBuffer buffer);

 private:
  std::vector<RingBuffer> spares_;
};

// One replica's part in a ring all-reduce of a buffer (Note [Ring all-reduce]).
//
// Example (the actor that drives it forwards what it returns to replica rank + 1):
//   RingBuffer buffer = pool.Take(size);  ... fill *buffer with this replica's contribution ...
//   TESSERA_ASSIGN_OR_RETURN(RingAllReduce ring, RingAllReduce::Create(rank, n, buffer,
//   ReduceOp::kMean)); for (RingChunk& out : ring.Start()) send(next, std::move(out));
//   ... on each message `in` from rank - 1:
//   TESSERA_ASSIGN_OR_RETURN(std::optional<RingChunk> out, ring.Receive(std::move(in)));
//   if (out) send(next, std::move(*out));
//   if (ring.done()) ... buffer holds the result ...
class RingAllReduce {
 public:
  // Replica `rank` of `members`, reducing `buffer` in place (its messages share it), in chunks
  // of at most `chunk_elements` floats. The buffer's length must not change until the ring is
  // done. InvalidArgument unless 0 <= rank < members and 0 < members <= kMaxRingMembers and
  // chunk_elements >= 1, or for no buffer.
  static absl::StatusOr<RingAllReduce> Create(int32_t rank, int32_t members, RingBuffer buffer,
                                              ReduceOp op,
                                              int64_t chunk_elements = kDefaultRingChunkElements);

  // The first step of every chunk, to send to replica rank + 1. Call once, first. With one
  // member (or an empty buffer) nothing: the ring is done at once.
  std::vector<RingChunk> Start();

  // Takes in a message from replica rank - 1 and returns the chunk's next step to send, if any
  // (the segment it just reduced or copied, shared).
  // InvalidArgument (and nothing changes) for a chunk out of range, a step other than the one
  // the chunk expects next (messages of a chunk arrive in order), or a segment of the wrong
  // length — a peer whose buffer differs from this one's.
  absl::StatusOr<std::optional<RingChunk>> Receive(RingChunk in);

  // Every chunk has taken in its last step: the buffer holds the result.
  bool done() const { return chunks_done_ == static_cast<int64_t>(next_step_.size()); }
  int32_t rank() const { return rank_; }
  int32_t members() const { return members_; }
  int64_t num_chunks() const { return static_cast<int64_t>(next_step_.size()); }

 private:
  RingAllReduce(int32_t rank, int32_t members, RingBuffer buffer, ReduceOp op,
                int64_t chunk_elements);

  // The segment of chunk `c` this replica sends at step `step`, and the one it receives.
  RingSpan Sent(int64_t chunk, int32_t step) const;
  RingSpan Received(int64_t chunk, int32_t step) const;
  RingSpan Segment(int64_t chunk, int64_t index) const;
  RingChunk Message(int64_t chunk, int32_t step) const;

  int32_t rank_;
  int32_t members_;
  RingBuffer buffer_;
  int64_t length_;
  ReduceOp op_;
  int64_t chunk_elements_;
  std::vector<int32_t> next_step_;  // per chunk: the step it expects next
  int64_t chunks_done_ = 0;
};

// -- The driver's side of per-replica values --------------------------------------------------

// Combines one tensor per replica (TF's strategy.reduce): their sum or mean. InvalidArgument for
// no values or shapes that differ (naming both).
absl::StatusOr<Tensor> ReducePerReplica(ReduceOp op, absl::Span<const Tensor> values);
// The per-replica tensors concatenated along their first axis, in replica order (TF's
// strategy.gather(value, axis=0)). InvalidArgument for no values, a scalar, or trailing
// dimensions that differ.
absl::StatusOr<Tensor> GatherPerReplica(absl::Span<const Tensor> values);

}  // namespace tessera
