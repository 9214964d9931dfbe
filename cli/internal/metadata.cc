#include "cli/internal/metadata.h"

#include <vector>

namespace tessera::cli {
namespace {

Json TensorInfo(const std::string& name, const char* dtype, const std::vector<int64_t>& shape) {
  Json dims = Json::array();
  for (int64_t dim : shape) dims.push_back({{"size", std::to_string(dim)}, {"name", ""}});
  return {{"dtype", dtype},
          {"name", name},
          {"tensor_shape", {{"dim", std::move(dims)}, {"unknown_rank", false}}}};
}

Json SignatureDef(const InstanceFormat& format) {
  Json inputs = Json::object();
  for (const InstanceFormat::Input& in : format.inputs) {
    inputs[in.name] = in.kind == InputKind::kIds ? TensorInfo(in.name, "DT_INT64", {-1})
                                                 : TensorInfo(in.name, "DT_FLOAT", {-1, in.width});
  }
  Json outputs = Json::object();
  for (const InstanceFormat::Output& out : format.outputs) {
    outputs[out.name] = TensorInfo(out.name, "DT_FLOAT", {-1, out.width});
  }
  return {{"inputs", std::move(inputs)},
          {"outputs", std::move(outputs)},
          {"method_name", "tensorflow/serving/predict"}};
}

}  // namespace

Json ModelStatusJson(int64_t version) {
  Json status = {{"version", std::to_string(version)},
                 {"state", "AVAILABLE"},
                 {"status", {{"error_code", "OK"}, {"error_message", ""}}}};
  return {{"model_version_status", Json::array({std::move(status)})}};
}

Json ModelMetadataJson(const std::string& name, int64_t version,
                       const std::map<std::string, InstanceFormat>& formats) {
  Json defs = Json::object();
  for (const auto& [signature, format] : formats) defs[signature] = SignatureDef(format);
  return {{"model_spec",
           {{"name", name}, {"signature_name", ""}, {"version", std::to_string(version)}}},
          {"metadata", {{"signature_def", {{"signature_def", std::move(defs)}}}}}};
}

}  // namespace tessera::cli
