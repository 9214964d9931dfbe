#include "tessera/optimizer.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tessera {
namespace {

using Params = std::map<std::string, double>;

// The reference: every rule's published formula for one element, in double precision, written
// apart from the code under test. `s` holds the element's slot values in SlotNames() order.
struct ReferenceRule {
  std::vector<double> (*initial_slots)(const Params& p);
  void (*step)(const Params& p, int64_t t, double& w, double* s, double g);
};

ReferenceRule ReferenceFor(const std::string& name) {
  if (name == "sgd") {
    return {[](const Params&) { return std::vector<double>{}; },
            [](const Params& p, int64_t, double& w, double*, double g) {
              w -= p.at("learning_rate") * g;
            }};
  }
  if (name == "momentum") {
    return {[](const Params&) { return std::vector<double>{0}; },
            [](const Params& p, int64_t, double& w, double* s, double g) {
              const double lr = p.at("learning_rate"), mu = p.at("momentum");
              s[0] = mu * s[0] + g;
              w -= p.at("nesterov") == 1 ? lr * (g + mu * s[0]) : lr * s[0];
            }};
  }
  if (name == "adagrad") {
    return {[](const Params& p) { return std::vector<double>{p.at("initial_accumulator_value")}; },
            [](const Params& p, int64_t, double& w, double* s, double g) {
              s[0] += g * g;
              w -= p.at("learning_rate") * g / (std::sqrt(s[0]) + p.at("epsilon"));
            }};
  }
  if (name == "adam") {
    return {[](const Params&) {
              return std::vector<double>{0, 0};
            },
            [](const Params& p, int64_t t, double& w, double* s, double g) {
              const double b1 = p.at("beta_1"), b2 = p.at("beta_2");
              s[0] = b1 * s[0] + (1 - b1) * g;
              s[1] = b2 * s[1] + (1 - b2) * g * g;
              const double m_hat = s[0] / (1 - std::pow(b1, t));
              const double v_hat = s[1] / (1 - std::pow(b2, t));
              // Kingma & Ba's form. TF's epsilon is their "epsilon hat", added before the
              // bias correction of v, so in this form it appears divided by sqrt(1 - b2^t).
              const double eps_hat = p.at("epsilon") / std::sqrt(1 - std::pow(b2, t));
              w -= p.at("learning_rate") * m_hat / (std::sqrt(v_hat) + eps_hat);
            }};
  }
  // FTRL-Proximal in McMahan et al.'s notation: n (squared gradients), z (linear), alpha, beta,
  // lambda1, lambda2 = 2 * l2, generalized to the power p = -learning_rate_power.
  return {[](const Params& p) {
            return std::vector<double>{p.at("initial_accumulator_value"), 0};
          },
          [](const Params& p, int64_t, double& w, double* s, double g) {
            const double alpha = p.at("learning_rate"), power = -p.at("learning_rate_power");
            const double lambda1 = p.at("l1_regularization_strength");
            const double lambda2 = 2 * p.at("l2_regularization_strength");
            double& n = s[0];
            double& z = s[1];
            const double g_shrunk = g + 2 * p.at("l2_shrinkage_regularization_strength") * w;
            const double sigma = (std::pow(n + g * g, power) - std::pow(n, power)) / alpha;
            z += g_shrunk - sigma * w;
            n += g * g;
            w = std::abs(z) <= lambda1
                    ? 0
                    : -(z - std::copysign(lambda1, z)) /
                          ((p.at("beta") + std::pow(n, power)) / alpha + lambda2);
          }};
}

// A row block and its slots under the reference rule.
struct ReferenceBlock {
  ReferenceBlock(const OptimizerSpec& resolved, const Tensor& value)
      : rule(ReferenceFor(resolved.name)),
        params(resolved.params),
        width(value.row_size()),
        w(value.values().begin(), value.values().end()) {
    for (double initial : rule.initial_slots(params)) slots.emplace_back(w.size(), initial);
  }
  void Update(int64_t e, double g) {
    double s[2] = {0, 0};
    for (size_t i = 0; i < slots.size(); ++i) s[i] = slots[i][e];
    rule.step(params, step, w[e], s, g);
    for (size_t i = 0; i < slots.size(); ++i) slots[i][e] = s[i];
  }
  void ApplyDense(const Tensor& grad) {
    ++step;
    for (int64_t e = 0; e < grad.size(); ++e) Update(e, grad.values()[e]);
  }
  void ApplySparse(const std::vector<int64_t>& ids, const Tensor& grad) {
    std::map<int64_t, std::vector<double>> summed;
    for (size_t k = 0; k < ids.size(); ++k) {
      std::vector<double>& row = summed[ids[k]];
      row.resize(width);
      for (int64_t j = 0; j < width; ++j) row[j] += grad.values()[k * width + j];
    }
    ++step;
    for (const auto& [id, row] : summed) {
      for (int64_t j = 0; j < width; ++j) Update(id * width + j, row[j]);
    }
  }

  ReferenceRule rule;
  Params params;
  int64_t width;
  std::vector<double> w;
  std::vector<std::vector<double>> slots;
  int64_t step = 0;
};

bool Close(double got, double want, double tolerance) {
  return std::abs(got - want) <= tolerance * std::max(1.0, std::abs(want));
}

void CheckMatchesReference(const Tensor& value, const OptimizerSlots& slots,
                           const ReferenceBlock& ref) {
  CHECK(slots.step == ref.step);
  REQUIRE(slots.tensors.size() == ref.slots.size());
  for (int64_t e = 0; e < value.size(); ++e) {
    INFO("element " << e);
    CHECK(Close(value.values()[e], ref.w[e], 2e-5));
    for (size_t i = 0; i < ref.slots.size(); ++i) {
      CHECK(Close(slots.tensors[i].values()[e], ref.slots[i][e], 2e-5));
    }
  }
}

// Deterministic, sign-mixed test data; every 7th gradient element is exactly 0.
Tensor Gradient(const Shape& shape, int step) {
  Tensor g(shape);
  for (int64_t e = 0; e < g.size(); ++e) {
    g.values()[e] = e % 7 == 3 ? 0.0f : 0.5f * std::sin(0.9f * e + 1.7f * step + 0.3f);
  }
  return g;
}
Tensor InitialValue(const Shape& shape) {
  Tensor v(shape);
  for (int64_t e = 0; e < v.size(); ++e) v.values()[e] = 0.3f * std::cos(1.1f * e);
  return v;
}

bool BitIdentical(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}
bool BitIdentical(const OptimizerSlots& a, const OptimizerSlots& b) {
  if (a.step != b.step || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (!BitIdentical(a.tensors[i], b.tensors[i])) return false;
  }
  return true;
}

std::unique_ptr<Optimizer> Make(const OptimizerSpec& spec) {
  auto opt = MakeOptimizer(spec);
  REQUIRE_MESSAGE(opt.ok(), opt.status().ToString());
  return std::move(opt).value();
}

struct RuleCase {
  const char* label;
  OptimizerSpec spec;
};

const std::vector<RuleCase>& RuleCases() {
  static const auto* cases = new std::vector<RuleCase>{
      {"sgd", {"sgd", {{"learning_rate", 0.1}}}},
      {"momentum", {"momentum", {{"learning_rate", 0.1}, {"momentum", 0.9}}}},
      {"nesterov momentum",
       {"momentum", {{"learning_rate", 0.1}, {"momentum", 0.5}, {"nesterov", 1}}}},
      {"adagrad", {"adagrad", {{"learning_rate", 0.1}}}},
      {"adagrad from a zero accumulator",
       {"adagrad", {{"learning_rate", 0.5}, {"initial_accumulator_value", 0}, {"epsilon", 1e-3}}}},
      {"adam", {"adam", {{"learning_rate", 0.01}}}},
      {"adam with other betas",
       {"adam", {{"learning_rate", 0.05}, {"beta_1", 0.5}, {"beta_2", 0.75}, {"epsilon", 1e-3}}}},
      {"ftrl", {"ftrl", {{"learning_rate", 0.1}}}},
      {"ftrl with l1, l2, shrinkage and beta",
       {"ftrl",
        {{"learning_rate", 0.1},
         {"l1_regularization_strength", 0.02},
         {"l2_regularization_strength", 0.1},
         {"l2_shrinkage_regularization_strength", 0.05},
         {"beta", 0.5}}}},
      {"ftrl with learning_rate_power -0.3",
       {"ftrl",
        {{"learning_rate", 0.2},
         {"learning_rate_power", -0.3},
         {"l1_regularization_strength", 0.001}}}},
      {"ftrl with a fixed learning rate",
       {"ftrl", {{"learning_rate", 0.05}, {"learning_rate_power", 0}}}},
  };
  return *cases;
}

TEST_CASE("two steps of each rule give the hand-computed values") {
  // One element, w = 1, gradients 0.5 then -0.25. Worked by hand from each formula:
  //   sgd: 1 - 0.1*0.5 + 0.1*0.25 = 0.975
  //   momentum: a = 0.5, w = 0.95; a = 0.45 - 0.25 = 0.2, w = 0.93
  //   nesterov: a = 0.5, w = 1 - 0.1*(0.5 + 0.45) = 0.905; a = 0.2, w = 0.905 - 0.1*(-0.25 + 0.18)
  //   adagrad: a = 0.35, 0.4125; w = 1 - 0.05/sqrt(0.35) + 0.025/sqrt(0.4125) (+ epsilon)
  //   adam: lr_1 = 0.01*sqrt(0.001)/0.1, so step 1 moves by 0.01 less epsilon; m = 0.02,
  //         v = 0.00031225 after step 2
  //   ftrl (l1 0.2): n = 0.35, z = 0.5 - (sqrt(0.35) - sqrt(0.1))/0.1 = -2.2538021,
  //         w = (-0.2 + 2.2538021)/(sqrt(0.35)/0.1) = 0.3471559; then n = 0.4125,
  //         z = -2.6796493, w = 0.3860809
  struct Case {
    OptimizerSpec spec;
    double w;
    std::vector<double> slots;
  };
  const Case cases[] = {
      {{"sgd", {{"learning_rate", 0.1}}}, 0.975, {}},
      {{"momentum", {{"learning_rate", 0.1}, {"momentum", 0.9}}}, 0.93, {0.2}},
      {{"momentum", {{"learning_rate", 0.1}, {"momentum", 0.9}, {"nesterov", 1}}}, 0.912, {0.2}},
      {{"adagrad", {{"learning_rate", 0.1}}}, 0.9544095, {0.4125}},
      {{"adam", {{"learning_rate", 0.01}}}, 0.9873367, {0.02, 0.00031225}},
      {{"ftrl", {{"learning_rate", 0.1}, {"l1_regularization_strength", 0.2}}},
       0.3860809,
       {0.4125, -2.6796493}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec.name);
    auto opt = Make(c.spec);
    Tensor value(Shape{1, 1}, 1.0f);
    OptimizerSlots slots = opt->CreateSlots(value.shape());
    for (float g : {0.5f, -0.25f}) {
      REQUIRE(opt->ApplyDense(value.view(), slots, Tensor(Shape{1, 1}, g)).ok());
    }
    CHECK(Close(value.values()[0], c.w, 1e-6));
    REQUIRE(slots.tensors.size() == c.slots.size());
    for (size_t i = 0; i < c.slots.size(); ++i) {
      CHECK(Close(slots.tensors[i].values()[0], c.slots[i], 1e-6));
    }
  }
}

TEST_CASE("every rule follows its formula over several dense steps, from any step count") {
  const Shape shape{4, 5};  // 20 elements: a full SIMD packet and a remainder
  for (const RuleCase& c : RuleCases()) {
    for (int64_t first_step : {0, 41}) {  // Adam's bias correction must read slots.step
      CAPTURE(c.label);
      CAPTURE(first_step);
      auto opt = Make(c.spec);
      Tensor value = InitialValue(shape);
      OptimizerSlots slots = opt->CreateSlots(shape);
      slots.step = first_step;
      ReferenceBlock ref(opt->spec(), value);
      ref.step = first_step;
      for (int step = 0; step < 4; ++step) {
        const Tensor grad = Gradient(shape, step);
        REQUIRE(opt->ApplyDense(value.view(), slots, grad).ok());
        ref.ApplyDense(grad);
      }
      CheckMatchesReference(value, slots, ref);
    }
  }
}

TEST_CASE("a sparse gradient covering every row equals the dense apply") {
  const Shape shape{6, 5};
  for (const RuleCase& c : RuleCases()) {
    for (bool reversed : {false, true}) {  // reversed ids take the deduplicating path
      CAPTURE(c.label);
      CAPTURE(reversed);
      auto opt = Make(c.spec);
      Tensor dense_value = InitialValue(shape);
      Tensor sparse_value = dense_value;
      OptimizerSlots dense_slots = opt->CreateSlots(shape);
      OptimizerSlots sparse_slots = opt->CreateSlots(shape);
      for (int step = 0; step < 3; ++step) {
        const Tensor grad = Gradient(shape, step);
        REQUIRE(opt->ApplyDense(dense_value.view(), dense_slots, grad).ok());
        std::vector<int64_t> ids = {0, 1, 2, 3, 4, 5};
        Tensor rows = grad;
        if (reversed) {
          std::reverse(ids.begin(), ids.end());
          for (int64_t r = 0; r < 6; ++r) {
            std::copy(grad.row(5 - r).begin(), grad.row(5 - r).end(), rows.row(r).begin());
          }
        }
        REQUIRE(opt->ApplySparse(sparse_value.view(), sparse_slots, ids, rows).ok());
      }
      CHECK(sparse_slots.step == dense_slots.step);
      for (int64_t e = 0; e < dense_value.size(); ++e) {
        CHECK(Close(sparse_value.values()[e], dense_value.values()[e], 1e-6));
        for (size_t i = 0; i < dense_slots.tensors.size(); ++i) {
          CHECK(
              Close(sparse_slots.tensors[i].values()[e], dense_slots.tensors[i].values()[e], 1e-6));
        }
      }
    }
  }
}

TEST_CASE("a sparse apply updates the given rows and leaves every other row and slot untouched") {
  const Shape shape{6, 5};
  for (const RuleCase& c : RuleCases()) {
    CAPTURE(c.label);
    auto opt = Make(c.spec);
    Tensor value = InitialValue(shape);
    OptimizerSlots slots = opt->CreateSlots(shape);
    ReferenceBlock ref(opt->spec(), value);
    // A dense step first, so that every row has its own slot values.
    REQUIRE(opt->ApplyDense(value.view(), slots, Gradient(shape, 0)).ok());
    ref.ApplyDense(Gradient(shape, 0));
    const Tensor value_before = value;
    const OptimizerSlots slots_before = slots;

    const std::vector<int64_t> ids = {1, 4};
    const Tensor grad = Gradient(Shape{2, 5}, 1);
    REQUIRE(opt->ApplySparse(value.view(), slots, ids, grad).ok());
    ref.ApplySparse(ids, grad);

    CheckMatchesReference(value, slots, ref);
    for (int64_t r : {0, 2, 3, 5}) {
      CAPTURE(r);
      CHECK(std::memcmp(value.row(r).data(), value_before.row(r).data(), 5 * sizeof(float)) == 0);
      for (size_t i = 0; i < slots.tensors.size(); ++i) {
        CHECK(std::memcmp(slots.tensors[i].row(r).data(), slots_before.tensors[i].row(r).data(),
                          5 * sizeof(float)) == 0);
      }
    }
    for (int64_t r : {1, 4}) {
      CHECK(std::memcmp(value.row(r).data(), value_before.row(r).data(), 5 * sizeof(float)) != 0);
    }
  }
}

TEST_CASE("duplicate ids in a sparse gradient are summed before the update") {
  const Shape shape{5, 3};
  for (const RuleCase& c : RuleCases()) {
    CAPTURE(c.label);
    auto opt = Make(c.spec);
    Tensor value = InitialValue(shape);
    Tensor summed_value = value;
    OptimizerSlots slots = opt->CreateSlots(shape);
    OptimizerSlots summed_slots = opt->CreateSlots(shape);
    ReferenceBlock ref(opt->spec(), value);

    const std::vector<int64_t> ids = {3, 0, 3, 3};
    const Tensor grad = Gradient(Shape{4, 3}, 2);
    REQUIRE(opt->ApplySparse(value.view(), slots, ids, grad).ok());
    ref.ApplySparse(ids, grad);
    CheckMatchesReference(value, slots, ref);

    // The same as one apply of the summed rows.
    Tensor summed(Shape{2, 3});
    for (int64_t j = 0; j < 3; ++j) {
      summed.row(0)[j] = grad.row(1)[j];
      summed.row(1)[j] = grad.row(0)[j] + grad.row(2)[j] + grad.row(3)[j];
    }
    REQUIRE(opt->ApplySparse(summed_value.view(), summed_slots, Ids{0, 3}, summed).ok());
    CHECK(BitIdentical(value, summed_value));
    CHECK(BitIdentical(slots, summed_slots));
  }
}

TEST_CASE("the step count advances once per successful apply, dense or sparse") {
  auto opt = Make({"adam", {}});
  Tensor value(Shape{3, 2});
  OptimizerSlots slots = opt->CreateSlots(value.shape());
  CHECK(slots.step == 0);
  REQUIRE(opt->ApplyDense(value.view(), slots, Tensor(Shape{3, 2}, 1.0f)).ok());
  CHECK(slots.step == 1);
  REQUIRE(opt->ApplySparse(value.view(), slots, Ids{2, 2, 0}, Tensor(Shape{3, 2}, 1.0f)).ok());
  CHECK(slots.step == 2);
  REQUIRE(opt->ApplySparse(value.view(), slots, Ids{}, Tensor(Shape{0, 2})).ok());
  CHECK(slots.step == 3);
  CHECK_FALSE(opt->ApplySparse(value.view(), slots, Ids{3}, Tensor(Shape{1, 2})).ok());
  CHECK(slots.step == 3);
}

TEST_CASE("invalid input is rejected and leaves the value, the slots and the step unchanged") {
  const Shape shape{5, 6};
  struct BadApply {
    const char* what;
    std::function<void(OptimizerSlots&)> corrupt_slots;  // may be empty
    std::function<absl::Status(const Optimizer&, TensorView, OptimizerSlots&)> apply;
    const char* message;  // a fragment the error must contain
  };
  const auto dense = [](Shape grad_shape) {
    return [grad_shape](const Optimizer& o, TensorView v, OptimizerSlots& s) {
      return o.ApplyDense(v, s, Tensor(grad_shape, 1.0f));
    };
  };
  const auto sparse = [](Ids ids, Shape grad_shape) {
    return [ids, grad_shape](const Optimizer& o, TensorView v, OptimizerSlots& s) {
      return o.ApplySparse(v, s, ids, Tensor(grad_shape, 1.0f));
    };
  };
  const BadApply bad_applies[] = {
      {"dense gradient with too few rows", nullptr, dense(Shape{4, 6}), "[4, 6]"},
      {"dense gradient of another shape, same size", nullptr, dense(Shape{30}), "[30]"},
      {"sparse id one past the end", nullptr, sparse({0, 5}, Shape{2, 6}), "index 5"},
      {"negative sparse id", nullptr, sparse({-1}, Shape{1, 6}), "index -1"},
      {"more gradient rows than ids", nullptr, sparse({0, 1}, Shape{3, 6}), "2 indices"},
      {"sparse rows too wide", nullptr, sparse({0}, Shape{1, 7}), "expected 6"},
      {"sparse rows of the right width but another shape", nullptr, sparse({0}, Shape{1, 2, 3}),
       "[1, 2, 3]"},
      {"one slot tensor too many",
       [](OptimizerSlots& s) {
         s.tensors.emplace_back(Shape{5, 6});
       },
       dense(Shape{5, 6}), "slot tensors"},
      {"a negative step", [](OptimizerSlots& s) { s.step = -3; }, sparse({1}, Shape{1, 6}),
       "step -3"},
  };
  for (const RuleCase& c : RuleCases()) {
    auto opt = Make(c.spec);
    std::vector<BadApply> cases(std::begin(bad_applies), std::end(bad_applies));
    if (!opt->SlotNames().empty()) {
      cases.push_back({"one slot tensor missing", [](OptimizerSlots& s) { s.tensors.pop_back(); },
                       sparse({1}, Shape{1, 6}), "slot tensors"});
      cases.push_back({"a slot of the wrong shape",
                       [](OptimizerSlots& s) {
                         s.tensors.back() = Tensor(Shape{5, 5});
                       },
                       dense(Shape{5, 6}), "[5, 5]"});
    }
    for (const BadApply& bad : cases) {
      CAPTURE(c.label);
      CAPTURE(bad.what);
      Tensor value = InitialValue(shape);
      OptimizerSlots slots = opt->CreateSlots(shape);
      REQUIRE(opt->ApplyDense(value.view(), slots, Gradient(shape, 0)).ok());
      if (bad.corrupt_slots) bad.corrupt_slots(slots);
      const Tensor value_before = value;
      const OptimizerSlots slots_before = slots;
      const absl::Status status = bad.apply(*opt, value.view(), slots);
      CHECK(status.code() == absl::StatusCode::kInvalidArgument);
      CHECK_MESSAGE(status.message().find(bad.message) != absl::string_view::npos,
                    status.message());
      CHECK(status.message().find(c.spec.name) == 0);  // names the rule first
      CHECK(BitIdentical(value, value_before));
      CHECK(BitIdentical(slots, slots_before));
    }
  }
}

TEST_CASE("a scalar block takes dense gradients but rejects sparse ones") {
  auto opt = Make({"adagrad", {{"learning_rate", 0.1}}});
  Tensor value(Shape{}, 2.0f);
  OptimizerSlots slots = opt->CreateSlots(value.shape());
  CHECK(slots.tensors[0].shape() == Shape{});
  REQUIRE(opt->ApplyDense(value.view(), slots, Tensor(Shape{}, 1.0f)).ok());
  CHECK(Close(value.values()[0], 2.0 - 0.1 / (std::sqrt(1.1) + 1e-7), 1e-6));
  const Tensor value_before = value;
  const absl::Status status = opt->ApplySparse(value.view(), slots, Ids{0}, Tensor(Shape{1}, 1.0f));
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(BitIdentical(value, value_before));
  CHECK(slots.step == 1);
}

TEST_CASE("spec() fills in every default and rebuilds the identical rule") {
  const std::pair<const char*, Params> cases[] = {
      {"sgd", {{"learning_rate", 0.01}}},
      {"momentum", {{"learning_rate", 0.01}, {"momentum", 0.9}, {"nesterov", 0}}},
      {"adagrad",
       {{"learning_rate", 0.001}, {"initial_accumulator_value", 0.1}, {"epsilon", 1e-7}}},
      {"adam", {{"learning_rate", 0.001}, {"beta_1", 0.9}, {"beta_2", 0.999}, {"epsilon", 1e-7}}},
      {"ftrl",
       {{"learning_rate", 0.001},
        {"learning_rate_power", -0.5},
        {"initial_accumulator_value", 0.1},
        {"l1_regularization_strength", 0},
        {"l2_regularization_strength", 0},
        {"l2_shrinkage_regularization_strength", 0},
        {"beta", 0}}},
  };
  for (const auto& [name, defaults] : cases) {
    CAPTURE(name);
    auto opt = Make({name, {}});
    CHECK(opt->spec().name == name);
    CHECK(opt->spec().params == defaults);
    // A given value is kept; the others are still filled in.
    auto tuned = Make({name, {{"learning_rate", 0.5}}});
    Params want = defaults;
    want["learning_rate"] = 0.5;
    CHECK(tuned->spec().params == want);
    CHECK(Make(tuned->spec())->spec().params == want);
  }
}

TEST_CASE("each rule creates its own slots with the block's shape") {
  struct Case {
    OptimizerSpec spec;
    std::vector<std::string> names;
    std::vector<float> initial;
  };
  const Case cases[] = {
      {{"sgd", {}}, {}, {}},
      {{"momentum", {}}, {"momentum"}, {0}},
      {{"adagrad", {}}, {"accumulator"}, {0.1f}},
      {{"adagrad", {{"initial_accumulator_value", 0.25}}}, {"accumulator"}, {0.25f}},
      {{"adam", {}}, {"m", "v"}, {0, 0}},
      {{"ftrl", {}}, {"accumulator", "linear"}, {0.1f, 0}},
      {{"ftrl", {{"initial_accumulator_value", 0.5}}}, {"accumulator", "linear"}, {0.5f, 0}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.spec.name);
    auto opt = Make(c.spec);
    CHECK(opt->SlotNames() == c.names);
    const OptimizerSlots slots = opt->CreateSlots(Shape{3, 2, 2});
    CHECK(slots.step == 0);
    REQUIRE(slots.tensors.size() == c.names.size());
    for (size_t i = 0; i < c.names.size(); ++i) {
      CHECK(slots.tensors[i].shape() == Shape{3, 2, 2});
      for (float x : slots.tensors[i].values()) CHECK(x == c.initial[i]);
    }
  }
}

TEST_CASE("MakeOptimizer rejects unknown rules, unknown hyperparameters and bad values") {
  const double nan = std::nan("");
  const std::pair<OptimizerSpec, const char*> cases[] = {
      {{"rmsprop", {}}, "unknown optimizer 'rmsprop'"},
      {{"Adam", {}}, "unknown optimizer 'Adam'"},
      {{"sgd", {{"momentum", 0.9}}}, "unknown hyperparameter 'momentum'"},
      {{"adam", {{"amsgrad", 1}}}, "unknown hyperparameter 'amsgrad'"},
      {{"sgd", {{"learning_rate", -0.1}}}, "learning_rate must be >= 0"},
      {{"adagrad", {{"learning_rate", nan}}}, "learning_rate must be >= 0"},
      {{"adam", {{"learning_rate", INFINITY}}}, "learning_rate must be >= 0"},
      {{"momentum", {{"momentum", 1.0}}}, "momentum must be in [0, 1)"},
      {{"momentum", {{"momentum", -0.1}}}, "momentum must be in [0, 1)"},
      {{"momentum", {{"nesterov", 0.5}}}, "nesterov must be 0 or 1"},
      {{"adagrad", {{"initial_accumulator_value", -1}}}, "initial_accumulator_value must be >= 0"},
      {{"adagrad", {{"epsilon", -1e-7}}}, "epsilon must be >= 0"},
      {{"adagrad", {{"initial_accumulator_value", 0}, {"epsilon", 0}}}, "cannot both be 0"},
      {{"adam", {{"beta_1", 1.0}}}, "beta_1 must be in [0, 1)"},
      {{"adam", {{"beta_2", -0.5}}}, "beta_2 must be in [0, 1)"},
      {{"adam", {{"epsilon", 0}}}, "epsilon must be > 0"},
      {{"ftrl", {{"learning_rate", 0}}}, "learning_rate must be > 0"},
      {{"ftrl", {{"learning_rate_power", 0.5}}}, "learning_rate_power must be <= 0"},
      {{"ftrl", {{"l1_regularization_strength", -1}}}, "l1_regularization_strength must be >= 0"},
      {{"ftrl", {{"l2_regularization_strength", -1}}}, "l2_regularization_strength must be >= 0"},
      {{"ftrl", {{"l2_shrinkage_regularization_strength", -1}}}, "must be >= 0"},
      {{"ftrl", {{"beta", -1}}}, "beta must be >= 0"},
  };
  for (const auto& [spec, message] : cases) {
    CAPTURE(message);
    auto opt = MakeOptimizer(spec);
    REQUIRE_FALSE(opt.ok());
    CHECK(opt.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK_MESSAGE(opt.status().message().find(message) != absl::string_view::npos,
                  opt.status().message());
  }
}

TEST_CASE("ftrl leaves a weight at 0 where accumulator and l2 are both 0, as TF does") {
  // quad = accum^0.5 / lr + 2 * l2 is 0 here; TF's select returns 0 instead of dividing.
  auto opt = Make({"ftrl", {{"learning_rate", 0.1}, {"initial_accumulator_value", 0}}});
  Tensor value(Shape{1, 3});
  OptimizerSlots slots = opt->CreateSlots(value.shape());
  auto grad = Tensor::FromVector(Shape{1, 3}, {0.0f, 0.5f, 0.0f});
  REQUIRE(grad.ok());
  REQUIRE(opt->ApplyDense(value.view(), slots, *grad).ok());
  CHECK(value.values()[0] == 0.0f);
  CHECK(value.values()[2] == 0.0f);
  CHECK(Close(value.values()[1], -0.5 / (0.5 / 0.1), 1e-6));  // z = 0.5, n = 0.25
}

#if defined(__SSE__)
TEST_CASE("denormal slot values are flushed to zero and the caller's float mode is restored") {
  auto opt = Make({"momentum", {{"learning_rate", 0.1}, {"momentum", 0.5}}});
  Tensor value(Shape{2, 2}, 1.0f);
  OptimizerSlots slots = opt->CreateSlots(value.shape());
  const float denormal = 1e-39f;
  REQUIRE(std::fpclassify(denormal) == FP_SUBNORMAL);
  for (float& a : slots.tensors[0].values()) a = denormal;
  REQUIRE(opt->ApplyDense(value.view(), slots, Tensor(Shape{2, 2})).ok());
  for (float a : slots.tensors[0].values()) CHECK(a == 0.0f);  // 0.5 * denormal, flushed
  for (float w : value.values()) CHECK(w == 1.0f);
  volatile float x = denormal;
  CHECK(std::fpclassify(x * 0.5f) == FP_SUBNORMAL);  // the guard is gone
}
#endif

}  // namespace
}  // namespace tessera
