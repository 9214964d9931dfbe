// ReadPredictRequest: the body of a `:predict` request read straight into Batches, without a
// JSON tree of the whole request, in either of TF Serving's formats:
//
//   row       {"instances": [{"user": 3, "item": 7}, ...], "signature_name": "..."}
//   columnar  {"inputs": {"user": [3, ...], "item": [7, ...]}, "signature_name": "..."}
//             {"inputs": [[0.1, ...], ...]}      (a signature of one input: its values)
//
// An instance, and a value of a column, is what instances.h says (an integer id, an array of
// `width` numbers); a column holds one value per instance, and every column as many.
//
//   TESSERA_ASSIGN_OR_RETURN(PredictRequest request, ReadPredictRequest(body, formats, limits));
//   for (const Batch& batch : request.batches) {
//     TESSERA_ASSIGN_OR_RETURN(auto outputs, predictor.Predict(batch));
//     ...   // answered as "predictions" (row) or "outputs" (request.columnar)
//   }
//
// Note [Bounded predict requests]: a JSON tree costs 16 bytes and more per value (and an object
// a few hundred), so parsing a whole request into one made a 50 MB body cost gigabytes. The body
// is read twice with nlohmann's SAX parser instead: once to check its shape and count the
// instances (nothing is built; a columnar request's input names are kept, at most
// kMaxColumnarFields of them), once to build each instance's (or column value's) small tree in
// turn, put it into its batch (reserved for the count) and drop it. What a request holds is then
// its body, its batches (4 bytes a number, 8 an id: at most a few times the body, whose numbers
// take 2 bytes or more) and one value; a value holding far more than its signature takes is
// refused as soon as it does. The instances come in batches of at most kInstancesPerBatch, so
// that a Predictor's activations and a batch's predictions are only ever alive for that many;
// what grows with the instances is the reply, and `max_instances` bounds it. (nlohmann's lexer
// also keeps the text of the token it reads, with the whitespace before it: a body of one huge
// token or run of spaces costs up to twice its size more while it is read.)
//
// Errors are those of reading the body as one JSON tree whose fields are checked in key order
// (a field given twice: its last value), the first that applies: InvalidArgument
// "malformed JSON: ..." (nlohmann's line and column); InvalidArgument for a body that is not an
// object, a "signature_name" that is not a string or an unknown field (whichever key sorts
// first), both or neither of "instances" and "inputs", "instances" that is not a non-empty array,
// "inputs" that is neither an object nor an array, an unknown signature; for columns: an array
// "inputs" for a signature of several inputs, an unknown input (the first in key order), a
// missing one, a column that is not a non-empty array, columns of different lengths;
// ResourceExhausted for more than `max_instances` instances; InvalidArgument "instance I: ..."
// for a bad instance (BatchBuilder::Add's errors) or, in columns, a bad value (the lowest I,
// then the signature's first input).
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
#include "tessera/data.h"

namespace tessera::serving {

struct PredictLimits {
  int64_t max_instances = 10'000;
};

// Instances per batch of a PredictRequest.
inline constexpr int64_t kInstancesPerBatch = 1024;
// Fields of a columnar "inputs" object kept while its signature is not known yet (more: refused).
inline constexpr size_t kMaxColumnarFields = 1024;

struct PredictRequest {
  const InstanceFormat* format = nullptr;  // the requested signature's, an entry of `formats`
  std::vector<Batch> batches;              // the instances in order, kInstancesPerBatch a batch
  int64_t size = 0;                        // instances in all
  bool columnar = false;                   // sent as "inputs" (answered as "outputs")
};

// `formats` by signature name (ModelInstanceFormats); the signature is "serving_default" unless
// the request names another.
absl::StatusOr<PredictRequest> ReadPredictRequest(
    absl::string_view body, const std::map<std::string, InstanceFormat>& formats,
    const PredictLimits& limits);

}  // namespace tessera::serving
