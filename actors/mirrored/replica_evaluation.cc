// Evaluation on a replica: one test batch's forward pass, its loss and what the driver's
// metrics need (labels, logits).
#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "actors/base/error.h"
#include "actors/mirrored/internal/replica_state.h"
#include "core/training/evaluation.h"

namespace tessera::mirrored_internal {

caf::result<ClosureValues> EvaluateTestBatch(Self self, int64_t index) {
  ReplicaState& s = self->state;
  if (index < 0) {
    return StatusToError(absl::OutOfRangeError(absl::StrCat("test batch ", index)));
  }
  ClosureValues out;
  if (index >= (s.options.test.size() + kEvalBatchSize - 1) / kEvalBatchSize) {
    out.Set("examples", int64_t{0});  // past the test set: nothing
    return out;
  }
  const int64_t begin = index * kEvalBatchSize;
  const int64_t count = std::min(kEvalBatchSize, s.options.test.size() - begin);
  absl::StatusOr<Batch> batch = s.options.test.Slice(begin, count);
  if (!batch.ok()) return StatusToError(batch.status());
  absl::Status forward = s.replica->trainer().Forward(*batch, s.eval_result);
  if (!forward.ok()) return StatusToError(forward);
  if (!s.eval_result.loss.has_value()) {
    return StatusToError(absl::InvalidArgumentError("the test set has no labels"));
  }
  out.Set("loss", static_cast<double>(*s.eval_result.loss));
  out.Set("examples", count);
  out.Set("labels", Tensor::Copy(batch->labels.view()));
  EvalAccumulator names(s.replica->trainer().model());
  if (const Tensor* logits = names.Logits(s.eval_result.outputs); logits != nullptr) {
    out.Set("logits", Tensor::Copy(logits->view()));
  }
  return out;
}

}  // namespace tessera::mirrored_internal
