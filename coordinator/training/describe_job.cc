#include "coordinator/training/describe_job.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tessera {
namespace {

template <class Map>
std::string Entries(const Map& map) {
  return absl::StrJoin(map, ", ", [](std::string* out, const auto& entry) {
    absl::StrAppend(out, entry.first, "=", entry.second);
  });
}

}  // namespace

JobDescription DescribeJob(const TrainingJob& job, uint64_t seed) {
  JobDescription d;
  d["workload"] = job.name;
  d["batch_size"] = absl::StrCat(job.batch_size);
  d["steps"] = absl::StrCat(job.steps);
  d["seed"] = absl::StrCat(seed);
  d["train_examples"] = absl::StrCat(job.train.size());
  d["test_examples"] = absl::StrCat(job.test.size());
  d["optimizer"] = absl::StrCat(job.optimizer.name, "(", Entries(job.optimizer.params), ")");
  d["partitioner"] = job.partitioner.description();
  const ModelSpec& model = job.model;
  d["model"] = model.name;
  for (const InputSpec& input : model.inputs) {
    d["input " + input.name] =
        absl::StrCat(InputKindName(input.kind), " width ", input.width,
                     input.hash_buckets > 0 ? absl::StrCat(" hashed into ", input.hash_buckets)
                                            : "");
  }
  for (const ParamSpec& param : model.params) {
    d["parameter " + param.name] = absl::StrCat(
        param.shape.ToString(), " ", param.initializer.name, "(",
        Entries(param.initializer.params), ") seed ", param.initializer.seed,
        param.trainable ? "" : " frozen", param.partitioned ? " partitioned" : "");
  }
  for (const NodeSpec& node : model.nodes) {
    d["node " + node.name] = absl::StrCat(
        node.op, "(", absl::StrJoin(node.inputs, ", "), "; ", absl::StrJoin(node.params, ", "),
        "; ", Entries(node.attrs), "; ", Entries(node.string_attrs), ")");
  }
  for (const auto& [name, node] : model.outputs) d["output " + name] = node;
  d["loss"] = absl::StrCat(model.loss.kind, "(", model.loss.logits, ")");
  return d;
}

}  // namespace tessera
