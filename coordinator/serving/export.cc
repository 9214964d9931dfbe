#include "coordinator/serving/export.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/serving/exported_model.h"
#include "schema/serving/model_io.h"
#include "tessera/status.h"

namespace tessera {

namespace {

// An export's rows, read from the variables' shards as the writer asks for them: a range is one
// Slice (a gather of those rows on the shards that hold them), so the coordinator holds one range
// of a few MiB at a time, never a whole variable.
class ShardRowSource final : public VariableRowSource {
 public:
  explicit ShardRowSource(const ParameterServerStrategy& strategy) : strategy_(strategy) {}

  absl::StatusOr<ConstTensorView> Rows(const std::string& name, int64_t begin,
                                       int64_t end) override {
    auto it = strategy_.variables().find(name);
    if (it == strategy_.variables().end()) {
      return absl::NotFoundError(absl::StrCat("no variable for parameter ", name));
    }
    const ShardedVariable& v = it->second;
    absl::StatusOr<Tensor> rows = v.shape().rank() == 0 ? v.Read() : v.Slice(begin, end);
    if (!rows.ok()) {
      return Annotate(rows.status(),
                      absl::StrCat("exporting rows [", begin, ", ", end, ") of ", name));
    }
    rows_ = *std::move(rows);
    return rows_.view();
  }

 private:
  const ParameterServerStrategy& strategy_;
  Tensor rows_;  // the last range read
};

}  // namespace

absl::Status ExportModel(const ParameterServerStrategy& strategy, const Model& model,
                         const std::string& dir, int64_t global_step, Env* env,
                         std::vector<std::string> text_inputs) {
  ModelDescription exported;
  exported.spec = model.spec();
  exported.text_inputs = std::move(text_inputs);
  TESSERA_ASSIGN_OR_RETURN(Signature serving, ServingSignature(model.spec()));
  exported.signatures = {std::move(serving)};
  exported.step = global_step;
  for (const ParamSpec& param : model.spec().params) {
    if (strategy.variables().count(param.name) == 0) {
      return absl::NotFoundError(absl::StrCat("no variable for parameter ", param.name));
    }
  }
  // A failed export leaves nothing behind: no model file (the writer's temporary file is
  // removed), and no directory it created.
  const bool existed = env->FileExists(dir);
  TESSERA_RETURN_IF_ERROR(env->CreateDirectories(dir));
  ShardRowSource rows(strategy);
  absl::Status status = WriteExportedModel(dir, exported, rows, env);
  if (!status.ok() && !existed) env->RemoveTree(dir).IgnoreError();
  return status;
}

}  // namespace tessera
