// The recsys reference workload as a TrainingJob, the way the throughput benchmarks train it
// (train_throughput, dashboard_overhead): U=100k, I=10k, D=32, hidden 64, Adagrad lr 0.1 with
// PyTorch's initial accumulator 0, one pass over `train_examples` synthetic clicks, no test set
// (the figure is the training loop's alone).
//
//   TESSERA_ASSIGN_OR_RETURN(TrainingJob job, RecsysThroughputJob(1000000, 512, "fixed:4"));
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "coordinator/training/training_run.h"
#include "tessera/partitioner.h"
#include "tessera/status.h"
#include "tessera/workloads/recsys_data.h"
#include "tessera/workloads/reference_models.h"

namespace tessera::bench {

inline absl::StatusOr<TrainingJob> RecsysThroughputJob(int64_t train_examples,
                                                       int64_t batch_size,
                                                       const std::string& partitioner) {
  RecsysConfig data_config;
  data_config.num_train = train_examples;
  data_config.num_test = 1000;
  TESSERA_ASSIGN_OR_RETURN(RecsysData data, GenerateRecsysData(data_config));
  TrainingJob job;
  job.name = "recsys";
  TESSERA_ASSIGN_OR_RETURN(job.model, RecsysModelSpec({}));
  job.optimizer = {"adagrad", {{"learning_rate", 0.1}, {"initial_accumulator_value", 0.0}}};
  job.train = data.train;
  job.batch_size = batch_size;
  job.steps = (data.train.size() + batch_size - 1) / batch_size;
  TESSERA_ASSIGN_OR_RETURN(job.partitioner, ParsePartitioner(partitioner));
  return job;
}

}  // namespace tessera::bench
