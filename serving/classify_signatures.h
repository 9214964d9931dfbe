// ClassifySignatures: the classification and regression signatures of a classifier, computed from
// its outputs, so that TF Serving's :classify and :regress (model_service.h) answer for a model
// exported with a predict signature only — as TF's estimator heads export them.
//
//   binary: a sigmoid_cross_entropy loss and an output P that is the sigmoid of its logits
//     "classification"  classify  classes  string [-1, 2]  "0", "1"
//                                 scores   float  [-1, 2]  1 - p, p
//     "regression"      regress   outputs  float  [-1, 1]  p
//   multi-class: a softmax_cross_entropy loss and an output P that is the softmax of its K logits
//     "classification"  classify  classes  string [-1, K]  "0" .. "K-1"
//                                 scores   float  [-1, K]  P
//
// Their inputs are the model's (those of `serving`). Other models have neither; a model's own
// signature of one of these names takes its place (ModelInstanceFormats).
//
// Thread-safety: a pure function.
#pragma once

#include <vector>

#include "serving/instances.h"
#include "tessera/model.h"

namespace tessera::serving {

inline constexpr char kClassificationSignature[] = "classification";
inline constexpr char kRegressionSignature[] = "regression";

// Output names of the computed signatures, TF's.
inline constexpr char kClassesOutput[] = "classes";
inline constexpr char kScoresOutput[] = "scores";
inline constexpr char kRegressionOutput[] = "outputs";

// `spec` must be valid (a Predictor's); `serving` is one of its formats.
std::vector<InstanceFormat> ClassifySignatures(const ModelSpec& spec,
                                               const InstanceFormat& serving);

}  // namespace tessera::serving
