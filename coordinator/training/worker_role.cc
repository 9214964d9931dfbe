#include "coordinator/training/worker_role.h"

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cluster/scheduling/worker_node.h"
#include "coordinator/training/describe_job.h"
#include "coordinator/training/distributed_evaluation.h"
#include "coordinator/training/train_step_closure.h"
#include "core/base/process.h"
#include "tessera/status.h"

namespace tessera {

absl::Status ServeAsWorker(const TrainingJob& job, const ParameterServerTrainingOptions& options,
                           int32_t task) {
  if (!options.cluster.has_value()) {
    return absl::InvalidArgumentError("--role=worker needs --cluster_spec");
  }
  TESSERA_ASSIGN_OR_RETURN(Model model, Model::Create(job.model));
  auto shared_model = std::make_shared<const Model>(std::move(model));
  WorkerNodeOptions node{*options.cluster, options.network, task, options.threads,
                         DescribeJob(job, options.seed)};
  std::printf("worker %d: connecting to %d PS and the coordinator at %s\n", task, options.ps,
              options.cluster->coordinator.ToString().c_str());
  std::fflush(stdout);
  absl::Status served = RunWorkerNode(node, [&](const VariableDirectory& directory)
                                 -> absl::StatusOr<std::shared_ptr<const FunctionRegistry>> {
    auto vars = std::make_shared<ModelVariables>();
    vars->model = shared_model;
    std::map<std::string, VariableHandle> handles = HandlesByName(directory);
    for (const ParamSpec& param : shared_model->spec().params) {
      auto it = handles.find(param.name);
      if (it == handles.end()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "the coordinator has no variable ", param.name,
            ": is it running the same driver with the same model flags?"));
      }
      vars->by_param.emplace(param.name, it->second);
    }
    vars->ps_nodes = directory.ps_nodes;  // a step's calls travel as one request per PS node
    TESSERA_RETURN_IF_ERROR(vars->Validate());
    auto registry = std::make_shared<FunctionRegistry>();
    TESSERA_RETURN_IF_ERROR(
        RegisterTrainStep(*registry, vars, job.train, job.batch_size, options.seed));
    TESSERA_RETURN_IF_ERROR(RegisterEvalStep(*registry, std::move(vars), job.test));
    return std::shared_ptr<const FunctionRegistry>(std::move(registry));
  });
  // What this process held at most: a worker holds batches and a step's rows, never a table.
  if (const std::optional<int64_t> peak = PeakResidentBytes(); peak.has_value()) {
    std::printf("worker %d: peak memory %.1f MiB\n", task, static_cast<double>(*peak) / (1 << 20));
    std::fflush(stdout);
  }
  return served;
}

}  // namespace tessera
