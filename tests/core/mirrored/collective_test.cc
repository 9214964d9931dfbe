// The ring all-reduce as pure arithmetic: N members passing messages around (in any interleaving
// a transport could produce) all end with the same bits, the sum or mean of their buffers.
#include "core/mirrored/collective.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "tests/status_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

RingValues Values(std::vector<float> values) {
  const int64_t size = static_cast<int64_t>(values.size());
  return RingValues::Own(ValueOrDie(Tensor::FromVector(Shape{size}, std::move(values))));
}

// A message in flight, and what its values were when it was sent.
struct InFlight {
  RingChunk message;
  std::vector<float> sent;
};

InFlight Send(RingChunk message) {
  absl::Span<const float> values = message.values.span();
  return {std::move(message), std::vector<float>(values.begin(), values.end())};
}

// Runs a ring of `members` over buffers of `length`, delivering the pending messages of random
// senders first (each sender's own messages stay in order, as a transport keeps them). Messages
// share their senders' buffers (Note [Ring segments read in place]): each one must still carry,
// when it is read, the values it was sent with, whatever the interleaving.
std::vector<std::vector<float>> RunRing(int32_t members, int64_t length, ReduceOp op, int64_t chunk,
                                        uint64_t seed) {
  std::vector<RingBuffer> buffers;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1, 1);
  for (int32_t r = 0; r < members; ++r) {
    buffers.push_back(std::make_shared<std::vector<float>>(length));
    for (float& x : *buffers.back()) x = value(rng);
  }
  std::vector<RingAllReduce> rings;
  for (int32_t r = 0; r < members; ++r) {
    rings.push_back(ValueOrDie(RingAllReduce::Create(r, members, buffers[r], op, chunk)));
  }
  // in_flight[r]: messages from r to r + 1, in order.
  std::vector<std::deque<InFlight>> in_flight(members);
  for (int32_t r = 0; r < members; ++r) {
    for (RingChunk& message : rings[r].Start()) in_flight[r].push_back(Send(std::move(message)));
  }
  for (;;) {
    std::vector<int32_t> senders;
    for (int32_t r = 0; r < members; ++r) {
      if (!in_flight[r].empty()) senders.push_back(r);
    }
    if (senders.empty()) break;
    const int32_t from = senders[rng() % senders.size()];
    InFlight delivered = std::move(in_flight[from].front());
    in_flight[from].pop_front();
    const absl::Span<const float> values = delivered.message.values.span();
    REQUIRE(std::equal(values.begin(), values.end(), delivered.sent.begin(), delivered.sent.end()));
    const int32_t to = (from + 1) % members;
    std::optional<RingChunk> next = ValueOrDie(rings[to].Receive(std::move(delivered.message)));
    if (next.has_value()) in_flight[to].push_back(Send(std::move(*next)));
  }
  for (const RingAllReduce& ring : rings) REQUIRE(ring.done());
  std::vector<std::vector<float>> out;
  for (const RingBuffer& buffer : buffers) out.push_back(*buffer);
  return out;
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
          for (int32_t r = 1; r < members && length > 0; ++r) {  // memcmp of no bytes: null
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
  auto mine = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4});
  RingAllReduce ring = ValueOrDie(RingAllReduce::Create(1, 2, mine, ReduceOp::kSum));
  const std::vector<RingChunk> first = ring.Start();
  REQUIRE(first.size() == 1);
  // Replica 1 of 2 sends segment 1, in place, and first receives segment 0 (2 floats) at step 0.
  CHECK(first[0].values.span().data() == mine->data() + 2);
  CHECK(absl::IsInvalidArgument(ring.Receive({0, 1, Values({1, 1})}).status()));
  CHECK(absl::IsInvalidArgument(ring.Receive({0, 0, Values({1, 1, 1})}).status()));
  CHECK(absl::IsInvalidArgument(ring.Receive({1, 0, Values({1, 1})}).status()));
  CHECK(absl::IsInvalidArgument(ring.Receive({-1, 0, Values({1, 1})}).status()));
  CHECK(*mine == std::vector<float>{1, 2, 3, 4});
  const std::optional<RingChunk> next = ValueOrDie(ring.Receive({0, 0, Values({1, 1})}));
  REQUIRE(next.has_value());
  CHECK(next->step == 1);
  CHECK(next->values.span().data() == mine->data());  // the segment it reduced, shared: 1 + 1
  CHECK(next->values.span()[0] == 2.0f);
  CHECK(!next->in_place);  // what arrived was the message's own: nothing was written back
  CHECK(!ring.done());
  CHECK(ValueOrDie(ring.Receive({0, 1, Values({9, 9})})) == std::nullopt);
  CHECK(ring.done());
  CHECK(*mine == std::vector<float>{2, 3, 9, 9});
  // Nothing after the last step.
  CHECK(absl::IsInvalidArgument(ring.Receive({0, 2, Values({1, 1})}).status()));
}

TEST_CASE("ring all-reduce of two in one process: one pass writes the result into both buffers") {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) {
    CAPTURE(ReduceOpName(op));
    auto a = std::make_shared<std::vector<float>>(std::vector<float>{1, 2, 3, 4, 5});
    auto b = std::make_shared<std::vector<float>>(std::vector<float>{10, 20, 30, 40, 50});
    RingAllReduce first = ValueOrDie(RingAllReduce::Create(0, 2, a, op));
    RingAllReduce second = ValueOrDie(RingAllReduce::Create(1, 2, b, op));
    std::vector<RingChunk> from_first = first.Start(), from_second = second.Start();
    REQUIRE(from_first.size() == 1);
    REQUIRE(from_second.size() == 1);
    CHECK(from_second[0].values.shared_segment() == b->data() + 3);
    const float half = op == ReduceOp::kMean ? 0.5f : 1.0f;
    // Replica 0 reduces segment 1 ([3, 5)) into its buffer and, in the same pass, replica 1's.
    std::optional<RingChunk> to_second = ValueOrDie(first.Receive(std::move(from_second[0])));
    REQUIRE(to_second.has_value());
    CHECK(to_second->in_place);
    // It shares replica 1's own segment, the result: nothing of it holds replica 0's buffer.
    CHECK(to_second->values.shared_segment() == b->data() + 3);
    CHECK(std::vector<float>(b->begin() + 3, b->end()) == std::vector<float>{44 * half, 55 * half});
    std::optional<RingChunk> to_first = ValueOrDie(second.Receive(std::move(from_first[0])));
    REQUIRE(to_first.has_value());
    CHECK(to_first->in_place);
    CHECK(to_first->values.shared_segment() == a->data());
    CHECK(a.use_count() == 3);  // this test's, replica 0's ring's and the message back to it
    // The all-gather's messages only count: both buffers already hold the result.
    CHECK(ValueOrDie(first.Receive(std::move(*to_first))) == std::nullopt);
    CHECK(ValueOrDie(second.Receive(std::move(*to_second))) == std::nullopt);
    CHECK(first.done());
    CHECK(second.done());
    const std::vector<float> want{11 * half, 22 * half, 33 * half, 44 * half, 55 * half};
    CHECK(*a == want);
    CHECK(*b == want);
  }
}

TEST_CASE("ring all-reduce: a rank outside the ring, an empty chunk or no buffer is refused") {
  auto buffer = std::make_shared<std::vector<float>>(4);
  CHECK(absl::IsInvalidArgument(RingAllReduce::Create(2, 2, buffer, ReduceOp::kSum).status()));
  CHECK(absl::IsInvalidArgument(RingAllReduce::Create(0, 0, buffer, ReduceOp::kSum).status()));
  CHECK(absl::IsInvalidArgument(RingAllReduce::Create(0, 2, buffer, ReduceOp::kSum, 0).status()));
  CHECK(absl::IsInvalidArgument(
      RingAllReduce::Create(0, 2, buffer, static_cast<ReduceOp>(9)).status()));
  CHECK(absl::IsInvalidArgument(RingAllReduce::Create(0, 2, nullptr, ReduceOp::kSum).status()));
}

TEST_CASE("ring buffer pool: a buffer a message still shares is not handed out again") {
  RingBufferPool pool;
  RingBuffer first = pool.Take(4);
  CHECK(first->size() == 4);
  const std::vector<float>* first_vector = first.get();
  RingValues shared = RingValues::Share(first, {0, 2});
  pool.Give(std::move(first));
  // The message still reads the first buffer: the pool makes another.
  RingBuffer second = pool.Take(4);
  const std::vector<float>* second_vector = second.get();
  CHECK(second_vector != first_vector);
  pool.Give(std::move(second));
  shared = RingValues();  // read: both spares are free again
  RingBuffer again = pool.Take(8);
  CHECK(again->size() == 8);
  RingBuffer other = pool.Take(8);
  CHECK(((again.get() == first_vector && other.get() == second_vector) ||
         (again.get() == second_vector && other.get() == first_vector)));
  // At most two spares are kept. (A spare is told apart by its capacity: a new buffer has 8.)
  again.reset();
  other.reset();
  for (size_t capacity : {100, 200, 300}) {
    auto spare = std::make_shared<std::vector<float>>();
    spare->reserve(capacity);
    pool.Give(std::move(spare));
  }
  std::vector<RingBuffer> taken;
  int reused = 0;
  for (int i = 0; i < 3; ++i) {
    taken.push_back(pool.Take(8));
    reused += taken.back()->capacity() >= 100 ? 1 : 0;
  }
  CHECK(reused == 2);
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

namespace tessera {
namespace {

// A replica's mailbox: what a transport does between two replica threads.
class Mailbox {
 public:
  void Put(RingChunk chunk) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(chunk));
    }
    ready_.notify_one();
  }
  RingChunk Get() {
    std::unique_lock<std::mutex> lock(mu_);
    ready_.wait(lock, [this] { return !queue_.empty(); });
    RingChunk chunk = std::move(queue_.front());
    queue_.pop_front();
    return chunk;
  }

 private:
  std::mutex mu_;
  std::condition_variable ready_;
  std::deque<RingChunk> queue_;
};

// Replicas on threads of their own, reading each other's segments in place, all-reduce back to
// back and overwrite their buffer before each collective (as a step writes its gradients): no
// write may reach a segment a neighbour has yet to read (Note [Ring segments read in place]).
// Under ThreadSanitizer this is the race check; here, every result must be exact.
TEST_CASE("ring all-reduce on threads: back-to-back collectives reuse buffers without a race") {
  for (int32_t members : {2, 3}) {
    CAPTURE(members);
    constexpr int kCollectives = 200;
    constexpr size_t kLength = 1000;
    std::vector<Mailbox> mailboxes(members);
    std::vector<int> wrong(members, 0);
    std::vector<std::thread> replicas;
    for (int32_t r = 0; r < members; ++r) {
      replicas.emplace_back([&, r] {
        RingBufferPool pool;
        Mailbox& next = mailboxes[(r + 1) % members];
        for (int k = 0; k < kCollectives; ++k) {
          RingBuffer buffer =
              pool.Take(kLength, k % 2 == 0 ? absl::Microseconds(50) : absl::ZeroDuration());
          std::fill(buffer->begin(), buffer->end(), static_cast<float>(r + k));
          {  // the ring's share of the buffer ends with this scope
            absl::StatusOr<RingAllReduce> ring =
                RingAllReduce::Create(r, members, buffer, ReduceOp::kSum, 64);
            if (!ring.ok()) std::abort();
            for (RingChunk& chunk : ring->Start()) next.Put(std::move(chunk));
            while (!ring->done()) {
              absl::StatusOr<std::optional<RingChunk>> out = ring->Receive(mailboxes[r].Get());
              if (!out.ok()) std::abort();
              if (out->has_value()) next.Put(std::move(**out));
            }
          }
          float want = 0;
          for (int32_t q = 0; q < members; ++q) want += static_cast<float>(q + k);
          wrong[r] += static_cast<int>(
              std::count_if(buffer->begin(), buffer->end(), [&](float x) { return x != want; }));
          pool.Give(std::move(buffer));
        }
      });
    }
    for (std::thread& replica : replicas) replica.join();
    for (int32_t r = 0; r < members; ++r) CHECK(wrong[r] == 0);
  }
}

}  // namespace
}  // namespace tessera
