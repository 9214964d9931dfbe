#include <cassert>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "tessera/data.h"
#include "tessera/status.h"

namespace tessera {

absl::Status CheckIdList(const IdList& list, int64_t rows, absl::string_view feature) {
  const std::vector<int64_t>& splits = list.row_splits;
  if (static_cast<int64_t>(splits.size()) != rows + 1) {
    return absl::InvalidArgumentError(absl::StrCat("id-list feature '", feature, "' has ",
                                                   splits.size(), " row_splits, expected ",
                                                   rows + 1, " (one per example, plus one)"));
  }
  if (splits.front() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "id-list feature '", feature, "': row_splits start at ", splits.front(), ", not 0"));
  }
  for (size_t k = 1; k < splits.size(); ++k) {
    if (splits[k] < splits[k - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat("id-list feature '", feature, "': row_splits decrease at example ", k - 1,
                       " (", splits[k - 1], " then ", splits[k], ")"));
    }
  }
  if (splits.back() != static_cast<int64_t>(list.ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat("id-list feature '", feature,
                                                   "': row_splits end at ", splits.back(),
                                                   " but there are ", list.ids.size(), " ids"));
  }
  if (!list.weights.empty() && list.weights.size() != list.ids.size()) {
    return absl::InvalidArgumentError(absl::StrCat("id-list feature '", feature, "' has ",
                                                   list.weights.size(), " weights for ",
                                                   list.ids.size(), " ids"));
  }
  return absl::OkStatus();
}

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
  for (const auto& [name, list] : examples.id_lists) {
    TESSERA_RETURN_IF_ERROR(CheckIdList(list, n, name));
    if (examples.ids.count(name) > 0 || examples.dense.count(name) > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("feature name '", name, "' is used by both an id-list and another feature"));
    }
    schema.id_list_features.push_back(name);
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
  TESSERA_RETURN_IF_ERROR(CheckSameShape(examples.labels.shape(), Shape{n, 1}, "dataset labels"));
  return std::shared_ptr<const InMemoryExamples>(
      new InMemoryExamples(std::move(examples), std::move(schema)));
}

std::optional<LabelRange> InMemoryExamples::labels() const {
  if (columns_.size == 0) return std::nullopt;
  const float* y = columns_.labels.data();
  int64_t least = 0, greatest = 0, fraction = -1;
  for (int64_t k = 0; k < columns_.size; ++k) {
    if (y[k] < y[least]) least = k;
    if (y[k] > y[greatest]) greatest = k;
    if (fraction < 0 && y[k] != std::floor(y[k])) fraction = k;
  }
  LabelRange range;
  range.min = y[least];
  range.max = y[greatest];
  range.min_at = absl::StrCat("example ", least);
  range.max_at = absl::StrCat("example ", greatest);
  if (fraction >= 0) {
    range.fraction = y[fraction];
    range.fraction_at = absl::StrCat("example ", fraction);
  }
  return range;
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
  for (const auto& [name, list] : columns_.id_lists) {
    IdList& out = batch.id_lists[name];
    out.row_splits.resize(count + 1);
    const bool weighted = !list.weights.empty();
    for (int64_t k = 0; k < count; ++k) {
      const int64_t begin = list.row_splits[rows[k]], end = list.row_splits[rows[k] + 1];
      out.ids.insert(out.ids.end(), list.ids.begin() + begin, list.ids.begin() + end);
      if (weighted) {
        out.weights.insert(out.weights.end(), list.weights.begin() + begin,
                           list.weights.begin() + end);
      }
      out.row_splits[k + 1] = static_cast<int64_t>(out.ids.size());
    }
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
