#include "tessera/cluster.h"

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tessera/status.h"

namespace tessera {
namespace {

// The JSON name of each task type, as TF_CONFIG writes it (the coordinator is TF's "chief").
const char* TypeName(TaskType type) {
  switch (type) {
    case TaskType::kCoordinator:
      return "chief";
    case TaskType::kWorker:
      return "worker";
    case TaskType::kPs:
      return "ps";
    case TaskType::kPsStandby:
      return "ps_standby";
  }
  return "?";
}

absl::StatusOr<std::vector<NodeAddress>> AddressList(const nlohmann::json& cluster,
                                                     const char* key, absl::string_view source) {
  auto it = cluster.find(key);
  if (it == cluster.end()) return std::vector<NodeAddress>{};
  if (!it->is_array()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": \"", key, "\" must be a list of \"host:port\" strings"));
  }
  std::vector<NodeAddress> out;
  for (const nlohmann::json& entry : *it) {
    if (!entry.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": \"", key, "\" holds ", entry.dump(), ", not a string"));
    }
    absl::StatusOr<NodeAddress> address = ParseNodeAddress(entry.get<std::string>());
    if (!address.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": \"", key, "\": ", address.status().message()));
    }
    out.push_back(*std::move(address));
  }
  return out;
}

absl::StatusOr<ClusterSpec> ParseCluster(const nlohmann::json& cluster,
                                         absl::string_view source) {
  if (!cluster.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": \"cluster\" must be an object of address lists"));
  }
  ClusterSpec spec;
  spec.source = std::string(source);
  TESSERA_ASSIGN_OR_RETURN(spec.ps, AddressList(cluster, "ps", source));
  TESSERA_ASSIGN_OR_RETURN(spec.workers, AddressList(cluster, "worker", source));
  TESSERA_ASSIGN_OR_RETURN(spec.ps_standby, AddressList(cluster, "ps_standby", source));
  TESSERA_ASSIGN_OR_RETURN(std::vector<NodeAddress> coordinator,
                           AddressList(cluster, "coordinator", source));
  TESSERA_ASSIGN_OR_RETURN(std::vector<NodeAddress> chief, AddressList(cluster, "chief", source));
  coordinator.insert(coordinator.end(), chief.begin(), chief.end());
  if (spec.workers.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no \"worker\" address"));
  }
  if (coordinator.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": needs exactly one \"chief\" (or \"coordinator\") address, has ",
                     coordinator.size()));
  }
  spec.coordinator = coordinator[0];
  return spec;
}

absl::StatusOr<ClusterTask> ParseTask(const nlohmann::json& task, absl::string_view source) {
  if (!task.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": \"task\" must be an object like {\"type\": \"worker\", "
                             "\"index\": 0}, not ",
                     task.dump()));
  }
  auto type = task.find("type");
  if (type == task.end() || !type->is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": \"task\" ", task.dump(), " has no \"type\" (chief, worker, ps or ps_standby)"));
  }
  const std::string name = type->get<std::string>();
  ClusterTask out;
  if (name == "chief" || name == "coordinator") {
    out.type = TaskType::kCoordinator;
  } else if (name == "worker") {
    out.type = TaskType::kWorker;
  } else if (name == "ps") {
    out.type = TaskType::kPs;
  } else if (name == "ps_standby") {
    out.type = TaskType::kPsStandby;
  } else if (name == "evaluator") {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": task type \"evaluator\" has no Tessera process: the workers evaluate the "
                "test set (--eval_every)"));
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": unknown task type \"", name,
                     "\" (known: chief or coordinator, worker, ps, ps_standby)"));
  }
  if (auto index = task.find("index"); index != task.end()) {
    int64_t value = -1;
    if (index->is_number_integer()) {
      value = index->get<int64_t>();
    } else if (index->is_string()) {
      // TF writes a number; a string of digits ("1", from a template) is taken too.
      if (!absl::SimpleAtoi(index->get<std::string>(), &value)) value = -1;
    }
    if (value < 0 || value > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": the task's \"index\" must be an integer >= 0, not ", index->dump()));
    }
    out.index = static_cast<int32_t>(value);
  }
  return out;
}

absl::StatusOr<ClusterConfig> ReadSpecFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the cluster spec ", path));
  std::stringstream text;
  text << in.rdbuf();
  return ParseClusterConfig(text.str(), absl::StrCat("the cluster spec ", path));
}

}  // namespace

std::string NodeAddress::ToString() const { return absl::StrCat(host, ":", port); }

absl::StatusOr<NodeAddress> ParseNodeAddress(absl::string_view text) {
  const size_t colon = text.rfind(':');
  int port = 0;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(text.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", text, "\" is not a \"host:port\" address with a port in 1..65535"));
  }
  return NodeAddress{std::string(text.substr(0, colon)), static_cast<uint16_t>(port)};
}

std::string ClusterTask::ToString() const {
  return absl::StrCat("{\"type\": \"", TypeName(type), "\", \"index\": ", index, "}");
}

std::string CoordinatorPortAdvice(const ClusterSpec& cluster) {
  return absl::StrCat("change the coordinator's (\"chief\") address ",
                      cluster.coordinator.ToString(), " in ", cluster.source);
}

absl::Status CheckTaskInCluster(const ClusterTask& task, const ClusterSpec& cluster,
                                absl::string_view source) {
  size_t size = 1;  // one coordinator
  const char* list = "chief";
  switch (task.type) {
    case TaskType::kCoordinator:
      break;
    case TaskType::kWorker:
      size = cluster.workers.size();
      list = "worker";
      break;
    case TaskType::kPs:
      size = cluster.ps.size();
      list = "ps";
      break;
    case TaskType::kPsStandby:
      size = cluster.ps_standby.size();
      list = "ps_standby";
      break;
  }
  if (static_cast<size_t>(task.index) < size) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": task ", task.ToString(), " is not in the cluster: ", cluster.source, " has ",
      size, " \"", list, "\" address", size == 1 ? "" : "es"));
}

absl::StatusOr<ClusterConfig> ParseClusterConfig(absl::string_view json, absl::string_view source,
                                                 bool require_cluster) {
  nlohmann::json doc;
  try {  // the parser's exception carries the error and its position; it never escapes
    doc = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::parse_error& e) {
    // e.what(): "[json.exception.parse_error.101] parse error at line 1, column 28: ..."
    absl::string_view what = e.what();
    if (const size_t start = what.find("parse error"); start != absl::string_view::npos) {
      what.remove_prefix(start);
    }
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON: ", what));
  }
  if (!doc.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object but ",
                                                   doc.is_array() ? "an " : "a ",
                                                   doc.type_name()));
  }
  ClusterConfig config;
  // TF writes an empty "cluster" for a job of one process: no cluster, where none is required.
  auto cluster = doc.find("cluster");
  if (cluster != doc.end() && !(cluster->is_object() && cluster->empty() && !require_cluster)) {
    TESSERA_ASSIGN_OR_RETURN(config.cluster, ParseCluster(*cluster, source));
  } else if (require_cluster) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no \"cluster\" object"));
  }
  if (auto task = doc.find("task"); task != doc.end() && !task->empty()) {
    TESSERA_ASSIGN_OR_RETURN(config.task, ParseTask(*task, source));
    config.task_source = std::string(source);
    if (config.cluster.has_value()) {
      TESSERA_RETURN_IF_ERROR(CheckTaskInCluster(*config.task, *config.cluster, source));
    }
  }
  return config;
}

std::optional<std::string> TfConfigFromEnvironment() {
  const char* value = std::getenv("TF_CONFIG");
  if (value == nullptr || absl::StripAsciiWhitespace(value).empty()) return std::nullopt;
  return std::string(value);
}

absl::StatusOr<ClusterConfig> ResolveClusterConfig(const ClusterSources& sources) {
  ClusterConfig tf;
  if (sources.tf_config.has_value()) {
    TESSERA_ASSIGN_OR_RETURN(tf, ParseClusterConfig(*sources.tf_config, "TF_CONFIG",
                                                    /*require_cluster=*/false));
  }
  if (sources.spec_path.empty()) {
    if (tf.task.has_value() && !tf.cluster.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TF_CONFIG: task ", tf.task->ToString(),
          " but no \"cluster\" (in TF_CONFIG or a --cluster_spec file) to find it in"));
    }
    return tf;
  }
  TESSERA_ASSIGN_OR_RETURN(ClusterConfig resolved, ReadSpecFile(sources.spec_path));
  if (!resolved.task.has_value() && tf.task.has_value()) {
    resolved.task = tf.task;
    resolved.task_source = tf.task_source;
    TESSERA_RETURN_IF_ERROR(CheckTaskInCluster(*resolved.task, *resolved.cluster, "TF_CONFIG"));
  }
  return resolved;
}

}  // namespace tessera
