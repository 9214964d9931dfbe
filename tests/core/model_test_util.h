// Helpers shared by the model tests: parameters held whole or gathered at the rows a batch
// needs, the check that both give the same step, and the scale op of core/op_registry.h's
// example.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "core/model.h"
#include "core/op_registry.h"

namespace tessera {
namespace testing {

using Variables = std::map<std::string, Tensor>;

inline StepParams FullParams(const Variables& vars) {
  StepParams params;
  for (const auto& [name, value] : vars) params.full.emplace(name, value.view());
  return params;
}

// The parameters of one step as a worker holds them: embedding tables as the rows `needed`
// names (copied out of `vars`), every other variable whole. Owns the copied rows.
struct GatheredParams {
  Variables rows;
  StepParams params;
};

inline GatheredParams Gather(const Variables& vars,
                             const std::map<std::string, SortedIds>& needed) {
  GatheredParams out;
  for (const auto& [name, value] : vars) {
    auto ids = needed.find(name);
    if (ids == needed.end()) {
      out.params.full.emplace(name, value.view());
      continue;
    }
    Tensor rows(value.shape().WithRows(static_cast<int64_t>(ids->second.size())));
    for (size_t k = 0; k < ids->second.size(); ++k) {
      rows.matrix().row(k) = value.matrix().row(ids->second[k]);
    }
    out.rows.emplace(name, std::move(rows));
  }
  for (const auto& [name, rows] : out.rows) {
    out.params.gathered.emplace(name, EmbeddingRows{needed.at(name), rows.view()});
  }
  return out;
}

// The step from gathered rows equals the step from whole tables, bit for bit.
inline void CheckSameStep(const StepResult& gathered, const StepResult& full) {
  CHECK(gathered.loss == full.loss);
  for (const auto& [name, grad] : full.dense_gradients) {
    CHECK(gathered.dense_gradients.at(name).matrix() == grad.matrix());
  }
  for (const auto& [name, grad] : full.sparse_gradients) {
    CHECK(gathered.sparse_gradients.at(name).indices == grad.indices);
    CHECK(gathered.sparse_gradients.at(name).values.matrix() == grad.values.matrix());
  }
}

// y = x * s for a learned vector s [width] (core/op_registry.h's example), named `name`.
inline OpDef ScaleOp(const std::string& name) {
  OpDef scale;
  scale.name = name;
  scale.params = {{"scale"}};
  scale.infer = [](const OpShapeArgs& args) -> absl::StatusOr<OpShape> {
    return OpShape{args.input_widths[0], {Shape{args.input_widths[0]}}};
  };
  scale.forward = [](const OpForwardArgs& a, MatrixRef y) {
    y = (a.inputs[0].array().rowwise() * a.params[0].col(0).transpose().array()).matrix();
  };
  scale.backward = [](const OpBackwardArgs& a) {
    const auto s = a.params[0].col(0).transpose().array();
    if (a.input_grads[0]) *a.input_grads[0] += (a.dy.array().rowwise() * s).matrix();
    if (a.param_grads[0]) {
      a.param_grads[0]->col(0) +=
          (a.dy.array() * a.inputs[0].array()).colwise().sum().matrix().transpose();
    }
  };
  return scale;
}

}  // namespace testing
}  // namespace tessera
