// TensorFlow Serving's REST answers about a model (rather than its predictions), so that TF
// Serving clients and dashboards can talk to `tessera serve` unchanged:
//
//   GET /v1/models/NAME            ModelStatusJson
//     {"model_version_status": [{"version": "42", "state": "AVAILABLE",
//                                "status": {"error_code": "OK", "error_message": ""}}]}
//   GET /v1/models/NAME/metadata   ModelMetadataJson
//     {"model_spec": {"name": "recsys", "signature_name": "", "version": "42"},
//      "metadata": {"signature_def": {"signature_def": {"serving_default": {
//          "inputs": {"user": {"dtype": "DT_INT64", "name": "user",
//                              "tensor_shape": {"dim": [{"size": "-1", "name": ""}],
//                                               "unknown_rank": false}}, ...},
//          "outputs": {...}, "method_name": "tensorflow/serving/predict"}}}}}
//
// Versions are the model's training step; int64 fields are JSON strings, as in TF's proto JSON.
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "cli/internal/instances.h"
#include "cli/internal/json.h"

namespace tessera::cli {

Json ModelStatusJson(int64_t version);

// `formats` by signature name (ModelInstanceFormats).
Json ModelMetadataJson(const std::string& name, int64_t version,
                       const std::map<std::string, InstanceFormat>& formats);

}  // namespace tessera::cli
