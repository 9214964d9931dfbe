#include "tessera/data.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <map>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/status_util.h"

namespace tessera {
namespace {

using testing::ValueOrDie;

// A source that draws nothing from memory: example r has id feature "id" = r and label r % 2, and
// every read is counted; rows listed in `bad_rows` fail to read (a file that went bad).
class PositionSource : public ExampleSource {
 public:
  PositionSource(int64_t n, std::set<int64_t> bad_rows = {}) : n_(n), bad_(std::move(bad_rows)) {
    schema_.id_features = {"id"};
  }
  int64_t size() const override { return n_; }
  const ExampleSchema& schema() const override { return schema_; }
  absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const override {
    Batch batch;
    batch.size = static_cast<int64_t>(rows.size());
    std::vector<float> labels;
    for (const int64_t r : rows) {
      if (bad_.count(r) > 0) return absl::DataLossError(absl::StrCat("row ", r, " is corrupt"));
      batch.ids["id"].push_back(r);
      labels.push_back(static_cast<float>(r % 2));
    }
    rows_read_ += static_cast<int64_t>(rows.size());
    batch.labels = *Tensor::FromVector(Shape{batch.size, 1}, std::move(labels));
    return batch;
  }
  int64_t rows_read() const { return rows_read_; }

 private:
  int64_t n_;
  std::set<int64_t> bad_;
  ExampleSchema schema_;
  mutable std::atomic<int64_t> rows_read_{0};
};

// n examples: id feature "id" = i, dense "x" = [i, -i], label i % 2. Every row's contents name
// the row, so a test can check that a batch's columns stay aligned.
Dataset Numbered(int64_t n) {
  Batch b;
  b.size = n;
  Ids ids(n);
  std::vector<float> x, labels;
  for (int64_t i = 0; i < n; ++i) {
    ids[i] = i;
    x.push_back(static_cast<float>(i));
    x.push_back(-static_cast<float>(i));
    labels.push_back(static_cast<float>(i % 2));
  }
  b.ids["id"] = std::move(ids);
  b.dense["x"] = *Tensor::FromVector(Shape{n, 2}, std::move(x));
  b.labels = *Tensor::FromVector(Shape{n, 1}, std::move(labels));
  absl::StatusOr<Dataset> d = Dataset::Create(std::move(b));
  REQUIRE(d.ok());
  return *std::move(d);
}

// Checks the batch's columns describe the same examples and returns their ids.
Ids AlignedIds(const Batch& batch) {
  const Ids& ids = batch.ids.at("id");
  const Tensor& x = batch.dense.at("x");
  REQUIRE(static_cast<int64_t>(ids.size()) == batch.size);
  REQUIRE(x.shape() == (Shape{batch.size, 2}));
  REQUIRE(batch.labels.shape() == (Shape{batch.size, 1}));
  for (int64_t k = 0; k < batch.size; ++k) {
    CHECK(x.row(k)[0] == static_cast<float>(ids[k]));
    CHECK(x.row(k)[1] == -static_cast<float>(ids[k]));
    CHECK(batch.labels.row(k)[0] == static_cast<float>(ids[k] % 2));
  }
  return ids;
}

BatchIterator MakeIterator(const Dataset& d, BatchOptions options) {
  absl::StatusOr<BatchIterator> it = BatchIterator::Create(d, options);
  REQUIRE(it.ok());
  return *std::move(it);
}

// Every batch's ids and sizes, until the iterator ends (at most `limit` batches).
std::vector<Ids> Drain(BatchIterator& it, int limit = 10000) {
  std::vector<Ids> batches;
  while (static_cast<int>(batches.size()) < limit) {
    std::optional<Batch> batch = ValueOrDie(it.Next());
    if (!batch) break;
    batches.push_back(AlignedIds(*batch));
  }
  return batches;
}

Ids Flatten(const std::vector<Ids>& batches, size_t begin = 0, size_t end = SIZE_MAX) {
  Ids all;
  for (size_t i = begin; i < std::min(end, batches.size()); ++i) {
    all.insert(all.end(), batches[i].begin(), batches[i].end());
  }
  return all;
}

Ids Iota(int64_t n) {
  Ids ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = i;
  return ids;
}

TEST_CASE("a dataset rejects columns that disagree on the number of examples") {
  struct Case {
    const char* name;
    Batch batch;
  };
  auto base = [] {
    Batch b;
    b.size = 3;
    b.ids["user"] = {1, 2, 3};
    b.dense["x"] = Tensor(Shape{3, 4});
    b.labels = Tensor(Shape{3, 1});
    return b;
  };
  std::vector<Case> cases;
  cases.push_back({"an id feature too short", base()});
  cases.back().batch.ids["user"].pop_back();
  cases.push_back({"a dense feature with other rows", base()});
  cases.back().batch.dense["x"] = Tensor(Shape{2, 4});
  cases.push_back({"a scalar dense feature", base()});
  cases.back().batch.dense["x"] = Tensor(Shape{});
  cases.push_back({"labels of the wrong shape", base()});
  cases.back().batch.labels = Tensor(Shape{3});
  cases.push_back({"a name both id and dense", base()});
  cases.back().batch.dense["user"] = Tensor(Shape{3, 1});
  cases.push_back({"a negative size", base()});
  cases.back().batch.size = -1;
  for (Case& c : cases) {
    CAPTURE(c.name);
    CHECK(Dataset::Create(std::move(c.batch)).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<Dataset> ok = Dataset::Create(base());
  REQUIRE(ok.ok());
  CHECK(ok->size() == 3);
  CHECK(ok->IdFeatureNames() == std::vector<std::string>{"user"});
  CHECK(ok->DenseFeatureNames() == std::vector<std::string>{"x"});
  CHECK(ok->DenseFeatureShapes().at("x") == (Shape{3, 4}));
}

TEST_CASE("an epoch in order covers every example once, the last batch partial") {
  const Dataset d = Numbered(10);
  BatchOptions options;
  options.batch_size = 3;
  BatchIterator it = MakeIterator(d, options);
  CHECK(it.batches_per_epoch() == 4);
  const std::vector<Ids> batches = Drain(it);
  REQUIRE(batches.size() == 4);
  CHECK(batches[3].size() == 1);
  CHECK(Flatten(batches) == Iota(10));
  CHECK(it.epoch() == 1);
  CHECK(it.batches_returned() == 4);
  CHECK_FALSE(ValueOrDie(it.Next()).has_value());
}

TEST_CASE("drop_remainder drops each epoch's short last batch") {
  const Dataset d = Numbered(10);
  for (bool shuffle : {false, true}) {
    CAPTURE(shuffle);
    BatchOptions options;
    options.batch_size = 3;
    options.drop_remainder = true;
    options.shuffle = shuffle;
    options.num_epochs = 2;
    BatchIterator it = MakeIterator(d, options);
    CHECK(it.batches_per_epoch() == 3);
    const std::vector<Ids> batches = Drain(it);
    REQUIRE(batches.size() == 6);
    for (const Ids& b : batches) CHECK(b.size() == 3);
    for (size_t epoch = 0; epoch < 2; ++epoch) {
      const Ids seen = Flatten(batches, 3 * epoch, 3 * epoch + 3);
      CHECK(std::set<int64_t>(seen.begin(), seen.end()).size() == 9);
    }
  }
}

TEST_CASE("shuffled epochs are fresh permutations, fixed by the seed") {
  const Dataset d = Numbered(50);
  BatchOptions options;
  options.batch_size = 7;
  options.shuffle = true;
  options.seed = 42;
  options.num_epochs = 3;
  BatchIterator it = MakeIterator(d, options);
  const std::vector<Ids> batches = Drain(it);
  REQUIRE(batches.size() == 3 * 8);
  std::vector<Ids> epochs;
  for (size_t e = 0; e < 3; ++e) {
    epochs.push_back(Flatten(batches, 8 * e, 8 * e + 8));
    Ids sorted = epochs.back();
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == Iota(50));
    CHECK(epochs.back() != Iota(50));
  }
  CHECK(epochs[0] != epochs[1]);
  CHECK(epochs[1] != epochs[2]);

  BatchIterator again = MakeIterator(d, options);
  CHECK(Flatten(Drain(again)) == Flatten(batches));
  options.seed = 43;
  BatchIterator other_seed = MakeIterator(d, options);
  CHECK(Flatten(Drain(other_seed)) != Flatten(batches));
}

TEST_CASE("a batch stream addresses the shuffled epochs by batch index, any order, any reader") {
  const Dataset d = Numbered(50);
  BatchOptions options;
  options.batch_size = 7;
  options.shuffle = true;
  options.seed = 9;
  options.num_epochs = 3;  // 8 batches per epoch, the last of 1 example
  BatchIterator it = MakeIterator(d, options);
  const std::vector<Ids> expected = Drain(it);
  REQUIRE(expected.size() == 24);
  auto stream = BatchStream::Create(d, 7, /*shuffle=*/true, 9);
  REQUIRE(stream.ok());
  CHECK(stream->batches_per_epoch() == 8);
  // Backwards, so every batch switches epochs against the cached permutation.
  for (int64_t i = 23; i >= 0; --i) {
    CAPTURE(i);
    absl::StatusOr<Batch> batch = stream->Get(i);
    REQUIRE(batch.ok());
    CHECK(AlignedIds(*batch) == expected[i]);
  }
  // A second reader gives the same batches (what a re-run closure on another worker reads).
  auto other = BatchStream::Create(d, 7, true, 9);
  REQUIRE(other.ok());
  CHECK(AlignedIds(*other->Get(13)) == expected[13]);
  auto in_order = BatchStream::Create(d, 7, /*shuffle=*/false, 0);
  REQUIRE(in_order.ok());
  CHECK(AlignedIds(*in_order->Get(9)) == Ids{7, 8, 9, 10, 11, 12, 13});
  CHECK(stream->Get(-1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(BatchStream::Create(d, 0, true, 1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(BatchStream::Create(Dataset(), 4, true, 1).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("id-list features are validated, gathered row by row and carried through batches") {
  auto base = [] {
    Batch b;
    b.size = 3;
    b.ids["user"] = {10, 11, 12};
    b.id_lists["history"] = IdList{{0, 2, 2, 5}, {1, 2, 3, 4, 5}, {}};
    b.id_lists["tags"] = IdList{{0, 1, 2, 3}, {7, 8, 9}, {0.5f, 1.5f, 2.5f}};
    b.labels = Tensor(Shape{3, 1});
    return b;
  };
  struct Case {
    const char* name;
    Batch batch;
  };
  std::vector<Case> cases;
  cases.push_back({"row_splits too short", base()});
  cases.back().batch.id_lists["history"].row_splits = {0, 2, 5};
  cases.push_back({"row_splits not from 0", base()});
  cases.back().batch.id_lists["history"].row_splits = {1, 2, 2, 5};
  cases.push_back({"row_splits decreasing", base()});
  cases.back().batch.id_lists["history"].row_splits = {0, 3, 2, 5};
  cases.push_back({"row_splits not ending at the ids", base()});
  cases.back().batch.id_lists["history"].row_splits = {0, 2, 2, 4};
  cases.push_back({"weights not one per id", base()});
  cases.back().batch.id_lists["tags"].weights.pop_back();
  cases.push_back({"a name both id and id-list", base()});
  cases.back().batch.id_lists["user"] = IdList{{0, 0, 0, 0}, {}, {}};
  for (Case& c : cases) {
    CAPTURE(c.name);
    const absl::Status status = Dataset::Create(std::move(c.batch)).status();
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(status.message().find("'") != absl::string_view::npos);  // names the feature
  }

  const Dataset d = ValueOrDie(Dataset::Create(base()));
  CHECK(d.IdListFeatureNames() == std::vector<std::string>{"history", "tags"});
  const Batch gathered = ValueOrDie(d.Gather(std::vector<int64_t>{2, 0, 1, 2}));
  const IdList& history = gathered.id_lists.at("history");
  CHECK(history.row_splits == std::vector<int64_t>{0, 3, 5, 5, 8});
  CHECK(history.ids == Ids{3, 4, 5, 1, 2, 3, 4, 5});
  CHECK(history.weights.empty());
  const IdList& tags = gathered.id_lists.at("tags");
  CHECK(tags.row_splits == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(tags.ids == Ids{9, 7, 8, 9});
  CHECK(tags.weights == std::vector<float>{2.5f, 0.5f, 1.5f, 2.5f});

  BatchStream stream = ValueOrDie(BatchStream::Create(*d.Shard(2, 0), 1, false, 0));  // 0, 2
  const Batch second = ValueOrDie(stream.Get(1));
  CHECK(second.id_lists.at("history").ids == Ids{3, 4, 5});
  CHECK(second.ids.at("user") == Ids{12});
}

// A source of n rows like PositionSource that says reading contiguous rows is cheap, and records
// every read's rows.
class SequentialPositions : public PositionSource {
 public:
  explicit SequentialPositions(int64_t n) : PositionSource(n) {}
  bool sequential() const override { return true; }
};

TEST_CASE("a shuffled stream over a sequential source shuffles whole contiguous batches") {
  auto source = std::make_shared<SequentialPositions>(50);
  const Dataset data = ValueOrDie(Dataset::FromSource(source));
  BatchStream stream = ValueOrDie(BatchStream::Create(data, 7, /*shuffle=*/true, /*seed=*/5));
  CHECK(stream.shuffles_batches());
  REQUIRE(stream.batches_per_epoch() == 8);
  std::vector<Ids> epochs(3);
  std::vector<std::vector<int64_t>> firsts(3);
  for (int64_t i = 0; i < 24; ++i) {
    const Ids ids = ValueOrDie(stream.Get(i)).ids.at("id");
    REQUIRE(!ids.empty());
    // One contiguous run of rows, starting at a multiple of the batch size.
    CHECK(ids.front() % 7 == 0);
    for (size_t k = 1; k < ids.size(); ++k) CHECK(ids[k] == ids[k - 1] + 1);
    CHECK(ids.size() == (ids.front() == 49 ? 1u : 7u));
    epochs[i / 8].insert(epochs[i / 8].end(), ids.begin(), ids.end());
    firsts[i / 8].push_back(ids.front() / 7);
  }
  for (int e = 0; e < 3; ++e) {
    CAPTURE(e);
    CHECK(firsts[e] == RandomPermutation(8, 5, e));  // the order is the (seed, epoch) permutation
    Ids sorted = epochs[e];
    std::sort(sorted.begin(), sorted.end());
    CHECK(sorted == Iota(50));
  }
  CHECK(firsts[0] != firsts[1]);
  // Addressable: another reader, in another order, reads the same batches.
  BatchStream other = ValueOrDie(BatchStream::Create(data, 7, true, 5));
  for (int64_t i : {17, 3, 9}) {
    CHECK(ValueOrDie(other.Get(i)).ids.at("id") == ValueOrDie(stream.Get(i)).ids.at("id"));
  }

  // A strided shard is not contiguous in the source: rows are shuffled one by one.
  BatchStream strided = ValueOrDie(BatchStream::Create(ValueOrDie(data.Shard(2, 1)), 5, true, 5));
  CHECK_FALSE(strided.shuffles_batches());
  Ids seen;
  for (int64_t i = 0; i < 5; ++i) {
    const Ids ids = ValueOrDie(strided.Get(i)).ids.at("id");
    seen.insert(seen.end(), ids.begin(), ids.end());
  }
  Ids odd;
  for (int64_t r = 1; r < 50; r += 2) odd.push_back(r);
  CHECK(seen != odd);
  std::sort(seen.begin(), seen.end());
  CHECK(seen == odd);
  // A source without the hint keeps the row-wise shuffle.
  CHECK_FALSE(ValueOrDie(BatchStream::Create(Numbered(50), 7, true, 5)).shuffles_batches());

  // A shuffled iterator walks the contiguous batches in the permutation of (seed, epoch) too;
  // with drop_remainder the short one is not among them.
  for (bool drop : {false, true}) {
    CAPTURE(drop);
    BatchOptions options;
    options.batch_size = 7;
    options.shuffle = true;
    options.seed = 5;
    options.num_epochs = 2;
    options.drop_remainder = drop;
    BatchIterator it = ValueOrDie(BatchIterator::Create(data, options));
    const int64_t batches = drop ? 7 : 8;
    REQUIRE(it.batches_per_epoch() == batches);
    for (int64_t e = 0; e < 2; ++e) {
      Ids epoch;
      for (int64_t k = 0; k < batches; ++k) {
        std::optional<Batch> batch = ValueOrDie(it.Next());
        REQUIRE(batch.has_value());
        const Ids ids = batch->ids.at("id");
        CHECK(ids.front() == RandomPermutation(batches, 5, e)[k] * 7);
        CHECK(ids.size() == (ids.front() == 49 ? 1u : 7u));
        epoch.insert(epoch.end(), ids.begin(), ids.end());
      }
      std::sort(epoch.begin(), epoch.end());
      CHECK(epoch == Iota(drop ? 49 : 50));
    }
    CHECK_FALSE(ValueOrDie(it.Next()).has_value());
    CHECK(it.epoch() == 2);
  }
}

TEST_CASE("a batch larger than the dataset is the whole dataset, even near the int64 limit") {
  const Dataset d = Numbered(50);
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  CHECK(BatchesPerPass(50, kHuge) == 1);
  CHECK(BatchesPerPass(50, 7) == 8);
  CHECK(BatchesPerPass(49, 7) == 7);
  CHECK(BatchesPerPass(0, 7) == 0);
  auto stream = BatchStream::Create(d, kHuge, /*shuffle=*/true, 3);
  REQUIRE(stream.ok());
  CHECK(stream->batches_per_epoch() == 1);
  for (int64_t i : {0, 1, 5}) {  // every index is the next epoch's whole, reshuffled dataset
    CAPTURE(i);
    absl::StatusOr<Batch> batch = stream->Get(i);
    REQUIRE(batch.ok());
    CHECK(batch->size == 50);
  }
  BatchOptions options;
  options.batch_size = kHuge;
  options.num_epochs = 2;
  BatchIterator it = MakeIterator(d, options);
  CHECK(it.batches_per_epoch() == 1);
  CHECK(Drain(it).size() == 2);
}

TEST_CASE("a random permutation is uniform over all orders") {
  // Every one of the 24 orders of 4 elements is about equally likely (a Fisher-Yates off-by-one
  // would make some orders impossible or twice as likely).
  std::map<std::vector<int64_t>, int> counts;
  const int trials = 24000;
  for (int s = 0; s < trials; ++s) ++counts[RandomPermutation(4, 9, s)];
  CHECK(counts.size() == 24);
  for (const auto& [order, count] : counts) {
    CAPTURE(count);
    CHECK(count > 850);  // expected 1000, standard deviation about 31
    CHECK(count < 1150);
  }
  CHECK(RandomPermutation(100, 1, 2) == RandomPermutation(100, 1, 2));
  CHECK(RandomPermutation(100, 1, 2) != RandomPermutation(100, 1, 3));
  CHECK(RandomPermutation(0, 1, 2).empty());
}

TEST_CASE("repeat counts epochs, and kRepeatForever does not end") {
  const Dataset d = Numbered(10);
  BatchOptions options;
  options.batch_size = 4;
  options.num_epochs = 3;
  BatchIterator three = MakeIterator(d, options);
  const std::vector<Ids> batches = Drain(three);
  REQUIRE(batches.size() == 9);
  const std::vector<size_t> sizes_per_epoch = {4, 4, 2};
  for (size_t i = 0; i < batches.size(); ++i) CHECK(batches[i].size() == sizes_per_epoch[i % 3]);
  CHECK(three.epoch() == 3);

  options.num_epochs = kRepeatForever;
  options.shuffle = true;
  BatchIterator forever = MakeIterator(d, options);
  CHECK(Drain(forever, 301).size() == 301);
  CHECK(forever.epoch() == 100);  // 300 batches done 100 epochs; the 301st began the next

  options.num_epochs = 0;
  BatchIterator none = MakeIterator(d, options);
  CHECK_FALSE(ValueOrDie(none.Next()).has_value());
}

TEST_CASE("an iterator whose epoch yields no batch ends, even repeating forever") {
  BatchOptions options;
  options.num_epochs = kRepeatForever;
  BatchIterator empty = MakeIterator(Numbered(0), options);
  CHECK_FALSE(ValueOrDie(empty.Next()).has_value());

  options.batch_size = 11;
  options.drop_remainder = true;
  BatchIterator too_small = MakeIterator(Numbered(10), options);
  CHECK(too_small.batches_per_epoch() == 0);
  CHECK_FALSE(ValueOrDie(too_small.Next()).has_value());
}

TEST_CASE("invalid iterator options are rejected") {
  BatchOptions options;
  options.batch_size = 0;
  CHECK(BatchIterator::Create(Numbered(3), options).status().code() ==
        absl::StatusCode::kInvalidArgument);
  options.batch_size = 1;
  options.num_epochs = -2;
  CHECK(BatchIterator::Create(Numbered(3), options).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("shards are disjoint, cover the dataset once, and differ in size by at most one") {
  for (int64_t n : {0, 1, 7, 10, 100}) {
    for (int64_t parts : {1, 2, 3, 4, 11}) {
      CAPTURE(n);
      CAPTURE(parts);
      const Dataset d = Numbered(n);
      std::vector<int64_t> seen(n, 0);
      int64_t smallest = n, largest = 0;
      for (int64_t i = 0; i < parts; ++i) {
        absl::StatusOr<Dataset> shard = d.Shard(parts, i);
        REQUIRE(shard.ok());
        smallest = std::min(smallest, shard->size());
        largest = std::max(largest, shard->size());
        absl::StatusOr<Batch> all = shard->Slice(0, shard->size());
        REQUIRE(all.ok());
        for (int64_t id : AlignedIds(*all)) ++seen[id];
      }
      CHECK(std::all_of(seen.begin(), seen.end(), [](int64_t c) { return c == 1; }));
      CHECK(largest - smallest <= 1);
    }
  }
}

TEST_CASE("a shard of a shard is a shard of the whole, and can be iterated") {
  const Dataset d = Numbered(100);
  const Dataset half = *d.Shard(2, 1);        // 1, 3, 5, ...
  const Dataset quarter = *half.Shard(3, 2);  // 5, 11, 17, ...
  absl::StatusOr<Batch> all = quarter.Slice(0, quarter.size());
  REQUIRE(all.ok());
  Ids expected;
  for (int64_t i = 5; i < 100; i += 6) expected.push_back(i);
  CHECK(AlignedIds(*all) == expected);

  BatchOptions options;
  options.batch_size = 4;
  options.shuffle = true;
  BatchIterator it = MakeIterator(quarter, options);
  Ids walked = Flatten(Drain(it));
  std::sort(walked.begin(), walked.end());
  CHECK(walked == expected);
}

TEST_CASE("bad shard arguments are rejected") {
  const Dataset d = Numbered(5);
  for (auto [parts, index] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {3, 3}, {3, -1}}) {
    CAPTURE(parts);
    CAPTURE(index);
    CHECK(d.Shard(parts, index).status().code() == absl::StatusCode::kInvalidArgument);
  }
}

TEST_CASE("Slice and Gather copy the chosen examples and check their range") {
  const Dataset d = *Numbered(10).Shard(2, 0);  // 0, 2, 4, 6, 8
  absl::StatusOr<Batch> slice = d.Slice(1, 3);
  REQUIRE(slice.ok());
  CHECK(AlignedIds(*slice) == Ids{2, 4, 6});
  absl::StatusOr<Batch> gathered = d.Gather(std::vector<int64_t>{4, 0, 4});
  REQUIRE(gathered.ok());
  CHECK(AlignedIds(*gathered) == Ids{8, 0, 8});
  CHECK(d.Slice(3, 3).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(d.Slice(-1, 1).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(d.Gather(std::vector<int64_t>{0, 5}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(d.Slice(5, 0).ok());
}

TEST_CASE("a dataset over a source reads only the rows its batches ask for") {
  auto source = std::make_shared<PositionSource>(1000000);
  const Dataset data = ValueOrDie(Dataset::FromSource(source));
  CHECK(data.size() == 1000000);
  CHECK(data.IdFeatureNames() == std::vector<std::string>{"id"});
  const Dataset part = ValueOrDie(data.Shard(4, 1));  // rows 1, 5, 9, ...
  BatchStream stream = ValueOrDie(BatchStream::Create(part, 8, /*shuffle=*/true, /*seed=*/3));
  const Batch batch = ValueOrDie(stream.Get(12345));
  CHECK(source->rows_read() == 8);  // one batch: 8 rows of a million, nothing else
  for (const int64_t id : batch.ids.at("id")) CHECK(id % 4 == 1);
  for (int64_t k = 0; k < batch.size; ++k) {
    CHECK(batch.labels.values()[k] == static_cast<float>(batch.ids.at("id")[k] % 2));
  }
  CHECK(ValueOrDie(stream.Get(12345)).ids.at("id") == batch.ids.at("id"));  // a re-run: the same
}

TEST_CASE(
    "a source's read error reaches the reader, and a source breaking its contract is caught") {
  const Dataset data =
      ValueOrDie(Dataset::FromSource(std::make_shared<PositionSource>(10, std::set<int64_t>{7})));
  CHECK(ValueOrDie(data.Slice(0, 7)).size == 7);
  CHECK(absl::IsDataLoss(data.Slice(5, 3).status()));
  BatchOptions options;
  options.batch_size = 4;
  BatchIterator it = ValueOrDie(BatchIterator::Create(data, options));
  CHECK(ValueOrDie(it.Next()).has_value());  // rows 0..3
  const auto bad = it.Next();                // rows 4..7
  CHECK(absl::IsDataLoss(bad.status()));
  CHECK(bad.status().message() == "row 7 is corrupt");

  class Liar : public PositionSource {
   public:
    Liar() : PositionSource(10) {}
    absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const override {
      Batch batch = *PositionSource::Read(rows);
      batch.size += 1;  // one example too many
      return batch;
    }
  };
  const Dataset lying = ValueOrDie(Dataset::FromSource(std::make_shared<Liar>()));
  CHECK(absl::IsInternal(lying.Slice(0, 2).status()));

  // A source that leaves out a feature of its schema, or returns a broken id list.
  class MissingFeature : public PositionSource {
   public:
    explicit MissingFeature(bool broken_list) : PositionSource(10), broken_(broken_list) {
      schema_.id_features = {"id"};
      schema_.id_list_features = {"history"};
    }
    const ExampleSchema& schema() const override { return schema_; }
    absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const override {
      Batch batch = *PositionSource::Read(rows);
      if (broken_) batch.id_lists["history"] = IdList{{0, 3}, {1}, {}};
      return batch;
    }

   private:
    ExampleSchema schema_;
    bool broken_;
  };
  for (bool broken : {false, true}) {
    CAPTURE(broken);
    const Dataset d = ValueOrDie(Dataset::FromSource(std::make_shared<MissingFeature>(broken)));
    const absl::Status status = d.Slice(0, 1).status();
    CHECK(absl::IsInternal(status));
    CHECK(status.message().find("history") != absl::string_view::npos);
  }
  CHECK(absl::IsInvalidArgument(Dataset::FromSource(nullptr).status()));
}

}  // namespace
}  // namespace tessera

namespace tessera {
namespace {

TEST_CASE("the parts of a stream's batch are the batch, split in order, sizes within one") {
  const Dataset d = Numbered(50);
  BatchStream whole = ValueOrDie(BatchStream::Create(d, 12, /*shuffle=*/true, 3));
  BatchStream parts = ValueOrDie(BatchStream::Create(d, 12, /*shuffle=*/true, 3));
  for (int64_t index : {0, 4, 5, 9}) {  // batch 4 is the epoch's last: 2 examples
    CAPTURE(index);
    const Ids want = AlignedIds(ValueOrDie(whole.Get(index)));
    Ids got;
    for (int64_t part = 0; part < 3; ++part) {
      int64_t size = -1;
      const Batch batch = ValueOrDie(parts.GetPart(index, part, 3, &size));
      CHECK(size == static_cast<int64_t>(want.size()));
      CHECK(batch.size * 3 >= size - 2);
      CHECK(batch.size * 3 <= size + 2);
      const Ids ids = AlignedIds(batch);
      got.insert(got.end(), ids.begin(), ids.end());
    }
    CHECK(got == want);
  }
  CHECK(absl::IsInvalidArgument(parts.GetPart(0, 3, 3).status()));
  CHECK(absl::IsInvalidArgument(parts.GetPart(0, 0, 0).status()));
  CHECK(absl::IsInvalidArgument(parts.GetPart(-1, 0, 1).status()));
}

}  // namespace
}  // namespace tessera
