#include "core/variables/indexed_slices.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"

namespace tessera {

SparseRows::SparseRows(IndexedSlices own) : indices_(std::move(own.indices)) {
  shape_ = own.values.shape();
  source_ = std::make_shared<const Tensor>(std::move(own.values));
  data_ = source_->data();
}

SparseRows SparseRows::Share(Ids indices, std::shared_ptr<const Tensor> source, int64_t begin) {
  SparseRows rows;
  rows.shape_ = source->shape().WithRows(static_cast<int64_t>(indices.size()));
  rows.data_ = source->data() + begin * source->row_size();
  rows.indices_ = std::move(indices);
  rows.source_ = std::move(source);
  return rows;
}

absl::Status ValidateIndexedRows(absl::Span<const int64_t> indices, ConstTensorView values,
                                 int64_t row_limit, int64_t row_size) {
  if (values.shape().rank() == 0) {
    return absl::InvalidArgumentError("indexed rows: values must have rank >= 1, got a scalar");
  }
  if (values.rows() != static_cast<int64_t>(indices.size())) {
    return absl::InvalidArgumentError(absl::StrCat("indexed rows: ", indices.size(),
                                                   " indices but values has ", values.rows(),
                                                   " rows (shape ", values.shape().ToString(), ")"));
  }
  if (values.row_size() != row_size) {
    return absl::InvalidArgumentError(absl::StrCat("indexed rows: rows have ", values.row_size(),
                                                   " elements (shape ", values.shape().ToString(),
                                                   "), expected ", row_size));
  }
  for (size_t i = 0; i < indices.size(); ++i) {
    if (indices[i] < 0 || indices[i] >= row_limit) {
      return absl::InvalidArgumentError(absl::StrCat("indexed rows: index ", indices[i],
                                                     " at position ", i, " is out of range [0, ",
                                                     row_limit, ")"));
    }
  }
  return absl::OkStatus();
}

bool IsSortedUnique(absl::Span<const int64_t> ids) {
  for (size_t k = 1; k < ids.size(); ++k) {
    if (ids[k] <= ids[k - 1]) return false;
  }
  return true;
}

IndexedSlices SumDuplicates(absl::Span<const int64_t> indices, ConstTensorView values) {
  const int64_t n = static_cast<int64_t>(indices.size());
  const int64_t width = values.row_size();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return indices[a] < indices[b]; });
  int64_t unique = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (k == 0 || indices[order[k]] != indices[order[k - 1]]) ++unique;
  }
  IndexedSlices out;
  out.indices.reserve(unique);
  out.values = Tensor(values.shape().WithRows(unique));
  float* dst = out.values.data() - width;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t src_row = order[k];
    if (k == 0 || indices[src_row] != indices[order[k - 1]]) {
      out.indices.push_back(indices[src_row]);
      dst += width;
    }
    const float* src = values.data() + src_row * width;
    for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
  }
  return out;
}

}  // namespace tessera
