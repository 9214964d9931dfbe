// ReadPredictRequest: the body of a `:predict` request ({"instances": [...], "signature_name":
// "..."}, model_service.h) read straight into a Batch, without a JSON tree of the whole request.
//
//   ASSIGN_OR_RETURN(PredictRequest request, ReadPredictRequest(body, formats, limits));
//   for (const Batch& batch : request.batches) {
//     ASSIGN_OR_RETURN(auto outputs, predictor.Predict(batch));
//     ...
//   }
//
// Note [Bounded predict requests]: a JSON tree costs 16 bytes and more per value (and an object
// a few hundred), so parsing a whole request into one made a 50 MB body cost gigabytes. The body
// is read twice with nlohmann's SAX parser instead: once to check its shape and count the
// instances (nothing is built), once to build each instance's small tree in turn, hand it to a
// BatchBuilder (reserved for the count) and drop it. What a request holds is then its body, its
// batches (4 bytes a number, 8 an id: at most a few times the body, whose numbers take 2 bytes or
// more) and one instance; an instance holding far more values than its signature takes is refused
// as soon as it does. The instances come in batches of at most kInstancesPerBatch, so that a
// Predictor's activations and a batch's predictions are only ever alive for that many; what grows
// with the instances is the reply, and `max_instances` bounds it. (nlohmann's lexer also keeps the
// text of the token it reads, with the whitespace before it: a body of one huge token or run of
// spaces costs up to twice its size more while it is read.)
//
// Errors (the first that applies): InvalidArgument "malformed JSON: ..." (nlohmann's line and
// column); InvalidArgument for a body that is not an object, an unknown field, "inputs",
// a "signature_name" that is not a string, no "instances", "instances" that is not a non-empty
// array, an unknown signature; ResourceExhausted for more than `max_instances` instances;
// InvalidArgument "instance I: ..." for a bad instance (BatchBuilder::Add's errors).
//
// Thread-safety: a pure function.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cli/internal/instances.h"
#include "core/batch.h"

namespace tessera::cli {

struct PredictLimits {
  int64_t max_instances = 10'000;
};

// Instances per batch of a PredictRequest.
inline constexpr int64_t kInstancesPerBatch = 1024;

struct PredictRequest {
  const InstanceFormat* format = nullptr;  // the requested signature's, an entry of `formats`
  std::vector<Batch> batches;              // the instances in order, kInstancesPerBatch a batch
  int64_t size = 0;                        // instances in all
};

// `formats` by signature name (ModelInstanceFormats); the signature is "serving_default" unless
// the request names another.
absl::StatusOr<PredictRequest> ReadPredictRequest(
    absl::string_view body, const std::map<std::string, InstanceFormat>& formats,
    const PredictLimits& limits);

}  // namespace tessera::cli
