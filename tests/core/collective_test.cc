// The ring all-reduce as pure arithmetic: N members passing messages around (in any interleaving
// a transport could produce) all end with the same bits, the sum or mean of their buffers.
#include "core/collective.h"

#include <doctest/doctest.h>

#include <cstring>
#include <deque>
#include <random>
#include <vector>

namespace tessera {
namespace {

template <class T>
T ValueOrDie(absl::StatusOr<T> value) {
  REQUIRE_MESSAGE(value.ok(), value.status().ToString());
  return *std::move(value);
}

// Runs a ring of `members` over buffers of `length`, delivering the pending messages of random
// senders first (each sender's own messages stay in order, as a transport keeps them).
std::vector<std::vector<float>> RunRing(int32_t members, int64_t length, ReduceOp op, int64_t chunk,
                                        uint64_t seed) {
  std::vector<std::vector<float>> buffers(members, std::vector<float>(length));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1, 1);
  for (auto& buffer : buffers) {
    for (float& x : buffer) x = value(rng);
  }
  std::vector<RingAllReduce> rings;
  for (int32_t r = 0; r < members; ++r) {
    rings.push_back(
        ValueOrDie(RingAllReduce::Create(r, members, absl::MakeSpan(buffers[r]), op, chunk)));
  }
  // in_flight[r]: messages from r to r + 1, in order.
  std::vector<std::deque<RingChunk>> in_flight(members);
  for (int32_t r = 0; r < members; ++r) {
    for (RingChunk& message : rings[r].Start()) in_flight[r].push_back(std::move(message));
  }
  for (;;) {
    std::vector<int32_t> senders;
    for (int32_t r = 0; r < members; ++r) {
      if (!in_flight[r].empty()) senders.push_back(r);
    }
    if (senders.empty()) break;
    const int32_t from = senders[rng() % senders.size()];
    RingChunk message = std::move(in_flight[from].front());
    in_flight[from].pop_front();
    const int32_t to = (from + 1) % members;
    std::optional<RingChunk> next = ValueOrDie(rings[to].Receive(std::move(message)));
    if (next.has_value()) in_flight[to].push_back(std::move(*next));
  }
  for (const RingAllReduce& ring : rings) REQUIRE(ring.done());
  return buffers;
}

TEST_CASE("ring segments: consecutive, sizes differing by at most one, some empty") {
  const std::vector<RingSpan> segments = RingSegments(10, 20, 3);
  REQUIRE(segments.size() == 3);
  CHECK(segments[0].begin == 10);
  CHECK(segments[0].size() == 4);
  CHECK(segments[1].size() == 3);
  CHECK(segments[2].end == 20);
  const std::vector<RingSpan> short_range = RingSegments(0, 2, 4);
  CHECK(short_range[1].size() == 1);
  CHECK(short_range[3].size() == 0);
}

TEST_CASE("ring all-reduce: every member ends with the same bits, the sum or mean") {
  for (int32_t members : {1, 2, 3, 5}) {
    for (int64_t length : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}}) {
      for (int64_t chunk : {int64_t{1}, int64_t{3}, int64_t{64}, kDefaultRingChunkElements}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
          CAPTURE(members);
          CAPTURE(length);
          CAPTURE(chunk);
          std::mt19937_64 rng(7);
          std::uniform_real_distribution<float> value(-1, 1);
          std::vector<std::vector<float>> original(members, std::vector<float>(length));
          for (auto& buffer : original) {
            for (float& x : buffer) x = value(rng);
          }
          const std::vector<std::vector<float>> reduced = RunRing(members, length, op, chunk, 7);
          for (int32_t r = 1; r < members; ++r) {
            REQUIRE(std::memcmp(reduced[r].data(), reduced[0].data(),
                                sizeof(float) * static_cast<size_t>(length)) == 0);
          }
          for (int64_t i = 0; i < length; ++i) {
            double want = 0;
            for (int32_t r = 0; r < members; ++r) want += original[r][i];
            if (op == ReduceOp::kMean) want /= members;
            REQUIRE(std::abs(reduced[0][i] - want) < 1e-5);
          }
        }
      }
    }
  }
}

TEST_CASE("ring all-reduce: a message out of step or of the wrong length changes nothing") {
  std::vector<float> mine = {1, 2, 3, 4};
  RingAllReduce ring =
      ValueOrDie(RingAllReduce::Create(1, 2, absl::MakeSpan(mine), ReduceOp::kSum));
  REQUIRE(ring.Start().size() == 1);
  // Replica 1 of 2 first receives segment 0 (2 floats) at step 0.
  CHECK(absl::IsInvalidArgument(ring.Receive({0, 1, Tensor(Shape{2}, 1.0f)}).status()));
  CHECK(absl::IsInvalidArgument(ring.Receive({0, 0, Tensor(Shape{3}, 1.0f)}).status()));
  CHECK(absl::IsInvalidArgument(ring.Receive({1, 0, Tensor(Shape{2}, 1.0f)}).status()));
  CHECK(absl::IsInvalidArgument(ring.Receive({-1, 0, Tensor(Shape{2}, 1.0f)}).status()));
  CHECK(mine == std::vector<float>{1, 2, 3, 4});
  const std::optional<RingChunk> next = ValueOrDie(ring.Receive({0, 0, Tensor(Shape{2}, 1.0f)}));
  REQUIRE(next.has_value());
  CHECK(next->step == 1);
  CHECK(next->values.data()[0] == 2.0f);  // the segment it reduced: 1 + 1
  CHECK(!ring.done());
  CHECK(ValueOrDie(ring.Receive({0, 1, Tensor(Shape{2}, 9.0f)})) == std::nullopt);
  CHECK(ring.done());
  CHECK(mine == std::vector<float>{2, 3, 9, 9});
  // Nothing after the last step.
  CHECK(absl::IsInvalidArgument(ring.Receive({0, 2, Tensor(Shape{2}, 1.0f)}).status()));
}

TEST_CASE("ring all-reduce: a rank outside the ring or an empty chunk is refused") {
  std::vector<float> buffer(4);
  CHECK(absl::IsInvalidArgument(
      RingAllReduce::Create(2, 2, absl::MakeSpan(buffer), ReduceOp::kSum).status()));
  CHECK(absl::IsInvalidArgument(
      RingAllReduce::Create(0, 0, absl::MakeSpan(buffer), ReduceOp::kSum).status()));
  CHECK(absl::IsInvalidArgument(
      RingAllReduce::Create(0, 2, absl::MakeSpan(buffer), ReduceOp::kSum, 0).status()));
  CHECK(absl::IsInvalidArgument(
      RingAllReduce::Create(0, 2, absl::MakeSpan(buffer), static_cast<ReduceOp>(9)).status()));
}

TEST_CASE("per-replica values: reduce sums or averages, gather concatenates along axis 0") {
  const std::vector<Tensor> values = {Tensor(Shape{1, 2}, 1.0f), Tensor(Shape{2, 2}, 3.0f)};
  const Tensor gathered = ValueOrDie(GatherPerReplica(values));
  CHECK(gathered.shape() == Shape{3, 2});
  CHECK(gathered.data()[5] == 3.0f);
  CHECK(absl::IsInvalidArgument(ReducePerReplica(ReduceOp::kSum, values).status()));
  const std::vector<Tensor> same = {Tensor(Shape{2}, 1.0f), Tensor(Shape{2}, 4.0f)};
  CHECK(ValueOrDie(ReducePerReplica(ReduceOp::kSum, same)).data()[1] == 5.0f);
  CHECK(ValueOrDie(ReducePerReplica(ReduceOp::kMean, same)).data()[0] == 2.5f);
  CHECK(absl::IsInvalidArgument(GatherPerReplica({Tensor(Shape{}, 1.0f)}).status()));
  CHECK(absl::IsInvalidArgument(
      GatherPerReplica({Tensor(Shape{1, 2}, 1.0f), Tensor(Shape{1, 3}, 1.0f)}).status()));
  CHECK(absl::IsInvalidArgument(ReducePerReplica(ReduceOp::kSum, {}).status()));
  CHECK(ValueOrDie(ParseReduceOp("mean")) == ReduceOp::kMean);
  CHECK(absl::IsInvalidArgument(ParseReduceOp("max").status()));
}

}  // namespace
}  // namespace tessera
