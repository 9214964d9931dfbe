// ReadExampleRequest: the body of a `:classify` or `:regress` request (TF Serving's format) read
// into Batches, the way ReadPredictRequest reads a predict (Note [Bounded predict requests]):
//
//   {"signature_name": "...",                      optional
//    "context": {"user": 3},                       optional: features every example shares
//    "examples": [{"item": 7}, {"item": [2]}]}     each example's features
//
// A feature is one of the signature's inputs; its value is what instances.h takes, or that
// value as a list the way tf.Example holds features: an ids input an integer or a list of one
// integer, a dense input a list of `width` numbers (or one number when `width` is 1). A feature
// is in "context" or in an example, not both.
//
// The signature is "signature_name", which must be of the request's method; without one,
// "serving_default" when it is of that method, else the model's own "classification" or
// "regression" signature (classify_signatures.h).
//
//   TESSERA_ASSIGN_OR_RETURN(ExampleRequest request,
//                    ReadExampleRequest(body, formats, InstanceFormat::Method::kClassify, limits));
//
// Errors (the first that applies): InvalidArgument "malformed JSON: ..."; InvalidArgument for a
// body that is not an object, an unknown field, a "signature_name" that is not a string, no
// "examples", "examples" that is not a non-empty array, a "context" that is not an object or
// holds more than any example could; an unknown signature or one of another method, or no
// signature of the method; a bad context feature ("context: ..."); ResourceExhausted for more
// than `max_instances` examples; InvalidArgument "example I: ..." for a bad example.
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "serving/instances.h"
#include "serving/predict_request.h"
#include "tessera/data.h"

namespace tessera::serving {

struct ExampleRequest {
  const InstanceFormat* format = nullptr;  // the signature's, an entry of `formats`
  std::vector<Batch> batches;              // the examples in order, kInstancesPerBatch a batch
  int64_t size = 0;                        // examples in all
};

// `method` is kClassify or kRegress.
absl::StatusOr<ExampleRequest> ReadExampleRequest(
    absl::string_view body, const std::map<std::string, InstanceFormat>& formats,
    InstanceFormat::Method method, const PredictLimits& limits);

// "classify", "regress" or "predict".
const char* MethodName(InstanceFormat::Method method);

}  // namespace tessera::serving
