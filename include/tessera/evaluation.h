// What an evaluation of a model on a labelled test set reports (EvalResult): the figures a
// training job's report receives (tessera/training.h) and the JSON summary records. How they are
// computed, batch by batch and bit-identically wherever the forward passes ran, is
// core/training/evaluation.h.
//
// Thread-safety: a value.
#pragma once

#include <cstdint>
#include <optional>

namespace tessera {

struct EvalResult {
  int64_t examples = 0;
  // The model's loss, example-weighted mean over the dataset: the logloss of a sigmoid
  // cross-entropy model, the mean squared error of a regression.
  double loss = 0;
  // Sigmoid cross-entropy models: AUC of the logits (nullopt when the data lacks a class) and
  // the accuracy of logit > 0. Softmax models: the top-1 accuracy. Mean-squared-error models:
  // the root mean squared error and the mean absolute error of the predictions. Needs an output
  // naming the loss's logits node; without one only `loss` is reported.
  std::optional<double> auc;
  std::optional<double> accuracy;
  std::optional<double> rmse;
  std::optional<double> mae;
};

}  // namespace tessera
