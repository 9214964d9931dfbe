// Shared fixtures of the cli tests: a tiny exported recsys model and temporary directories.
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <utility>

#include "core/serving/exported_model.h"
#include "tessera/model.h"
#include "tessera/workloads/reference_models.h"
#include "tests/temp_dir.h"

// Note [httplib after Eigen]: the serving tests use cpp-httplib's client, and httplib.h pulls in
// <resolv.h>, whose `#define _res` breaks Eigen headers included after it: a test includes
// httplib.h after every Tessera header.

namespace tessera::testing {

// The recsys model with 5 users, 4 items, D = 3, H = 4, at step 42, with every variable
// (biases included) initialized to non-zero values so every parameter shows in the outputs.
inline ExportedModel TinyRecsysModel() {
  RecsysModelOptions options;
  options.num_users = 5;
  options.num_items = 4;
  options.embedding_dim = 3;
  options.hidden_units = 4;
  options.seed = 11;
  ExportedModel model;
  model.spec = *RecsysModelSpec(options);
  for (ParamSpec& p : model.spec.params) {
    if (p.initializer.name == "random_uniform") {
      p.initializer.params = {{"minval", -1}, {"maxval", 1}};
    }
    if (p.initializer.name == "zeros") {
      p.initializer = {"random_normal", {{"stddev", 0.5}}, p.initializer.seed};
    }
    auto value = MakeInitializedBlock(p.initializer, p.shape, 0, p.shape.rows());
    REQUIRE(value.ok());
    model.variables.emplace(p.name, std::move(*value));
  }
  model.signatures = {*ServingSignature(model.spec)};
  model.step = 42;
  return model;
}

// An MLP over 3 dense inputs (hidden 2, 2 classes) whose every value is 1: an input near
// FLT_MAX drives its logits to infinity.
inline ExportedModel OnesMlpModel() {
  MlpModelOptions options;
  options.input_dim = 3;
  options.hidden_units = {2};
  options.num_classes = 2;
  ExportedModel model;
  model.spec = *MlpModelSpec(options);
  for (const ParamSpec& p : model.spec.params)
    model.variables.emplace(p.name, Tensor(p.shape, 1.0f));
  model.signatures = {*ServingSignature(model.spec)};
  return model;
}

inline std::unique_ptr<Predictor> TinyRecsysPredictor() {
  auto predictor = Predictor::Create(TinyRecsysModel());
  REQUIRE(predictor.ok());
  return std::move(*predictor);
}

using tessera::testing::TempDir;

}  // namespace tessera::testing
