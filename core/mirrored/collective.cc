#include "core/mirrored/collective.h"

#include <algorithm>
#include <iterator>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {

absl::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kMean:
      return "mean";
  }
  return "unknown";
}

absl::StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  if (name == "sum") return ReduceOp::kSum;
  if (name == "mean") return ReduceOp::kMean;
  return absl::InvalidArgumentError(absl::StrCat("unknown reduce op '", name, "' (sum or mean)"));
}

std::vector<RingSpan> RingSegments(int64_t begin, int64_t end, int32_t members) {
  std::vector<RingSpan> segments(members);
  const int64_t length = end - begin;
  const int64_t base = length / members;
  const int64_t longer = length % members;
  int64_t at = begin;
  for (int32_t i = 0; i < members; ++i) {
    const int64_t size = base + (i < longer ? 1 : 0);
    segments[i] = {at, at + size};
    at += size;
  }
  return segments;
}

RingValues RingValues::Own(Tensor values) {
  auto owned = std::make_shared<const Tensor>(std::move(values));
  RingValues out;
  out.data_ = owned->data();
  out.size_ = static_cast<size_t>(owned->size());
  out.owner_ = std::move(owned);
  return out;
}

RingValues RingValues::Share(RingBuffer buffer, RingSpan span) {
  RingValues out;
  out.shared_ = buffer->data() + span.begin;
  out.data_ = out.shared_;
  out.size_ = static_cast<size_t>(span.size());
  out.owner_ = std::move(buffer);
  return out;
}

namespace {

// True when no message shares `buffer` any more, and then every read its messages' readers made
// happens before what the caller does next. Only a reader's release lowers the count, and
// releasing is a release operation on it; copying the pointer is an acquire read-modify-write on
// the same count (libstdc++'s increment is acq_rel), which synchronizes with the last release.
bool Unshared(const RingBuffer& buffer) {
  if (buffer.use_count() != 1) return false;
  const RingBuffer acquire = buffer;
  return true;
}

}  // namespace

RingBuffer RingBufferPool::Take(size_t size, absl::Duration patience) {
  if (!spares_.empty() && spares_.back().use_count() != 1 && patience > absl::ZeroDuration()) {
    const absl::Time deadline = absl::Now() + patience;
    while (spares_.back().use_count() != 1 && absl::Now() < deadline) std::this_thread::yield();
  }
  // The most recently given first: its lines are the likeliest to still be in this core's caches.
  for (auto it = spares_.rbegin(); it != spares_.rend(); ++it) {
    if (!Unshared(*it)) continue;
    RingBuffer buffer = std::move(*it);
    spares_.erase(std::next(it).base());
    buffer->resize(size);
    return buffer;
  }
  return std::make_shared<std::vector<float>>(size);
}

void RingBufferPool::Give(RingBuffer buffer) {
  constexpr size_t kMaxSpares = 2;
  if (buffer == nullptr) return;
  if (spares_.size() == kMaxSpares) spares_.erase(spares_.begin());
  spares_.push_back(std::move(buffer));
}

absl::StatusOr<RingAllReduce> RingAllReduce::Create(int32_t rank, int32_t members,
                                                    RingBuffer buffer, ReduceOp op,
                                                    int64_t chunk_elements) {
  if (buffer == nullptr) return absl::InvalidArgumentError("ring all-reduce: no buffer");
  if (members < 1 || members > kMaxRingMembers || rank < 0 || rank >= members) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all-reduce: rank ", rank, " is not one of ", members, " members"));
  }
  if (chunk_elements < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all-reduce: chunks must hold >= 1 element, not ", chunk_elements));
  }
  if (op != ReduceOp::kSum && op != ReduceOp::kMean) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all-reduce: unknown reduce op ", static_cast<int32_t>(op)));
  }
  return RingAllReduce(rank, members, std::move(buffer), op, chunk_elements);
}

RingAllReduce::RingAllReduce(int32_t rank, int32_t members, RingBuffer buffer, ReduceOp op,
                             int64_t chunk_elements)
    : rank_(rank),
      members_(members),
      buffer_(std::move(buffer)),
      length_(static_cast<int64_t>(buffer_->size())),
      op_(op),
      chunk_elements_(chunk_elements) {
  const int64_t chunks = members == 1 ? 0 : (length_ + chunk_elements - 1) / chunk_elements;
  next_step_.assign(chunks, 0);
}

RingSpan RingAllReduce::Segment(int64_t chunk, int64_t index) const {
  const int64_t begin = chunk * chunk_elements_;
  const int64_t end = std::min<int64_t>(begin + chunk_elements_, length_);
  const int64_t i = ((index % members_) + members_) % members_;
  // RingSegments(begin, end, members_)[i], without building the others.
  const int64_t base = (end - begin) / members_;
  const int64_t longer = (end - begin) % members_;
  const int64_t first = begin + i * base + std::min(i, longer);
  return {first, first + base + (i < longer ? 1 : 0)};
}

RingSpan RingAllReduce::Sent(int64_t chunk, int32_t step) const {
  const int32_t n = members_;
  return step < n - 1 ? Segment(chunk, rank_ - step) : Segment(chunk, rank_ + 1 - (step - n + 1));
}

RingSpan RingAllReduce::Received(int64_t chunk, int32_t step) const {
  const int32_t n = members_;
  return step < n - 1 ? Segment(chunk, rank_ - step - 1) : Segment(chunk, rank_ - (step - n + 1));
}

RingChunk RingAllReduce::Message(int64_t chunk, int32_t step) const {
  return {chunk, step, RingValues::Share(buffer_, Sent(chunk, step))};
}

std::vector<RingChunk> RingAllReduce::Start() {
  std::vector<RingChunk> out;
  out.reserve(next_step_.size());
  for (int64_t c = 0; c < num_chunks(); ++c) out.push_back(Message(c, 0));
  return out;
}

absl::StatusOr<std::optional<RingChunk>> RingAllReduce::Receive(RingChunk in) {
  if (in.chunk < 0 || in.chunk >= num_chunks()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all-reduce: chunk ", in.chunk, " is not one of ", num_chunks()));
  }
  const int32_t expected = next_step_[in.chunk];
  const int32_t last = 2 * (members_ - 1) - 1;
  if (in.step != expected || expected > last) {
    return absl::InvalidArgumentError(absl::StrCat("ring all-reduce: chunk ", in.chunk,
                                                   " expects step ", expected, ", not ", in.step));
  }
  const RingSpan span = Received(in.chunk, in.step);
  if (in.values.size() != span.size() || static_cast<int64_t>(buffer_->size()) != length_) {
    return absl::InvalidArgumentError(absl::StrCat("ring all-reduce: step ", in.step, " of chunk ",
                                                   in.chunk, " carries ", in.values.size(),
                                                   " values where this replica's segment has ",
                                                   span.size(), " (the replicas' buffers differ)"));
  }
  // What this replica sends at step k + 1 is the segment it takes in at step k, shared in place
  // (Note [Ring segments read in place]): one pass over the segment, no allocation.
  float* segment = buffer_->data() + span.begin;
  const float* values = in.values.span().data();
  const int64_t size = span.size();
  // Note [Ring of two in one process]: the sum goes into the sender's buffer too.
  float* sender = members_ == 2 && in.step == 0 ? in.values.shared_segment() : nullptr;
  if (sender != nullptr) {
    if (op_ == ReduceOp::kMean) {
      for (int64_t i = 0; i < size; ++i) segment[i] = sender[i] = (segment[i] + values[i]) * 0.5f;
    } else {
      for (int64_t i = 0; i < size; ++i) segment[i] = sender[i] = segment[i] + values[i];
    }
  } else if (in.step < members_ - 1) {
    if (in.step == members_ - 2 && op_ == ReduceOp::kMean) {
      const float scale = 1.0f / static_cast<float>(members_);
      for (int64_t i = 0; i < size; ++i) segment[i] = (segment[i] + values[i]) * scale;
    } else {
      for (int64_t i = 0; i < size; ++i) segment[i] += values[i];
    }
  } else if (!in.in_place) {
    std::copy(values, values + size, segment);
  }
  next_step_[in.chunk] = in.step + 1;
  if (sender != nullptr) {
    // The all-gather's message goes back to the sender, whose segment now holds the result: it
    // shares that segment, not this replica's, so once the sender has taken it nothing of the
    // neighbour holds this replica's buffer (the next collective need not wait for it). Carried
    // across processes it would carry the result itself.
    return std::optional<RingChunk>(RingChunk{in.chunk, in.step + 1, std::move(in.values), true});
  }
  in.values = RingValues();  // the sender's buffer is not needed any more
  if (in.step == last) {
    ++chunks_done_;
    return std::optional<RingChunk>();
  }
  return std::optional<RingChunk>(Message(in.chunk, in.step + 1));
}

absl::StatusOr<Tensor> ReducePerReplica(ReduceOp op, absl::Span<const Tensor> values) {
  if (values.empty()) return absl::InvalidArgumentError("reduce: no per-replica values");
  Tensor out = Tensor::Copy(values[0].view());
  for (size_t r = 1; r < values.size(); ++r) {
    if (values[r].shape() != out.shape()) {
      return absl::InvalidArgumentError(absl::StrCat("reduce: replica ", r, "'s value has shape ",
                                                     values[r].shape().ToString(), ", replica 0's ",
                                                     out.shape().ToString()));
    }
    const float* in = values[r].data();
    float* acc = out.data();
    for (int64_t i = 0; i < out.size(); ++i) acc[i] += in[i];
  }
  if (op == ReduceOp::kMean) {
    const float scale = 1.0f / static_cast<float>(values.size());
    for (int64_t i = 0; i < out.size(); ++i) out.data()[i] *= scale;
  } else if (op != ReduceOp::kSum) {
    return absl::InvalidArgumentError(
        absl::StrCat("reduce: unknown reduce op ", static_cast<int32_t>(op)));
  }
  return out;
}

absl::StatusOr<Tensor> GatherPerReplica(absl::Span<const Tensor> values) {
  if (values.empty()) return absl::InvalidArgumentError("gather: no per-replica values");
  const Shape& first = values[0].shape();
  if (first.rank() == 0) {
    return absl::InvalidArgumentError("gather: a scalar has no first axis to gather along");
  }
  std::vector<int64_t> trailing(first.dims().begin() + 1, first.dims().end());
  int64_t rows = 0;
  for (size_t r = 0; r < values.size(); ++r) {
    const Shape& shape = values[r].shape();
    if (shape.rank() != first.rank() ||
        !std::equal(trailing.begin(), trailing.end(), shape.dims().begin() + 1)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gather: replica ", r, "'s value has shape ", shape.ToString(),
                       ", replica 0's ", first.ToString(), " (only the first axis may differ)"));
    }
    rows += shape.dims()[0];
  }
  std::vector<int64_t> dims = first.dims();
  dims[0] = rows;
  Tensor out{Shape(std::move(dims))};
  float* at = out.data();
  for (const Tensor& value : values) at = std::copy(value.data(), value.data() + value.size(), at);
  return out;
}

}  // namespace tessera
