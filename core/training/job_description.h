// JobDescription: a training job as named, printable facts ("batch_size" -> "512", "parameter
// user_embedding" -> "[100000, 32] random_uniform(...)"), so that two processes that must run the
// same job — a networked coordinator and each worker that joins it — can compare what they were
// started with and name every difference, instead of training inconsistently.
// coordinator/training/describe_job.h builds one from a TrainingJob.
//
// Example:
//   const std::string differences = JobDifferences(coordinator_job, worker_job);
//   if (!differences.empty()) return absl::InvalidArgumentError(differences);
//   // "batch_size: the coordinator's 512, this worker's 256; ..."
//
// Thread-safety: values and pure functions.
#pragma once

#include <map>
#include <string>

namespace tessera {

using JobDescription = std::map<std::string, std::string>;

// "" when `coordinator` and `worker` hold the same facts; otherwise every fact that differs or is
// missing on one side, in key order, as "key: the coordinator's A, this worker's B" joined by
// "; " (at most 8, then "and N more"). Values longer than 120 characters are shortened with
// "..." in the message (the comparison uses them whole).
std::string JobDifferences(const JobDescription& coordinator, const JobDescription& worker);

}  // namespace tessera
