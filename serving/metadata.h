// TensorFlow Serving's REST answers about a model (rather than its predictions), so that TF
// Serving clients and dashboards can talk to `tessera serve` unchanged:
//
//   GET /v1/models/NAME[/versions/V]   ModelStatusJson: every version the server knows of (or V)
//     {"model_version_status": [{"version": "42", "state": "AVAILABLE",
//                                "status": {"error_code": "OK", "error_message": ""}},
//                               {"version": "43", "state": "END",
//                                "status": {"error_code": "DATA_LOSS", "error_message": "..."}}]}
//   GET /v1/models/NAME[/versions/V]/metadata   ModelMetadataJson: one version's signatures
//     {"model_spec": {"name": "recsys", "signature_name": "", "version": "42"},
//      "metadata": {"signature_def": {"signature_def": {"serving_default": {
//          "inputs": {"user": {"dtype": "DT_INT64", "name": "user",
//                              "tensor_shape": {"dim": [{"size": "-1", "name": ""}],
//                                               "unknown_rank": false}}, ...},
//          "outputs": {...}, "method_name": "tensorflow/serving/predict"}}}}}
//
// int64 fields are JSON strings, as in TF's proto JSON; a computed signature
// (classify_signatures.h) shows its own method_name, and its labels DT_STRING.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "serving/instances.h"
#include "serving/json.h"

namespace tessera::serving {

// A version's state, TF Serving's (which also has START, LOADING and UNLOADING, moments that
// requests never see here: a version is published once loaded and dropped once unloaded).
enum class VersionState { kAvailable, kEnd };

struct VersionStatus {
  int64_t version = 0;
  VersionState state = VersionState::kAvailable;
  // kEnd: OK when the version was unloaded (removed, or superseded under the version policy),
  // the error when it could not be loaded.
  absl::Status status;
};

// `versions` in the order to show them.
Json ModelStatusJson(const std::vector<VersionStatus>& versions);

// `formats` by signature name (ModelInstanceFormats).
Json ModelMetadataJson(const std::string& name, int64_t version,
                       const std::map<std::string, InstanceFormat>& formats);

}  // namespace tessera::serving
