// Helpers shared by the model tests: parameters held whole or gathered at the rows a batch
// needs, the check that both give the same step, and the scale op of tessera/ops.h's
// example.
#pragma once

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

#include "core/model/model.h"
#include "tessera/ops.h"

namespace tessera {
namespace testing {

using Variables = std::map<std::string, Tensor>;

inline StepParams FullParams(const Variables& vars) {
  StepParams params;
  for (const auto& [name, value] : vars) params.full.emplace(name, value.view());
  return params;
}

// The parameters of one step as a worker holds them: embedding tables as the rows `needed`
// names (copied out of `vars`), every other variable whole. Each table's rows come in `blocks`
// row blocks of as even sizes as they split into (some empty when there are fewer rows than
// blocks), as a worker passes the replies of that many shards. Owns the copied rows.
struct GatheredParams {
  std::map<std::string, std::vector<Tensor>> rows;  // per table, its blocks
  StepParams params;
};

inline GatheredParams Gather(const Variables& vars, const std::map<std::string, SortedIds>& needed,
                             int64_t blocks = 1) {
  GatheredParams out;
  for (const auto& [name, value] : vars) {
    auto ids = needed.find(name);
    if (ids == needed.end()) {
      out.params.full.emplace(name, value.view());
      continue;
    }
    const int64_t count = static_cast<int64_t>(ids->second.size());
    std::vector<Tensor>& parts = out.rows[name];
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t begin = count * b / blocks;
      const int64_t end = count * (b + 1) / blocks;
      Tensor part(value.shape().WithRows(end - begin));
      for (int64_t k = begin; k < end; ++k) {
        part.matrix().row(k - begin) = value.matrix().row(ids->second[static_cast<size_t>(k)]);
      }
      parts.push_back(std::move(part));
    }
  }
  for (const auto& [name, parts] : out.rows) {
    EmbeddingRows& rows = out.params.gathered[name];
    rows.ids = needed.at(name);
    for (const Tensor& part : parts) rows.blocks.push_back(part.view());
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

// y = x * s for a learned vector s [width] (tessera/ops.h's example), named `name`.
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
