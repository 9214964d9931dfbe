// Training data: a Batch as a model consumes it, the ExampleSource every reader implements (files:
// tessera/delimited_text.h), and the in-memory Dataset with its batch iterators. Three parts below:
// the batch, the source, the dataset.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "tessera/tensor.h"

namespace tessera {

// Batch: a mini-batch of examples as a model consumes it.
//
// Features are named:
//   - id features (one int64 id per example, e.g. "user", "item") feed embeddings;
//   - id-list features (several ids per example, a multi-hot feature such as a user's history,
//     optionally weighted) feed embedding bags;
//   - dense features (a float tensor with one row per example, e.g. "pixels") feed dense layers.
// Labels are a [size, 1] float tensor: 0/1 for binary tasks, the class index for multi-class
// ones, the target value for regression.
//
// Example, two examples whose "history" holds {3, 7} and {} (an empty list):
//   Batch batch;
//   batch.size = 2;
//   batch.id_lists["history"] = IdList{{0, 2, 2}, {3, 7}, {}};

// Ragged ids, TF's RaggedTensor layout: example b's ids are ids[row_splits[b], row_splits[b+1]).
// row_splits has one entry more than there are examples, starts at 0, never decreases and ends
// at ids.size(). weights is empty (every id weighs 1) or holds one weight per id.
struct IdList {
  std::vector<int64_t> row_splits = {0};
  Ids ids;
  std::vector<float> weights;

  int64_t num_rows() const { return static_cast<int64_t>(row_splits.size()) - 1; }
};

struct Batch {
  int64_t size = 0;
  std::map<std::string, Ids> ids;
  std::map<std::string, IdList> id_lists;
  std::map<std::string, Tensor> dense;
  Tensor labels;
};

// ExampleSource: where a Dataset's examples come from, read by position. The examples need not
// exist in memory: a source may draw them from a generator (tessera/workloads/recsys_data.h) or
// read them from a file, so that a worker produces or reads only the batches it is handed — never
// the whole data set — and a batch re-run after a preemption reads the same examples again.
//
// A Dataset (tessera/data.h) wraps a source and adds the strided selections (Shard) and
// batching; Dataset::Create wraps examples already in memory (InMemoryExamples below).
//
// Example, a source of n examples whose only feature is its own position:
//   class Positions : public ExampleSource {
//    public:
//     explicit Positions(int64_t n) : n_(n) { schema_.id_features = {"position"}; }
//     int64_t size() const override { return n_; }
//     const ExampleSchema& schema() const override { return schema_; }
//     absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const override {
//       Batch batch;
//       batch.size = static_cast<int64_t>(rows.size());
//       batch.ids["position"].assign(rows.begin(), rows.end());
//       batch.labels = Tensor(Shape{batch.size, 1});
//       return batch;
//     }
//    private:
//     int64_t n_;
//     ExampleSchema schema_;
//   };
//   TESSERA_ASSIGN_OR_RETURN(Dataset data, Dataset::FromSource(std::make_shared<Positions>(1000)));
//
// Thread-safety: a source is shared by every Dataset made from it and read from any thread:
// Read must be safe to call concurrently (a pure function of its rows, as in the example).
//
// Note [Sequential sources]
// A source over a file reads a run of neighbouring rows with one read (and, compressed, one
// decompression from the nearest access point), but a row here and a row there each cost a seek
// and a decompression of their own. Such a source says so with sequential(); a shuffled
// BatchStream over it then shuffles the order of whole contiguous batches instead of the rows
// (tessera/data.h), so that every batch is one contiguous read.

// The features every example of a source has.
struct ExampleSchema {
  std::vector<std::string> id_features;  // one int64 id per example each
  // Several ids per example each (a batch's Batch::id_lists entry, one row per example).
  std::vector<std::string> id_list_features;
  // Dense features by name: the shape of ONE example's value (a batch's is [n] + this).
  std::map<std::string, Shape> dense_features;
  // The id and id-list features whose ids are the StringIds of texts (core/base/hash.h): a
  // file's cat: and list: columns. A value of such a feature is a text wherever it comes from —
  // a file, a request, an example — and an integer stands for its decimal digits, so that 30440
  // and "30440" are one value. Empty for raw ids.
  std::set<std::string> text_features;
};

// What a source's labels span: the least and the greatest, each where it is ("path:line" in a
// file, "example N" in memory), and the first that is not a whole number, if any.
struct LabelRange {
  double min = 0;
  double max = 0;
  std::string min_at;
  std::string max_at;
  std::optional<double> fraction;  // the first label with a fractional part
  std::string fraction_at;
};

class ExampleSource {
 public:
  virtual ~ExampleSource() = default;

  // The number of examples; fixed for the source's life.
  virtual int64_t size() const = 0;
  virtual const ExampleSchema& schema() const = 0;
  // The examples at `rows` (the caller guarantees each is in [0, size()); repeats allowed), in
  // that order, as one batch of exactly the schema's features with labels [rows.size(), 1]. An
  // error (a file that went bad) is returned, never thrown.
  virtual absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const = 0;
  // Whether reading a run of contiguous rows is far cheaper than reading as many scattered ones
  // (a file): Note [Sequential sources]. False for sources whose rows cost the same anywhere.
  virtual bool sequential() const { return false; }
  // The labels' range, when the source knows it without reading its examples (a file's index
  // recorded it while checking each line; memory holds them all); nullopt when it does not, or
  // holds no example.
  virtual std::optional<LabelRange> labels() const { return std::nullopt; }
};

// OK when `list` is a ragged list of `rows` examples (tessera/data.h's IdList): row_splits has
// rows + 1 entries, starts at 0, never decreases and ends at ids.size(); weights are empty or one
// per id. InvalidArgument naming `feature` and what is wrong otherwise.
absl::Status CheckIdList(const IdList& list, int64_t rows, absl::string_view feature);

// Examples held in memory as columns (a Batch of every example).
class InMemoryExamples final : public ExampleSource {
 public:
  // Takes `examples` whole. InvalidArgument, naming the feature and both sizes, when an id
  // feature does not have `size` ids, an id-list feature is not a ragged list of `size` rows
  // (row_splits of size + 1 entries, from 0, never decreasing, ending at ids.size(); weights
  // empty or one per id), a dense feature is not rank >= 1 with `size` rows, labels are not
  // [size, 1], or a name is used by two features.
  static absl::StatusOr<std::shared_ptr<const InMemoryExamples>> Create(Batch examples);

  int64_t size() const override { return columns_.size; }
  const ExampleSchema& schema() const override { return schema_; }
  absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const override;
  std::optional<LabelRange> labels() const override;

 private:
  InMemoryExamples(Batch columns, ExampleSchema schema)
      : columns_(std::move(columns)), schema_(std::move(schema)) {}

  Batch columns_;
  ExampleSchema schema_;
};

// Dataset and BatchIterator: examples, split into disjoint worker parts, and walked in
// (optionally shuffled, repeated) mini-batches.
//
// A Dataset is a cheap handle onto an immutable, shared ExampleSource (tessera/data.h:
// columns in memory, or examples generated or read from a file on demand, with the same named id
// features, id-list features, dense features and labels a Batch has) plus a strided selection of
// its rows. Copying a Dataset or taking a Shard never copies examples; only a batch reads its own
// rows. Both reference workloads produce one (tessera/workloads/recsys_data.h,
// tessera/workloads/fashion_mnist.h), and so does a delimited text file (tessera/delimited_text.h).
//
// Example: four workers, each walking its own part for two shuffled epochs.
//   TESSERA_ASSIGN_OR_RETURN(Dataset part, train.Shard(4, worker_index));
//   BatchOptions options;
//   options.batch_size = 512;
//   options.shuffle = true;
//   options.seed = 17 + worker_index;  // each worker its own order
//   options.num_epochs = 2;
//   TESSERA_ASSIGN_OR_RETURN(BatchIterator it, BatchIterator::Create(part, options));
//   while (true) {
//     TESSERA_ASSIGN_OR_RETURN(std::optional<Batch> batch, it.Next());
//     if (!batch) break;
//     Train(*batch);
//   }
//
// Thread-safety: a Dataset is immutable, so any number of threads may share it (and shards of
// it) and read concurrently. A BatchIterator is not synchronized: one owner at a time.

class Dataset {
 public:
  // An empty dataset (no rows, no features).
  Dataset();

  // Takes ownership of `examples`, a batch holding every example (its `size` rows). Every id
  // feature must have `size` ids, every dense feature must have rank >= 1 and `size` rows, and
  // labels must be [size, 1]. InvalidArgument, naming the feature and both sizes, otherwise, or
  // when a name is used by both an id and a dense feature.
  static absl::StatusOr<Dataset> Create(Batch examples);
  // All of `source`'s examples, read only as batches ask for them (tessera/data.h).
  // InvalidArgument for a null source or a negative size.
  static absl::StatusOr<Dataset> FromSource(std::shared_ptr<const ExampleSource> source);

  // The number of examples in this dataset (or shard).
  int64_t size() const { return count_; }
  std::vector<std::string> IdFeatureNames() const;
  std::vector<std::string> IdListFeatureNames() const;
  std::vector<std::string> DenseFeatureNames() const;
  // ExampleSchema::text_features, sorted.
  std::vector<std::string> TextFeatureNames() const;
  // The labels' range over the whole source this dataset reads (a shard's are within it):
  // ExampleSource::labels.
  std::optional<LabelRange> LabelsRange() const;
  // The shape of each dense feature over this dataset's rows (dim 0 is size()).
  std::map<std::string, Shape> DenseFeatureShapes() const;

  // Part `index` of `num_parts` disjoint parts: examples index, index + num_parts,
  // index + 2 * num_parts, ... (tf.data's shard). Together the parts hold every example exactly
  // once; their sizes differ by at most one. Shares the columns (no copy); a shard can be
  // sharded again. InvalidArgument unless num_parts >= 1 and 0 <= index < num_parts.
  absl::StatusOr<Dataset> Shard(int64_t num_parts, int64_t index) const;

  // Copies examples [begin, begin + count) of this dataset into a batch. InvalidArgument when
  // the range is not inside [0, size()); the source's error when it cannot read them.
  absl::StatusOr<Batch> Slice(int64_t begin, int64_t count) const;
  // Copies the examples at `positions` (each in [0, size()), repeats allowed) into a batch, in
  // that order. InvalidArgument naming the first position out of range; the source's error.
  absl::StatusOr<Batch> Gather(absl::Span<const int64_t> positions) const;

 private:
  friend class BatchIterator;
  friend class BatchStream;

  Dataset(std::shared_ptr<const ExampleSource> source, int64_t offset, int64_t stride,
          int64_t count)
      : source_(std::move(source)), offset_(offset), stride_(stride), count_(count) {}

  // Whether this dataset's examples are contiguous rows of a sequential source (Note [Shuffling
  // batches of a sequential source]).
  bool ContiguousInSequentialSource() const { return source_->sequential() && stride_ == 1; }
  // Row `position` of this dataset in the source.
  int64_t StorageRow(int64_t position) const { return offset_ + position * stride_; }
  // Reads examples without range checks; positions are in [0, size()).
  absl::StatusOr<Batch> GatherUnchecked(absl::Span<const int64_t> positions) const;
  absl::StatusOr<Batch> SliceUnchecked(int64_t begin, int64_t count) const;
  // The source's rows, checked against the source contract: the rows asked for, labels
  // [n, 1], and every feature of the schema with one row per example (InternalError naming the
  // mismatch).
  absl::StatusOr<Batch> ReadRows(absl::Span<const int64_t> rows) const;

  std::shared_ptr<const ExampleSource> source_;
  // This dataset's examples are the source's rows offset_ + k * stride_ for k in [0, count_).
  int64_t offset_ = 0;
  int64_t stride_ = 1;
  int64_t count_ = 0;
};

// num_epochs value for an iterator that repeats forever.
inline constexpr int64_t kRepeatForever = -1;

// Batches of `batch_size` (>= 1) in one pass over `examples` (>= 0), the last one partial:
// ceil(examples / batch_size), without the overflow of (examples + batch_size - 1) / batch_size
// for a batch size near the int64 limit.
inline int64_t BatchesPerPass(int64_t examples, int64_t batch_size) {
  return examples / batch_size + (examples % batch_size != 0 ? 1 : 0);
}

struct BatchOptions {
  int64_t batch_size = 32;
  // Drop each epoch's last batch when it has fewer than batch_size examples.
  bool drop_remainder = false;
  // Visit each epoch in a fresh permutation. Epoch e's order is a pure function of (seed, e),
  // the same on every platform (Philox + Fisher-Yates). Over a contiguous part of a sequential
  // source the permutation is of whole contiguous batches (Note [Shuffling batches of a
  // sequential source]).
  bool shuffle = false;
  uint64_t seed = 0;
  // Passes over the dataset; kRepeatForever never ends.
  int64_t num_epochs = 1;
};

// Walks a dataset in batches. Batches never span two epochs: each epoch visits every example of
// the dataset exactly once, in order or in its own permutation, and ends with a partial batch
// unless drop_remainder. An epoch that yields no batch (an empty dataset, or fewer examples
// than batch_size with drop_remainder) ends the iterator, even with kRepeatForever.
class BatchIterator {
 public:
  // InvalidArgument when batch_size < 1 or num_epochs is neither >= 0 nor kRepeatForever.
  static absl::StatusOr<BatchIterator> Create(Dataset dataset, BatchOptions options);

  // The next batch, or nullopt once the last epoch is done; the source's error when it cannot
  // read the batch (the iterator then stays where it was). A batch holds its own copy of its
  // rows and stays valid after the iterator moves on.
  absl::StatusOr<std::optional<Batch>> Next();

  // The epoch the next batch comes from (0-based); equals num_epochs once exhausted.
  int64_t epoch() const { return epoch_; }
  // Batches returned so far.
  int64_t batches_returned() const { return batches_returned_; }
  // Batches each epoch yields.
  int64_t batches_per_epoch() const;
  const Dataset& dataset() const { return dataset_; }
  const BatchOptions& options() const { return options_; }

 private:
  BatchIterator(Dataset dataset, BatchOptions options)
      : dataset_(std::move(dataset)),
        options_(options),
        shuffle_batches_(options.shuffle && dataset_.ContiguousInSequentialSource()) {}

  // Prepares epoch_'s order (its permutation when shuffling).
  void StartEpoch();
  bool HasNext() const;
  // Moves past a batch of `count` examples, into the next epoch when this one is done.
  void Advance(int64_t count);

  Dataset dataset_;
  BatchOptions options_;
  int64_t epoch_ = 0;
  int64_t next_position_ = 0;  // within the current epoch
  int64_t epoch_batches_ = 0;  // batches returned from the current epoch
  int64_t batches_returned_ = 0;
  // The epoch's permutation (of batches when shuffle_batches_, else of examples); empty when not
  // shuffling.
  std::vector<int64_t> order_;
  bool shuffle_batches_ = false;  // Note [Shuffling batches of a sequential source]
};

// The endless stream of batches over a dataset — epoch after epoch, each epoch in its own
// permutation of (seed, epoch) when shuffling, batches never spanning two epochs — addressable by
// index: Get(i) is the i-th batch of the stream, computable by anyone holding the dataset.
//
// This is dynamic sharding (tf.data service's ShardingPolicy.DYNAMIC): a coordinator hands batch
// i to whichever worker is idle, and when that worker dies the re-run reads the same batch i.
// Every batch is trained once whatever fails, where static per-worker parts (TF's per-worker
// datasets) repeat a part while another worker is down and leave the dead one's part unread.
//
// Note [Shuffling batches of a sequential source]
// Over a sequential source (a file: Note [Sequential sources] in tessera/data.h) a
// shuffled stream (and a shuffled BatchIterator) does not draw each batch's rows from all over
// the dataset, which would make every batch batch_size scattered reads (and, compressed, as many
// decompressions). It shuffles the ORDER of the epoch's batches instead: epoch e visits batches
// in the permutation of (seed, e) of [0, batches_per_epoch()), batch j being the contiguous rows
// [j * batch_size, (j + 1) * batch_size) in source order (the short last one anywhere in the
// epoch; an iterator with drop_remainder leaves it out), so each batch is one contiguous read.
// The examples within a batch stay neighbours: shuffle the file once when it is written if its
// neighbours are correlated (a log sorted by time or user). A strided shard of such a source is
// not contiguous, so it falls back to the row-wise shuffle. Either way Get(i) is a pure function
// of (dataset, batch size, seed, i).
//
// Thread-safety: not synchronized (it caches the current epoch's permutation); one per worker.
class BatchStream {
 public:
  // InvalidArgument when batch_size < 1 or the dataset is empty. With `shuffle`, a dataset that
  // is a contiguous part of a sequential source shuffles whole batches (Note [Shuffling batches
  // of a sequential source]); any other shuffles its rows.
  static absl::StatusOr<BatchStream> Create(Dataset dataset, int64_t batch_size, bool shuffle,
                                            uint64_t seed);

  int64_t batches_per_epoch() const { return BatchesPerPass(dataset_.size(), batch_size_); }
  // Whether a shuffled epoch is a permutation of contiguous batches rather than of rows.
  bool shuffles_batches() const { return shuffle_ && shuffle_batches_; }
  // Batch `index` (>= 0, else InvalidArgument): epoch index / batches_per_epoch(), batch
  // index % batches_per_epoch() of that epoch; the last batch of an epoch may be partial.
  absl::StatusOr<Batch> Get(int64_t index);
  // Part `part` of `parts` of batch `index`: its examples [n * part / parts, n * (part + 1) /
  // parts) for a batch of n (the parts differ by at most one; some are empty when n < parts) — a
  // replica's share of a global batch (core/mirrored/mirrored_replica.h). `batch_size`, when given,
  // gets n. InvalidArgument for a negative index or a part outside [0, parts).
  absl::StatusOr<Batch> GetPart(int64_t index, int64_t part, int64_t parts,
                                int64_t* batch_size = nullptr);

 private:
  BatchStream(Dataset dataset, int64_t batch_size, bool shuffle, bool shuffle_batches,
              uint64_t seed)
      : dataset_(std::move(dataset)),
        batch_size_(batch_size),
        shuffle_(shuffle),
        shuffle_batches_(shuffle_batches),
        seed_(seed) {}

  Dataset dataset_;
  int64_t batch_size_;
  bool shuffle_;
  bool shuffle_batches_;  // Note [Shuffling batches of a sequential source]
  uint64_t seed_;
  int64_t cached_epoch_ = -1;
  // cached_epoch_'s permutation: of the batches when shuffle_batches_, else of the rows.
  std::vector<int64_t> order_;
};

// A uniformly random permutation of [0, n), drawn by Fisher-Yates over
// PhiloxStream(seed, stream).Below: the same on every platform.
std::vector<int64_t> RandomPermutation(int64_t n, uint64_t seed, uint64_t stream);

}  // namespace tessera
