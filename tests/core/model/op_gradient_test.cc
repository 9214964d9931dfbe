// Every built-in op's backward against central finite differences of its forward, and the
// registry's contract (a program's own op, refused definitions).
#include "tessera/ops.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "core/base/random.h"
#include "tests/core/model_test_util.h"

namespace tessera {
namespace {

// One configuration of an op to check: its inputs' widths and its attributes.
struct OpCase {
  std::string op;
  std::vector<int64_t> input_widths;
  std::map<std::string, double> attrs;
  std::map<std::string, std::string> string_attrs;
};

// Configurations covering every built-in op (and each activation of dense). Every name in
// BuiltinOpNames() must appear: a new op comes with its gradient check.
std::vector<OpCase> Cases() {
  return {
      {"dense", {3}, {{"units", 4}}, {{"activation", "linear"}}},
      {"dense", {3}, {{"units", 2}}, {{"activation", "relu"}}},
      {"dense", {3}, {{"units", 2}}, {{"activation", "sigmoid"}}},
      {"dense", {3}, {{"units", 2}}, {{"activation", "tanh"}}},
      {"relu", {4}, {}, {}},
      {"sigmoid", {4}, {}, {}},
      {"tanh", {4}, {}, {}},
      {"softmax", {4}, {}, {}},
      {"log1p", {4}, {}, {}},
      {"concat", {2, 3, 1}, {}, {}},
      {"add", {3, 3, 3}, {}, {}},
      {"multiply", {3, 3, 3}, {}, {}},
      {"multiply", {2, 2}, {}, {}},
      {"dot", {4, 4}, {}, {}},
      {"dot_interaction", {3, 3, 3, 3}, {}, {}},
      {"dot_interaction", {2, 2, 2}, {{"self_interaction", 1}}, {}},
      {"cross", {3, 3}, {}, {}},
  };
}

// Values in [0.2, 1] with a random sign: far (in units of the finite-difference step) from the
// kinks of relu and log1p at 0.
RowMatrix AwayFromZero(int64_t rows, int64_t cols, uint64_t seed) {
  PhiloxStream random(seed, 0);
  RowMatrix m(rows, cols);
  for (int64_t k = 0; k < m.size(); ++k) {
    const double magnitude = 0.2 + 0.8 * random.Uniform();
    m.data()[k] = static_cast<float>(random.Uniform() < 0.5 ? -magnitude : magnitude);
  }
  return m;
}

struct OpInstance {
  const OpDef* op = nullptr;
  OpCase config;
  OpShape shape;
  std::vector<RowMatrix> inputs;
  std::vector<RowMatrix> params;
  RowMatrix upstream;  // dLoss/dy of the loss sum(y .* upstream)
};

OpInstance Instantiate(const OpCase& config, int64_t batch, uint64_t seed) {
  OpInstance instance;
  instance.config = config;
  instance.op = FindOp(config.op);
  REQUIRE(instance.op != nullptr);
  OpShapeArgs args;
  args.input_widths = config.input_widths;
  args.num_params = static_cast<int>(instance.op->params.size());
  args.attrs = {&instance.config.attrs, &instance.config.string_attrs};
  absl::StatusOr<OpShape> shape = instance.op->infer(args);
  REQUIRE_MESSAGE(shape.ok(), shape.status().ToString());
  instance.shape = *shape;
  for (size_t i = 0; i < config.input_widths.size(); ++i) {
    instance.inputs.push_back(AwayFromZero(batch, config.input_widths[i], seed + i));
  }
  for (size_t j = 0; j < instance.shape.param_shapes.size(); ++j) {
    const Shape& s = instance.shape.param_shapes[j];
    instance.params.push_back(
        AwayFromZero(s.rows(), s.rank() >= 2 ? s.row_size() : 1, seed + 100 + j));
  }
  instance.upstream = AwayFromZero(batch, instance.shape.width, seed + 200);
  return instance;
}

OpForwardArgs ForwardArgs(const OpInstance& instance) {
  OpForwardArgs args;
  for (const RowMatrix& x : instance.inputs) args.inputs.emplace_back(x);
  for (const RowMatrix& p : instance.params) args.params.emplace_back(p);
  args.attrs = {&instance.config.attrs, &instance.config.string_attrs};
  return args;
}

RowMatrix Forward(const OpInstance& instance) {
  RowMatrix y(instance.inputs[0].rows(), instance.shape.width);
  instance.op->forward(ForwardArgs(instance), y);
  return y;
}

double Loss(const OpInstance& instance) {
  return static_cast<double>((Forward(instance).array() * instance.upstream.array()).sum());
}

// Central differences of Loss with respect to every element of `m` (an input or a parameter of
// `instance`).
RowMatrix NumericGradient(OpInstance& instance, RowMatrix& m) {
  constexpr float kEps = 1e-2f;
  RowMatrix grad(m.rows(), m.cols());
  for (int64_t k = 0; k < m.size(); ++k) {
    const float saved = m.data()[k];
    m.data()[k] = saved + kEps;
    const double plus = Loss(instance);
    m.data()[k] = saved - kEps;
    const double minus = Loss(instance);
    m.data()[k] = saved;
    grad.data()[k] = static_cast<float>((plus - minus) / (2.0 * kEps));
  }
  return grad;
}

void CheckClose(const RowMatrix& analytic, const RowMatrix& numeric) {
  REQUIRE(analytic.rows() == numeric.rows());
  REQUIRE(analytic.cols() == numeric.cols());
  for (int64_t k = 0; k < analytic.size(); ++k) {
    INFO("element " << k);
    CHECK(analytic.data()[k] == doctest::Approx(numeric.data()[k]).epsilon(2e-2).scale(0.1));
  }
}

TEST_CASE("every built-in op's backward matches finite differences of its forward") {
  std::map<std::string, int> checked;
  uint64_t seed = 1;
  for (const OpCase& config : Cases()) {
    INFO("op " << config.op << " with " << config.input_widths.size() << " inputs");
    OpInstance instance = Instantiate(config, /*batch=*/3, seed += 1000);
    const RowMatrix y = Forward(instance);
    // Gradients are ADDED to what the buffers hold: start them at a known non-zero value.
    std::vector<RowMatrix> input_grads;
    std::vector<RowMatrix> param_grads;
    for (const RowMatrix& x : instance.inputs)
      input_grads.push_back(RowMatrix::Constant(x.rows(), x.cols(), 0.5f));
    for (const RowMatrix& p : instance.params)
      param_grads.push_back(RowMatrix::Constant(p.rows(), p.cols(), 0.5f));
    std::vector<MatrixRef> input_refs(input_grads.begin(), input_grads.end());
    std::vector<MatrixRef> param_refs(param_grads.begin(), param_grads.end());
    RowMatrix dy = instance.upstream;  // the kernel may overwrite it
    OpBackwardArgs args(ForwardArgs(instance), y, dy);
    for (MatrixRef& g : input_refs) args.input_grads.push_back(&g);
    for (MatrixRef& g : param_refs) args.param_grads.push_back(&g);
    instance.op->backward(args);

    for (size_t i = 0; i < instance.inputs.size(); ++i) {
      INFO("input " << i);
      const RowMatrix numeric = NumericGradient(instance, instance.inputs[i]);
      CheckClose(input_grads[i].array() - 0.5f, numeric);
    }
    for (size_t j = 0; j < instance.params.size(); ++j) {
      INFO("parameter " << instance.op->params[j].role);
      const RowMatrix numeric = NumericGradient(instance, instance.params[j]);
      CheckClose(param_grads[j].array() - 0.5f, numeric);
    }
    ++checked[config.op];
  }
  for (const std::string& name : BuiltinOpNames()) {
    INFO("built-in op " << name << " has no gradient check");
    CHECK(checked.count(name) == 1);
  }
}

TEST_CASE("a backward given null gradient buffers computes nothing it is not asked for") {
  for (const OpCase& config : Cases()) {
    INFO("op " << config.op);
    OpInstance instance = Instantiate(config, /*batch=*/2, 7);
    const RowMatrix y = Forward(instance);
    RowMatrix dy = instance.upstream;
    OpBackwardArgs args(ForwardArgs(instance), y, dy);
    RowMatrix first = RowMatrix::Zero(instance.inputs[0].rows(), instance.inputs[0].cols());
    MatrixRef first_ref(first);
    args.input_grads.assign(instance.inputs.size(), nullptr);
    args.input_grads[0] = &first_ref;
    args.param_grads.assign(instance.params.size(), nullptr);
    instance.op->backward(args);  // must not touch the null ones
    RowMatrix dy_again = instance.upstream;
    OpBackwardArgs all(ForwardArgs(instance), y, dy_again);
    std::vector<RowMatrix> grads;
    for (const RowMatrix& x : instance.inputs) grads.push_back(RowMatrix::Zero(x.rows(), x.cols()));
    std::vector<RowMatrix> param_grads;
    for (const RowMatrix& p : instance.params)
      param_grads.push_back(RowMatrix::Zero(p.rows(), p.cols()));
    std::vector<MatrixRef> refs(grads.begin(), grads.end());
    std::vector<MatrixRef> param_refs(param_grads.begin(), param_grads.end());
    for (MatrixRef& g : refs) all.input_grads.push_back(&g);
    for (MatrixRef& g : param_refs) all.param_grads.push_back(&g);
    instance.op->backward(all);
    CHECK(first.isApprox(grads[0]));
  }
}

TEST_CASE("ops compute what their names say on hand-checked values") {
  auto run = [](const OpCase& config, std::vector<RowMatrix> inputs) {
    OpInstance instance;
    instance.config = config;
    instance.op = FindOp(config.op);
    REQUIRE(instance.op != nullptr);
    OpShapeArgs args;
    args.input_widths = config.input_widths;
    args.attrs = {&instance.config.attrs, &instance.config.string_attrs};
    instance.shape = *instance.op->infer(args);
    instance.inputs = std::move(inputs);
    return Forward(instance);
  };
  RowMatrix a(1, 3), b(1, 3), c(1, 3);
  a << 1, 2, 3;
  b << 4, -5, 6;
  c << 0.5f, 2, -1;
  CHECK(run({"add", {3, 3, 3}, {}, {}}, {a, b, c})
            .isApprox((RowMatrix(1, 3) << 5.5f, -1, 8).finished()));
  CHECK(run({"multiply", {3, 3}, {}, {}}, {a, b})
            .isApprox((RowMatrix(1, 3) << 4, -10, 18).finished()));
  CHECK(run({"dot", {3, 3}, {}, {}}, {a, b})(0, 0) == doctest::Approx(12));
  // dot_interaction: the first input, then the dots of every pair i < j: (a.b, a.c, b.c).
  const RowMatrix interaction = run({"dot_interaction", {3, 3, 3}, {}, {}}, {a, b, c});
  REQUIRE(interaction.cols() == 6);
  CHECK(interaction.isApprox((RowMatrix(1, 6) << 1, 2, 3, 12, 1.5f, -14).finished()));
  // With self_interaction the squared norms join: (a.a, a.b, a.c, b.b, b.c, c.c).
  const RowMatrix with_self =
      run({"dot_interaction", {3, 3, 3}, {{"self_interaction", 1}}, {}}, {a, b, c});
  CHECK(with_self.isApprox((RowMatrix(1, 9) << 1, 2, 3, 14, 12, 1.5f, 77, -14, 5.25f).finished()));
  RowMatrix x(1, 3);
  x << -2, 0, std::exp(1.0f) - 1;
  CHECK(run({"log1p", {3}, {}, {}}, {x}).isApprox((RowMatrix(1, 3) << 0, 0, 1).finished()));
}

TEST_CASE("the cross layer is DCN-v2's x0 * (xl W + b) + xl") {
  const OpDef* cross = FindOp("cross");
  REQUIRE(cross != nullptr);
  OpShapeArgs shape_args;
  shape_args.input_widths = {2, 2};
  shape_args.num_params = 2;
  const absl::StatusOr<OpShape> shape = cross->infer(shape_args);
  REQUIRE(shape.ok());
  CHECK(shape->width == 2);
  REQUIRE(shape->param_shapes.size() == 2);
  CHECK(shape->param_shapes[0] == Shape{2, 2});
  CHECK(shape->param_shapes[1] == Shape{2});
  RowMatrix x0(1, 2), xl(1, 2), w(2, 2), bias(2, 1), y(1, 2);
  x0 << 1, 2;
  xl << 3, -1;
  w << 0.5f, 1, 2, -1;
  bias << 0.25f, -0.25f;
  OpForwardArgs args;
  args.inputs.emplace_back(x0);
  args.inputs.emplace_back(xl);
  args.params.emplace_back(w);
  args.params.emplace_back(bias);
  cross->forward(args, y);
  // xl W + b = (1.5 - 2 + 0.25, 3 + 1 - 0.25) = (-0.25, 3.75)
  CHECK(y.isApprox((RowMatrix(1, 2) << 1 * -0.25f + 3, 2 * 3.75f - 1).finished()));
}

TEST_CASE("shape rules refuse inputs their op cannot take") {
  auto infer = [](const std::string& name, std::vector<int64_t> widths,
                  std::map<std::string, double> attrs = {}) {
    const OpDef* op = FindOp(name);
    REQUIRE(op != nullptr);
    OpShapeArgs args;
    args.input_widths = std::move(widths);
    args.num_params = static_cast<int>(op->params.size());
    std::map<std::string, std::string> strings;
    args.attrs = {&attrs, &strings};
    return op->infer(args);
  };
  CHECK(infer("add", {3, 4}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(infer("dot", {3, 2}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(infer("cross", {3, 2}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(infer("dot_interaction", {4, 3}).status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(infer("dot_interaction", {4, 4}, {{"self_interaction", 2}}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(infer("concat", {3, 2})->width == 5);
  CHECK(infer("dot_interaction", {4, 4, 4})->width == 4 + 3);
}

using testing::ScaleOp;

TEST_CASE("a program registers its own op once, and its gradient checks like a built-in") {
  REQUIRE(RegisterOp(ScaleOp("test_scale")).ok());
  CHECK(FindOp("test_scale") != nullptr);
  const std::vector<std::string> names = RegisteredOpNames();
  CHECK(std::find(names.begin(), names.end(), "test_scale") != names.end());
  const std::vector<std::string> builtins = BuiltinOpNames();
  CHECK(std::find(builtins.begin(), builtins.end(), "test_scale") == builtins.end());
  CHECK(RegisterOp(ScaleOp("test_scale")).code() == absl::StatusCode::kAlreadyExists);
  CHECK(RegisterOp(ScaleOp("dense")).code() == absl::StatusCode::kAlreadyExists);
  CHECK(RegisterOp(ScaleOp("embedding")).code() == absl::StatusCode::kAlreadyExists);

  OpInstance instance = Instantiate({"test_scale", {3}, {}, {}}, 2, 99);
  const RowMatrix y = Forward(instance);
  RowMatrix dx = RowMatrix::Zero(2, 3), ds = RowMatrix::Zero(3, 1);
  MatrixRef dx_ref(dx), ds_ref(ds);
  RowMatrix dy = instance.upstream;
  OpBackwardArgs args(ForwardArgs(instance), y, dy);
  args.input_grads = {&dx_ref};
  args.param_grads = {&ds_ref};
  instance.op->backward(args);
  CheckClose(dx, NumericGradient(instance, instance.inputs[0]));
  CheckClose(ds, NumericGradient(instance, instance.params[0]));
}

TEST_CASE("incomplete op definitions are refused") {
  OpDef no_name = ScaleOp("");
  CHECK(RegisterOp(no_name).code() == absl::StatusCode::kInvalidArgument);
  OpDef no_backward = ScaleOp("test_no_backward");
  no_backward.backward = nullptr;
  CHECK(RegisterOp(no_backward).code() == absl::StatusCode::kInvalidArgument);
  OpDef bad_counts = ScaleOp("test_bad_counts");
  bad_counts.min_inputs = 3;
  bad_counts.max_inputs = 2;
  CHECK(RegisterOp(bad_counts).code() == absl::StatusCode::kInvalidArgument);
  OpDef optional_first = ScaleOp("test_optional_first");
  optional_first.params = {{"a", /*optional=*/true}, {"b"}};
  CHECK(RegisterOp(optional_first).code() == absl::StatusCode::kInvalidArgument);
  CHECK(FindOp("test_no_backward") == nullptr);
}

}  // namespace
}  // namespace tessera
