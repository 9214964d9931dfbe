#include "core/example_source.h"

#include <cassert>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace tessera {

absl::StatusOr<std::shared_ptr<const InMemoryExamples>> InMemoryExamples::Create(Batch examples) {
  const int64_t n = examples.size;
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("dataset size ", n, " is negative"));
  ExampleSchema schema;
  for (const auto& [name, ids] : examples.ids) {
    if (static_cast<int64_t>(ids.size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat("id feature '", name, "' has ", ids.size(),
                                                     " ids, expected one per example (", n, ")"));
    }
    if (examples.dense.count(name) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature name '", name, "' is used by both an id and a dense feature"));
    }
    schema.id_features.push_back(name);
  }
  for (const auto& [name, tensor] : examples.dense) {
    if (tensor.shape().rank() < 1 || tensor.rows() != n) {
      return absl::InvalidArgumentError(absl::StrCat("dense feature '", name, "' has shape ",
                                                     tensor.shape().ToString(), ", expected ", n,
                                                     " rows (one per example)"));
    }
    std::vector<int64_t> dims = tensor.shape().dims();
    dims.erase(dims.begin());
    schema.dense_features.emplace(name, Shape(std::move(dims)));
  }
  RETURN_IF_ERROR(CheckSameShape(examples.labels.shape(), Shape{n, 1}, "dataset labels"));
  return std::shared_ptr<const InMemoryExamples>(
      new InMemoryExamples(std::move(examples), std::move(schema)));
}

absl::StatusOr<Batch> InMemoryExamples::Read(absl::Span<const int64_t> rows) const {
  const int64_t count = static_cast<int64_t>(rows.size());
  Batch batch;
  batch.size = count;
  for (const auto& [name, ids] : columns_.ids) {
    Ids& out = batch.ids[name];
    out.resize(count);
    for (int64_t k = 0; k < count; ++k) out[k] = ids[rows[k]];
  }
  auto copy_rows = [&](const Tensor& source) {
    const int64_t width = source.row_size();
    Tensor out(source.shape().WithRows(count));
    float* to = out.data();
    for (int64_t k = 0; k < count; ++k) {
      const float* row = source.data() + rows[k] * width;
      std::copy(row, row + width, to + k * width);
    }
    return out;
  };
  for (const auto& [name, tensor] : columns_.dense) batch.dense.emplace(name, copy_rows(tensor));
  batch.labels = copy_rows(columns_.labels);
  return batch;
}

}  // namespace tessera
