// The description of a TrainingJob that a networked coordinator and its workers compare at join
// (core/training/job_description.h): everything that must agree for the run's figures to mean
// anything — the schedule (batch size, steps, seed), the data (example counts), the optimizer, the
// partitioner and the model (every input, parameter, node and the loss). A worker started with
// other flags is refused with the differences named, on both sides.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>

#include "coordinator/training/training_run.h"
#include "core/training/job_description.h"

namespace tessera {

JobDescription DescribeJob(const TrainingJob& job, uint64_t seed);

}  // namespace tessera
