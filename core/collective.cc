#include "core/collective.h"

#include <algorithm>
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

absl::StatusOr<RingAllReduce> RingAllReduce::Create(int32_t rank, int32_t members,
                                                    absl::Span<float> data, ReduceOp op,
                                                    int64_t chunk_elements) {
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
  return RingAllReduce(rank, members, data, op, chunk_elements);
}

RingAllReduce::RingAllReduce(int32_t rank, int32_t members, absl::Span<float> data, ReduceOp op,
                             int64_t chunk_elements)
    : rank_(rank), members_(members), data_(data), op_(op), chunk_elements_(chunk_elements) {
  const int64_t length = static_cast<int64_t>(data.size());
  const int64_t chunks = members == 1 ? 0 : (length + chunk_elements - 1) / chunk_elements;
  next_step_.assign(chunks, 0);
}

RingSpan RingAllReduce::Segment(int64_t chunk, int64_t index) const {
  const int64_t begin = chunk * chunk_elements_;
  const int64_t end = std::min<int64_t>(begin + chunk_elements_, data_.size());
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
  const RingSpan span = Sent(chunk, step);
  return {chunk, step,
          Tensor::Copy(ConstTensorView(data_.data() + span.begin, Shape{span.size()}))};
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
  if (in.values.shape().rank() != 1 || in.values.size() != span.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ring all-reduce: step ", in.step, " of chunk ", in.chunk, " carries ",
                     in.values.shape().ToString(), " values where this replica's segment has ",
                     span.size(), " (the replicas' buffers differ)"));
  }
  // What this replica sends at step k + 1 is the segment it takes in at step k: the incoming
  // message becomes the outgoing one, its buffer reused (one pass over the segment, no
  // allocation).
  float* segment = data_.data() + span.begin;
  float* values = in.values.data();
  const int64_t size = span.size();
  if (in.step < members_ - 1) {
    if (in.step == members_ - 2 && op_ == ReduceOp::kMean) {
      const float scale = 1.0f / static_cast<float>(members_);
      for (int64_t i = 0; i < size; ++i) segment[i] = values[i] = (segment[i] + values[i]) * scale;
    } else {
      for (int64_t i = 0; i < size; ++i) segment[i] = values[i] = segment[i] + values[i];
    }
  } else {
    std::copy(values, values + size, segment);
  }
  next_step_[in.chunk] = in.step + 1;
  if (in.step == last) {
    ++chunks_done_;
    return std::optional<RingChunk>();
  }
  ++in.step;
  return std::optional<RingChunk>(std::move(in));
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
