#include "actors/train_step.h"

#include "absl/strings/str_cat.h"

namespace tessera {
namespace internal {
namespace {

// Enough for the steps one thread has in flight at once in practice (workers x closures per
// worker, spread over the threads); more are freed.
constexpr size_t kMaxCachedScratch = 4;

std::vector<std::unique_ptr<StepScratch>>& ThreadScratch() {
  thread_local std::vector<std::unique_ptr<StepScratch>> cache;
  return cache;
}

}  // namespace

std::unique_ptr<StepScratch> AcquireStepScratch() {
  std::vector<std::unique_ptr<StepScratch>>& cache = ThreadScratch();
  if (cache.empty()) return std::make_unique<StepScratch>();
  std::unique_ptr<StepScratch> scratch = std::move(cache.back());
  cache.pop_back();
  return scratch;
}

void ReleaseStepScratch(std::unique_ptr<StepScratch> scratch) {
  std::vector<std::unique_ptr<StepScratch>>& cache = ThreadScratch();
  if (scratch != nullptr && cache.size() < kMaxCachedScratch) cache.push_back(std::move(scratch));
}

}  // namespace internal

absl::Status ModelVariables::Validate() const {
  if (!model) return absl::InvalidArgumentError("ModelVariables: no model");
  for (const ParamSpec& param : model->spec().params) {
    auto it = by_param.find(param.name);
    if (it == by_param.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ModelVariables: parameter ", param.name, " has no variable"));
    }
    if (it->second.shape != param.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ModelVariables: variable ", it->second.name, " has shape ",
          it->second.shape.ToString(), " but parameter ", param.name, " needs ",
          param.shape.ToString()));
    }
  }
  if (by_param.size() != model->spec().params.size()) {
    return absl::InvalidArgumentError("ModelVariables: a variable for an unknown parameter");
  }
  return absl::OkStatus();
}

}  // namespace tessera
