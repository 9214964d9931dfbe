#include "tessera/data.h"

#include <algorithm>
#include <cassert>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/random.h"
#include "tessera/status.h"

namespace tessera {
namespace {

std::shared_ptr<const ExampleSource> NoExamples() {
  Batch empty;
  empty.labels = Tensor(Shape{0, 1});
  absl::StatusOr<std::shared_ptr<const InMemoryExamples>> source =
      InMemoryExamples::Create(std::move(empty));
  assert(source.ok());
  return *std::move(source);
}

}  // namespace

Dataset::Dataset() : source_(NoExamples()), count_(0) {}

absl::StatusOr<Dataset> Dataset::Create(Batch examples) {
  TESSERA_ASSIGN_OR_RETURN(std::shared_ptr<const InMemoryExamples> source,
                           InMemoryExamples::Create(std::move(examples)));
  return FromSource(std::move(source));
}

absl::StatusOr<Dataset> Dataset::FromSource(std::shared_ptr<const ExampleSource> source) {
  if (source == nullptr) return absl::InvalidArgumentError("a dataset needs a source");
  if (source->size() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a source of ", source->size(), " examples"));
  }
  const int64_t n = source->size();
  return Dataset(std::move(source), 0, 1, n);
}

std::vector<std::string> Dataset::IdFeatureNames() const { return source_->schema().id_features; }

std::optional<LabelRange> Dataset::LabelsRange() const { return source_->labels(); }

std::vector<std::string> Dataset::TextFeatureNames() const {
  const std::set<std::string>& names = source_->schema().text_features;
  return std::vector<std::string>(names.begin(), names.end());
}

std::vector<std::string> Dataset::IdListFeatureNames() const {
  return source_->schema().id_list_features;
}

std::vector<std::string> Dataset::DenseFeatureNames() const {
  std::vector<std::string> names;
  for (const auto& entry : source_->schema().dense_features) names.push_back(entry.first);
  return names;
}

std::map<std::string, Shape> Dataset::DenseFeatureShapes() const {
  std::map<std::string, Shape> shapes;
  for (const auto& [name, shape] : source_->schema().dense_features) {
    std::vector<int64_t> dims = shape.dims();
    dims.insert(dims.begin(), count_);
    shapes.emplace(name, Shape(std::move(dims)));
  }
  return shapes;
}

absl::StatusOr<Dataset> Dataset::Shard(int64_t num_parts, int64_t index) const {
  if (num_parts < 1 || index < 0 || index >= num_parts) {
    return absl::InvalidArgumentError(absl::StrCat("shard index ", index, " of ", num_parts,
                                                   " parts: need num_parts >= 1 and 0 <= index "
                                                   "< num_parts"));
  }
  const int64_t count = index < count_ ? (count_ - index + num_parts - 1) / num_parts : 0;
  // With one row or none the stride is irrelevant; otherwise the last row lies inside the
  // source, which bounds stride_ * num_parts, so the product cannot overflow.
  const int64_t stride = count <= 1 ? 1 : stride_ * num_parts;
  const int64_t offset = count == 0 ? 0 : StorageRow(index);
  return Dataset(source_, offset, stride, count);
}

absl::StatusOr<Batch> Dataset::Slice(int64_t begin, int64_t count) const {
  if (begin < 0 || count < 0 || begin > count_ || count > count_ - begin) {
    return absl::InvalidArgumentError(absl::StrCat("slice [", begin, ", ", begin, " + ", count,
                                                   ") is outside the dataset's ", count_,
                                                   " examples"));
  }
  return SliceUnchecked(begin, count);
}

absl::StatusOr<Batch> Dataset::Gather(absl::Span<const int64_t> positions) const {
  for (size_t k = 0; k < positions.size(); ++k) {
    if (positions[k] < 0 || positions[k] >= count_) {
      return absl::InvalidArgumentError(absl::StrCat("position ", positions[k], " (entry ", k,
                                                     ") is outside the dataset's ", count_,
                                                     " examples"));
    }
  }
  return GatherUnchecked(positions);
}

absl::StatusOr<Batch> Dataset::GatherUnchecked(absl::Span<const int64_t> positions) const {
  std::vector<int64_t> rows(positions.size());
  for (size_t k = 0; k < positions.size(); ++k) rows[k] = StorageRow(positions[k]);
  return ReadRows(rows);
}

absl::StatusOr<Batch> Dataset::SliceUnchecked(int64_t begin, int64_t count) const {
  std::vector<int64_t> rows(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) rows[k] = StorageRow(begin + k);
  return ReadRows(rows);
}

absl::StatusOr<Batch> Dataset::ReadRows(absl::Span<const int64_t> rows) const {
  TESSERA_ASSIGN_OR_RETURN(Batch batch, source_->Read(rows));
  // A source is code outside this file: hold its batch to the contract before anyone trusts it.
  const int64_t n = static_cast<int64_t>(rows.size());
  if (batch.size != n || batch.labels.shape() != Shape{n, 1}) {
    return absl::InternalError(absl::StrCat("the example source returned ", batch.size,
                                            " examples with labels ",
                                            batch.labels.shape().ToString(), " for ", n,
                                            " rows"));
  }
  const ExampleSchema& schema = source_->schema();
  for (const std::string& name : schema.id_features) {
    auto ids = batch.ids.find(name);
    if (ids == batch.ids.end() || static_cast<int64_t>(ids->second.size()) != n) {
      return absl::InternalError(absl::StrCat("the example source returned no ", n,
                                              " ids of its id feature '", name, "'"));
    }
  }
  for (const std::string& name : schema.id_list_features) {
    auto list = batch.id_lists.find(name);
    if (list == batch.id_lists.end()) {
      return absl::InternalError(
          absl::StrCat("the example source returned no id-list feature '", name, "'"));
    }
    if (absl::Status valid = CheckIdList(list->second, n, name); !valid.ok()) {
      return absl::InternalError(
          absl::StrCat("the example source returned a bad id list: ", valid.message()));
    }
  }
  for (const auto& [name, shape] : schema.dense_features) {
    auto dense = batch.dense.find(name);
    std::vector<int64_t> expected = shape.dims();
    expected.insert(expected.begin(), n);
    if (dense == batch.dense.end() || dense->second.shape() != Shape(std::move(expected))) {
      return absl::InternalError(
          absl::StrCat("the example source returned dense feature '", name, "' as ",
                       dense == batch.dense.end() ? "nothing" : dense->second.shape().ToString(),
                       ", expected ", n, " rows of ", shape.ToString()));
    }
  }
  return batch;
}

absl::StatusOr<BatchIterator> BatchIterator::Create(Dataset dataset, BatchOptions options) {
  if (options.batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size is ", options.batch_size, ", must be >= 1"));
  }
  if (options.num_epochs < 0 && options.num_epochs != kRepeatForever) {
    return absl::InvalidArgumentError(absl::StrCat("num_epochs is ", options.num_epochs,
                                                   ", must be >= 0 or kRepeatForever (-1)"));
  }
  BatchIterator it(std::move(dataset), options);
  const bool forever = options.num_epochs == kRepeatForever;
  if (it.batches_per_epoch() == 0) {
    if (!forever) it.epoch_ = options.num_epochs;  // nothing to return: already exhausted
  } else if (forever || options.num_epochs > 0) {
    it.StartEpoch();
  }
  return it;
}

int64_t BatchIterator::batches_per_epoch() const {
  const int64_t n = dataset_.size();
  const int64_t b = options_.batch_size;
  return options_.drop_remainder ? n / b : BatchesPerPass(n, b);
}

void BatchIterator::StartEpoch() {
  next_position_ = 0;
  epoch_batches_ = 0;
  if (options_.shuffle) {
    order_ = RandomPermutation(shuffle_batches_ ? batches_per_epoch() : dataset_.size(),
                               options_.seed, static_cast<uint64_t>(epoch_));
  }
}

bool BatchIterator::HasNext() const {
  if (batches_per_epoch() == 0) return false;
  return options_.num_epochs == kRepeatForever || epoch_ < options_.num_epochs;
}

absl::StatusOr<std::optional<Batch>> BatchIterator::Next() {
  if (!HasNext()) return std::nullopt;
  const int64_t b = options_.batch_size;
  if (shuffle_batches_) {
    // Batch k of the epoch is contiguous batch order_[k]: only the last of those is short, and
    // with drop_remainder it is not in the permutation.
    const int64_t begin = order_[epoch_batches_] * b;
    const int64_t count = std::min(b, dataset_.size() - begin);
    TESSERA_ASSIGN_OR_RETURN(Batch batch, dataset_.SliceUnchecked(begin, count));
    Advance(count);
    return batch;
  }
  const int64_t count = std::min(b, dataset_.size() - next_position_);
  TESSERA_ASSIGN_OR_RETURN(
      Batch batch, options_.shuffle ? dataset_.GatherUnchecked(absl::MakeConstSpan(order_).subspan(
                                          next_position_, count))
                                    : dataset_.SliceUnchecked(next_position_, count));
  Advance(count);
  return batch;
}

void BatchIterator::Advance(int64_t count) {
  const int64_t n = dataset_.size();
  const bool forever = options_.num_epochs == kRepeatForever;
  next_position_ += count;
  ++batches_returned_;
  ++epoch_batches_;
  // Move to the next epoch once this one has nothing more to give.
  const int64_t left = n - next_position_;
  if (left == 0 || (options_.drop_remainder && left < options_.batch_size)) {
    ++epoch_;
    if (forever || epoch_ < options_.num_epochs) {
      StartEpoch();
    } else {
      order_.clear();
      order_.shrink_to_fit();
    }
  }
}

absl::StatusOr<BatchStream> BatchStream::Create(Dataset dataset, int64_t batch_size,
                                                bool shuffle, uint64_t seed) {
  if (batch_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size must be >= 1, not ", batch_size));
  }
  if (dataset.size() == 0) return absl::InvalidArgumentError("a batch stream needs examples");
  // Note [Shuffling batches of a sequential source]: contiguous positions must be contiguous
  // rows of the source, which a shard of stride > 1 is not.
  const bool shuffle_batches = dataset.ContiguousInSequentialSource();
  return BatchStream(std::move(dataset), batch_size, shuffle, shuffle_batches, seed);
}

absl::StatusOr<Batch> BatchStream::Get(int64_t index) { return GetPart(index, 0, 1); }

absl::StatusOr<Batch> BatchStream::GetPart(int64_t index, int64_t part, int64_t parts,
                                           int64_t* batch_size) {
  if (index < 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch index ", index, " is negative"));
  }
  if (parts < 1 || part < 0 || part >= parts) {
    return absl::InvalidArgumentError(absl::StrCat("part ", part, " of ", parts, " parts"));
  }
  const int64_t per_epoch = batches_per_epoch();
  const int64_t epoch = index / per_epoch;
  int64_t batch = index % per_epoch;
  if (shuffle_ && epoch != cached_epoch_) {
    order_ = RandomPermutation(shuffle_batches_ ? per_epoch : dataset_.size(), seed_,
                               static_cast<uint64_t>(epoch));
    cached_epoch_ = epoch;
  }
  if (shuffle_ && shuffle_batches_) batch = order_[batch];
  const int64_t begin = batch * batch_size_;
  const int64_t count = std::min(batch_size_, dataset_.size() - begin);
  if (batch_size != nullptr) *batch_size = count;
  const int64_t first = begin + count * part / parts;
  const int64_t size = begin + count * (part + 1) / parts - first;
  if (!shuffle_ || shuffle_batches_) return dataset_.SliceUnchecked(first, size);
  return dataset_.GatherUnchecked(absl::MakeConstSpan(order_).subspan(first, size));
}

std::vector<int64_t> RandomPermutation(int64_t n, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> order(std::max<int64_t>(n, 0));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  PhiloxStream rng(seed, stream);
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(rng.Below(static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace tessera
