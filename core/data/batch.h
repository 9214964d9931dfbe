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
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/base/tensor.h"

namespace tessera {

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

}  // namespace tessera
