// worker_step: the CPU a distributed worker spends on one recsys step's model work, without the
// actors: RowsNeeded, assembling the gathered rows, ForwardBackward. Two ways, interleaved in one
// run on the same batches:
//   fresh   — a fresh StepWorkspace and StepResult per step, RowsNeeded on its own (the worker
//             before the lookup plan was carried), so ForwardBackward sorts the ids again;
//   carried — one reused workspace and result; RowsNeeded leaves its plan in the workspace and
//             ForwardBackward checks it linearly (Note [Reused lookup plans], core/model/lookup_plan.cc).
// Single-threaded, so the figure is far less sensitive to a busy host than train_throughput.
//
//   worker_step --rounds=7 --steps=400
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_join.h"
#include "bench/internal/bench_main.h"
#include "core/training/local_trainer.h"
#include "tessera/data.h"
#include "tessera/status.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"

ABSL_FLAG(int32_t, rounds, 7, "rounds of (fresh, carried)");
ABSL_FLAG(int64_t, steps, 400, "steps per round");
ABSL_FLAG(int64_t, batch_size, 512, "examples per step");

namespace tessera {
namespace {

using bench::Median;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

absl::Status Run(int argc, char** argv) {
  std::printf("command: %s\n", absl::StrJoin(argv, argv + argc, " ").c_str());
  const int64_t steps = absl::GetFlag(FLAGS_steps);
  const int64_t batch_size = absl::GetFlag(FLAGS_batch_size);
  RecsysConfig data_config;
  data_config.num_train = steps * batch_size;
  data_config.num_test = 1000;
  TESSERA_ASSIGN_OR_RETURN(RecsysData data, GenerateRecsysData(data_config));
  TESSERA_ASSIGN_OR_RETURN(ModelSpec spec, RecsysModelSpec({}));
  TESSERA_ASSIGN_OR_RETURN(
      LocalTrainer trainer,
      LocalTrainer::Create(spec, OptimizerSpec{"adagrad", {{"learning_rate", 0.1}}}));
  const Model& model = trainer.model();
  TESSERA_ASSIGN_OR_RETURN(BatchStream stream,
                           BatchStream::Create(data.train, batch_size, true, 1));
  std::vector<Batch> batches;
  for (int64_t s = 0; s < steps; ++s) {
    TESSERA_ASSIGN_OR_RETURN(Batch b, stream.Get(s));
    batches.push_back(std::move(b));
  }
  // One step as a worker runs it; `ws` / `result` null: fresh ones, else reused.
  std::map<std::string, Tensor> rows;
  auto step = [&](const Batch& batch, StepWorkspace* ws, StepResult* result) -> absl::Status {
    StepWorkspace fresh_ws;
    StepResult fresh_result;
    absl::StatusOr<std::map<std::string, SortedIds>> needed =
        ws != nullptr ? model.RowsNeeded(batch, *ws) : model.RowsNeeded(batch);
    TESSERA_RETURN_IF_ERROR(needed.status());
    StepParams params;
    for (const ParamSpec& p : model.spec().params) {
      TESSERA_ASSIGN_OR_RETURN(const Tensor* value, trainer.variable(p.name));
      auto ids = needed->find(p.name);
      if (ids == needed->end()) {
        params.full[p.name] = value->view();
        continue;
      }
      Tensor& gathered = rows[p.name];  // what the shards' gather replies would hold
      gathered = Tensor(value->shape().WithRows(static_cast<int64_t>(ids->second.size())));
      for (size_t k = 0; k < ids->second.size(); ++k) {
        std::copy(value->row(ids->second[k]).begin(), value->row(ids->second[k]).end(),
                  gathered.row(static_cast<int64_t>(k)).begin());
      }
      params.gathered[p.name] = EmbeddingRows{ids->second, {gathered.view()}};
    }
    return model.ForwardBackward(batch, params, ws != nullptr ? *ws : fresh_ws,
                                 result != nullptr ? *result : fresh_result);
  };
  StepWorkspace carried_ws;
  StepResult carried_result;
  std::vector<double> fresh_us, carried_us;
  for (int32_t r = 0; r < absl::GetFlag(FLAGS_rounds); ++r) {
    double start = Now();
    for (const Batch& b : batches) TESSERA_RETURN_IF_ERROR(step(b, nullptr, nullptr));
    fresh_us.push_back((Now() - start) / steps * 1e6);
    start = Now();
    for (const Batch& b : batches) TESSERA_RETURN_IF_ERROR(step(b, &carried_ws, &carried_result));
    carried_us.push_back((Now() - start) / steps * 1e6);
    std::printf("round %d: fresh %.1f us/step, carried %.1f us/step (%.2fx)\n", r,
                fresh_us.back(), carried_us.back(), fresh_us.back() / carried_us.back());
  }
  std::printf("median: fresh %.1f us/step, carried %.1f us/step: %.2fx\n", Median(fresh_us),
              Median(carried_us), Median(fresh_us) / Median(carried_us));
  return absl::OkStatus();
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  return tessera::bench::Main("worker_step", argc, argv, tessera::Run);
}
