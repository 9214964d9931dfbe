#include "serving/metadata.h"

#include <vector>

#include "absl/status/status.h"

namespace tessera::serving {
namespace {

Json TensorInfo(const std::string& name, const char* dtype, const std::vector<int64_t>& shape) {
  Json dims = Json::array();
  for (int64_t dim : shape) dims.push_back({{"size", std::to_string(dim)}, {"name", ""}});
  return {{"dtype", dtype},
          {"name", name},
          {"tensor_shape", {{"dim", std::move(dims)}, {"unknown_rank", false}}}};
}

const char* MethodName(InstanceFormat::Method method) {
  switch (method) {
    case InstanceFormat::Method::kClassify:
      return "tensorflow/serving/classify";
    case InstanceFormat::Method::kRegress:
      return "tensorflow/serving/regress";
    case InstanceFormat::Method::kPredict:
      break;
  }
  return "tensorflow/serving/predict";
}

Json SignatureDef(const InstanceFormat& format) {
  Json inputs = Json::object();
  for (const InstanceFormat::Input& in : format.inputs) {
    // A text input's values are strings (an integer is taken as its digits).
    const char* ids = in.text ? "DT_STRING" : "DT_INT64";
    inputs[in.name] = in.kind == InputKind::kIds ? TensorInfo(in.name, ids, {-1})
                      : in.kind == InputKind::kIdList
                          ? TensorInfo(in.name, ids, {-1, -1})
                          : TensorInfo(in.name, "DT_FLOAT", {-1, in.width});
  }
  Json outputs = Json::object();
  for (const InstanceFormat::Output& out : format.outputs) {
    outputs[out.name] =
        TensorInfo(out.name, out.is_string() ? "DT_STRING" : "DT_FLOAT", {-1, out.width});
  }
  return {{"inputs", std::move(inputs)},
          {"outputs", std::move(outputs)},
          {"method_name", MethodName(format.method)}};
}

}  // namespace

Json ModelStatusJson(const std::vector<VersionStatus>& versions) {
  Json list = Json::array();
  for (const VersionStatus& v : versions) {
    list.push_back({{"version", std::to_string(v.version)},
                    {"state", v.state == VersionState::kAvailable ? "AVAILABLE" : "END"},
                    {"status",
                     {{"error_code", absl::StatusCodeToString(v.status.code())},
                      {"error_message", std::string(v.status.message())}}}});
  }
  return {{"model_version_status", std::move(list)}};
}

Json ModelMetadataJson(const std::string& name, int64_t version,
                       const std::map<std::string, InstanceFormat>& formats) {
  Json defs = Json::object();
  for (const auto& [signature, format] : formats) defs[signature] = SignatureDef(format);
  return {{"model_spec",
           {{"name", name}, {"signature_name", ""}, {"version", std::to_string(version)}}},
          {"metadata", {{"signature_def", {{"signature_def", std::move(defs)}}}}}};
}

}  // namespace tessera::serving
