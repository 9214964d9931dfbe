// ExampleSource: where a Dataset's examples come from, read by position. The examples need not
// exist in memory: a source may draw them from a generator (workloads/recsys_data.h) or read them
// from a file, so that a worker produces or reads only the batches it is handed — never the whole
// data set — and a batch re-run after a preemption reads the same examples again.
//
// A Dataset (core/data/dataset.h) wraps a source and adds the strided selections (Shard) and
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
// (core/data/dataset.h), so that every batch is one contiguous read.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/base/tensor.h"
#include "core/data/batch.h"

namespace tessera {

// The features every example of a source has.
struct ExampleSchema {
  std::vector<std::string> id_features;  // one int64 id per example each
  // Several ids per example each (a batch's Batch::id_lists entry, one row per example).
  std::vector<std::string> id_list_features;
  // Dense features by name: the shape of ONE example's value (a batch's is [n] + this).
  std::map<std::string, Shape> dense_features;
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
};

// OK when `list` is a ragged list of `rows` examples (core/data/batch.h's IdList): row_splits has
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

 private:
  InMemoryExamples(Batch columns, ExampleSchema schema)
      : columns_(std::move(columns)), schema_(std::move(schema)) {}

  Batch columns_;
  ExampleSchema schema_;
};

}  // namespace tessera
