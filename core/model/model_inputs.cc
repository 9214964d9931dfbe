// What a batch must hold for a model (Model::CheckBatch, core/model/model.h): every input the
// spec names, with one row per example, and labels when a step needs them.
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/model/model.h"
#include "tessera/status.h"

namespace tessera {
namespace {

absl::Status CheckIdList(const IdList& list, int64_t batch_size, const std::string& name) {
  const std::string what = absl::StrCat("batch: id_list feature '", name, "'");
  if (list.num_rows() != batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", list.num_rows(),
                                                   " rows (row_splits of ", list.row_splits.size(),
                                                   " entries), expected ", batch_size));
  }
  if (list.row_splits.front() != 0 ||
      list.row_splits.back() != static_cast<int64_t>(list.ids.size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": row_splits must run from 0 to ",
                                                   list.ids.size(), " (its ids), got ",
                                                   list.row_splits.front(), " to ",
                                                   list.row_splits.back()));
  }
  for (size_t b = 0; b + 1 < list.row_splits.size(); ++b) {
    if (list.row_splits[b + 1] < list.row_splits[b]) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": row_splits decrease at example ", b));
    }
  }
  if (!list.weights.empty()) {
    if (list.weights.size() != list.ids.size()) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has ", list.weights.size(),
                                                     " weights for ", list.ids.size(), " ids"));
    }
    for (size_t k = 0; k < list.weights.size(); ++k) {
      if (!std::isfinite(list.weights[k])) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": weight ", k, " is not finite (", list.weights[k], ")"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Model::CheckBatch(const Batch& batch, bool need_labels) const {
  if (batch.size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("batch: size must be >= 1, got ", batch.size));
  }
  for (const InputSpec& in : spec_.inputs) {
    if (in.kind == InputKind::kIds) {
      auto it = batch.ids.find(in.name);
      if (it == batch.ids.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch: missing ids feature '", in.name, "'"));
      }
      if (static_cast<int64_t>(it->second.size()) != batch.size) {
        return absl::InvalidArgumentError(absl::StrCat("batch: ids feature '", in.name, "' has ",
                                                       it->second.size(), " ids, expected ",
                                                       batch.size));
      }
    } else if (in.kind == InputKind::kIdList) {
      auto it = batch.id_lists.find(in.name);
      if (it == batch.id_lists.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch: missing id_list feature '", in.name, "'"));
      }
      TESSERA_RETURN_IF_ERROR(CheckIdList(it->second, batch.size, in.name));
    } else {
      auto it = batch.dense.find(in.name);
      if (it == batch.dense.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch: missing dense feature '", in.name, "'"));
      }
      const Tensor& t = it->second;
      if (t.shape().rank() == 0 || t.rows() != batch.size || t.row_size() != in.width) {
        return absl::InvalidArgumentError(
            absl::StrCat("batch: dense feature '", in.name, "' has shape ", t.shape().ToString(),
                         ", expected [", batch.size, ", ", in.width, "]"));
      }
    }
  }
  if (need_labels && (batch.labels.shape().rank() == 0 || batch.labels.rows() != batch.size ||
                      batch.labels.row_size() != 1)) {
    return absl::InvalidArgumentError(absl::StrCat("batch: labels have shape ",
                                                   batch.labels.shape().ToString(), ", expected [",
                                                   batch.size, ", 1]"));
  }
  return absl::OkStatus();
}

}  // namespace tessera
