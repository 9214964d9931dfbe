#include "core/model/model.h"

#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tessera/model.h"
#include "tessera/ops.h"
#include "tessera/workloads/reference_models.h"
#include "tests/core/model_test_util.h"

namespace tessera {
namespace {

using Variables = std::map<std::string, Tensor>;

bool Contains(const absl::Status& status, const std::string& part) {
  return std::string(status.message()).find(part) != std::string::npos;
}

Variables InitVariables(const ModelSpec& spec) {
  Variables vars;
  for (const ParamSpec& p : spec.params) {
    auto value = MakeInitializedBlock(p.initializer, p.shape, 0, p.shape.rows());
    REQUIRE(value.ok());
    vars.emplace(p.name, std::move(*value));
  }
  return vars;
}

StepParams FullParams(const Variables& vars) {
  StepParams params;
  for (const auto& [name, value] : vars) params.full.emplace(name, value.view());
  return params;
}

Tensor Column(std::vector<float> values) {
  const int64_t n = static_cast<int64_t>(values.size());
  return *Tensor::FromVector(Shape{n, 1}, std::move(values));
}

Batch RecsysBatch(Ids users, Ids items, std::vector<float> labels) {
  Batch batch;
  batch.size = static_cast<int64_t>(users.size());
  batch.ids["user"] = std::move(users);
  batch.ids["item"] = std::move(items);
  batch.labels = Column(std::move(labels));
  return batch;
}

// The tiny recsys model used throughout, with initial values large enough that finite
// differences are meaningful (Keras' U(-0.05, 0.05) would leave every hidden unit within one
// eps of relu's kink).
ModelSpec TinyRecsysSpec() {
  RecsysModelOptions options;
  options.num_users = 5;
  options.num_items = 4;
  options.embedding_dim = 3;
  options.hidden_units = 4;
  options.seed = 1;  // chosen so no hidden unit of the FD batch sits near relu's kink
  ModelSpec spec = *RecsysModelSpec(options);
  for (ParamSpec& p : spec.params) {
    if (p.initializer.name == "random_uniform")
      p.initializer.params = {{"minval", -1}, {"maxval", 1}};
    if (p.initializer.name == "zeros")
      p.initializer = {"random_normal", {{"stddev", 0.5}}, p.initializer.seed + 1};
  }
  return spec;
}

// A model exercising every op; the base of the validation table.
//   e = embedding(user; emb)  c = concat(e, x)  h = dense(c; w1, b1; 4, relu)  t = tanh(h)
//   logits = dense(t; w2; 1)  p = sigmoid(logits)
ModelSpec AllOpsSpec() {
  ModelSpec spec;
  spec.name = "all_ops";
  spec.inputs = {{"user", InputKind::kIds, 1}, {"x", InputKind::kDense, 3}};
  spec.params = {
      {"emb", Shape{5, 2}, {"random_uniform", {{"minval", -1}, {"maxval", 1}}, 1}, true, true},
      {"w1", Shape{5, 4}, {"glorot_uniform", {}, 2}, true, false},
      {"b1", Shape{4}, {"random_normal", {{"stddev", 0.5}}, 3}, true, false},
      {"w2", Shape{4, 1}, {"glorot_uniform", {}, 4}, true, false}};
  spec.nodes = {{"e", kOpEmbedding, {"user"}, {"emb"}, {}, {}},
                {"c", kOpConcat, {"e", "x"}, {}, {}, {}},
                {"h", kOpDense, {"c"}, {"w1", "b1"}, {{"units", 4}}, {{"activation", "relu"}}},
                {"t", kOpTanh, {"h"}, {}, {}, {}},
                {"logits", kOpDense, {"t"}, {"w2"}, {{"units", 1}}, {}},
                {"p", kOpSigmoid, {"logits"}, {}, {}, {}}};
  spec.outputs = {{"logits", "logits"}, {"probability", "p"}};
  spec.loss = {"sigmoid_cross_entropy", "logits"};
  return spec;
}

struct SpecErrorCase {
  const char* name;
  std::function<void(ModelSpec&)> mutate;
  std::vector<std::string> message_parts;
};

TEST_CASE("an invalid model spec is InvalidArgument naming the offending node") {
  REQUIRE(Model::Create(AllOpsSpec()).ok());
  const std::vector<SpecErrorCase> cases = {
      {"unknown op",
       [](ModelSpec& s) { s.nodes[4].op = "conv"; },
       {"node 'logits' (conv): unknown op"}},
      {"dangling edge",
       [](ModelSpec& s) { s.nodes[3].inputs = {"nope"}; },
       {"node 't' (tanh): reads 'nope', which is no input or node"}},
      {"use before definition",
       [](ModelSpec& s) {
         s.nodes[1].inputs = {"e", "t"};
       },
       {"node 'c' (concat): reads 't' before its definition"}},
      {"a node reading itself",
       [](ModelSpec& s) { s.nodes[3].inputs = {"t"}; },
       {"node 't' (tanh): reads its own output"}},
      {"kernel shape mismatch",
       [](ModelSpec& s) {
         s.params[1].shape = Shape{6, 4};
       },
       {"node 'h' (dense): kernel 'w1' has shape [6, 4]", "expected [5, 4]", "(input widths 5)"}},
      {"units disagreeing with the kernel",
       [](ModelSpec& s) { s.nodes[2].attrs["units"] = 3; },
       {"node 'h'", "expected [5, 3]"}},
      {"bias shape mismatch",
       [](ModelSpec& s) { s.params[2].shape = Shape{3}; },
       {"node 'h' (dense): bias 'b1' has shape [3], expected [4]"}},
      {"duplicate node name",
       [](ModelSpec& s) { s.nodes[3].name = "h"; },
       {"node 'h' (tanh): the name is already used"}},
      {"node named like an input",
       [](ModelSpec& s) { s.nodes[0].name = "x"; },
       {"node 'x' (embedding): the name is already used"}},
      {"duplicate input",
       [](ModelSpec& s) { s.inputs.push_back(s.inputs[1]); },
       {"input 'x': the name is used twice"}},
      {"duplicate parameter",
       [](ModelSpec& s) { s.params.push_back(s.params[3]); },
       {"parameter 'w2': the name is used twice"}},
      {"unused parameter",
       [](ModelSpec& s) {
         s.params.push_back({"extra", Shape{2}, {"zeros", {}, 0}, true, false});
       },
       {"parameter 'extra' is not used by any node"}},
      {"parameter in two roles",
       [](ModelSpec& s) { s.nodes[4].params = {"emb"}; },
       {"node 'logits' (dense): uses parameter 'emb' as its kernel", "as its table"}},
      {"unknown parameter",
       [](ModelSpec& s) { s.nodes[4].params = {"w9"}; },
       {"node 'logits' (dense): unknown parameter 'w9'"}},
      {"embedding reading a dense input",
       [](ModelSpec& s) { s.nodes[0].inputs = {"x"}; },
       {"node 'e' (embedding): reads 'x', which is not an ids or id_list input"}},
      {"ids feeding a concat",
       [](ModelSpec& s) {
         s.nodes[1].inputs = {"e", "user"};
       },
       {"node 'c' (concat): reads ids input 'user'"}},
      {"missing units",
       [](ModelSpec& s) { s.nodes[2].attrs.clear(); },
       {"node 'h' (dense): missing attribute 'units'"}},
      {"fractional units",
       [](ModelSpec& s) { s.nodes[2].attrs["units"] = 2.5; },
       {"node 'h' (dense): attribute 'units' must be an integer >= 1"}},
      {"unknown attribute",
       [](ModelSpec& s) { s.nodes[3].attrs["units"] = 1; },
       {"node 't' (tanh): unknown attribute 'units'"}},
      {"unknown activation",
       [](ModelSpec& s) { s.nodes[2].string_attrs["activation"] = "gelu"; },
       {"node 'h' (dense): unknown activation 'gelu'"}},
      {"too many inputs",
       [](ModelSpec& s) {
         s.nodes[3].inputs = {"h", "h"};
       },
       {"node 't' (tanh): has 2 inputs, expected 1"}},
      {"a parameter on an activation",
       [](ModelSpec& s) { s.nodes[3].params = {"w2"}; },
       {"node 't' (tanh): has 1 parameter, expected 0"}},
      {"embedding table of rank 3",
       [](ModelSpec& s) {
         s.params[0].shape = Shape{5, 2, 1};
       },
       {"node 'e' (embedding): embedding table 'emb' must be [rows, dim]"}},
      {"a zero dimension",
       [](ModelSpec& s) {
         s.params[0].shape = Shape{0, 2};
       },
       {"parameter 'emb': shape [0, 2] has a dimension < 1"}},
      {"invalid initializer",
       [](ModelSpec& s) { s.params[3].initializer.name = "bogus"; },
       {"parameter 'w2'", "bogus"}},
      {"dense input of width 0",
       [](ModelSpec& s) { s.inputs[1].width = 0; },
       {"input 'x': width must be >= 1"}},
      {"output naming no node",
       [](ModelSpec& s) { s.outputs["bad"] = "x"; },
       {"output 'bad': 'x' is not a node"}},
      {"unknown loss", [](ModelSpec& s) { s.loss.kind = "hinge"; }, {"loss: unknown loss 'hinge'"}},
      {"loss on a missing node",
       [](ModelSpec& s) { s.loss.logits = "zzz"; },
       {"loss logits: 'zzz' is not a node"}},
      {"sigmoid loss on a wide node",
       [](ModelSpec& s) { s.loss.logits = "h"; },
       {"logits node 'h' is 4 wide, expected 1"}},
  };
  for (const SpecErrorCase& c : cases) {
    INFO(c.name);
    ModelSpec spec = AllOpsSpec();
    c.mutate(spec);
    auto model = Model::Create(spec);
    REQUIRE_FALSE(model.ok());
    CHECK(model.status().code() == absl::StatusCode::kInvalidArgument);
    for (const std::string& part : c.message_parts) {
      INFO(model.status().message());
      CHECK(Contains(model.status(), part));
    }
  }
}

// The tiny recsys model composed by hand from the layer kernels.
struct HandComposed {
  float loss = 0;
  RowMatrix logits, probability;
  SortedIds users, items;
  RowMatrix user_grad, item_grad;
  RowMatrix hidden_preactivation;
  Variables dense_grads;
};

HandComposed ComposeByHand(const Variables& v, const Batch& batch) {
  HandComposed out;
  const int64_t b = batch.size;
  const int64_t d = v.at("user_embedding").row_size();
  const int64_t h = v.at("hidden/bias").size();
  RowMatrix u(b, d), i(b, d), f(b, 2 * d), hidden(b, h);
  EmbeddingForward(RowAddresses(v.at("user_embedding").matrix(), batch.ids.at("user")), u);
  EmbeddingForward(RowAddresses(v.at("item_embedding").matrix(), batch.ids.at("item")), i);
  ConcatForward(std::vector<ConstMatrixRef>{u, i}, f);
  out.hidden_preactivation = f * v.at("hidden/kernel").matrix();
  out.hidden_preactivation.rowwise() +=
      Eigen::Map<const Eigen::RowVectorXf>(v.at("hidden/bias").data(), h);
  DenseForward(f, v.at("hidden/kernel").matrix(), v.at("hidden/bias").values(), Activation::kRelu,
               hidden);
  out.logits.resize(b, 1);
  DenseForward(hidden, v.at("logits/kernel").matrix(), v.at("logits/bias").values(),
               Activation::kLinear, out.logits);
  out.probability.resize(b, 1);
  ActivationForward(Activation::kSigmoid, out.logits, out.probability);
  RowMatrix dlogits(b, 1);
  MatrixRef dlogits_ref(dlogits);
  out.loss = *SigmoidCrossEntropyWithLogits(out.logits, batch.labels.matrix(), &dlogits_ref);

  for (const char* name : {"hidden/kernel", "hidden/bias", "logits/kernel", "logits/bias"}) {
    out.dense_grads.emplace(name, Tensor(v.at(name).shape()));
  }
  RowMatrix dz(b, 1), dhidden = RowMatrix::Zero(b, h);
  MatrixRef dw2(out.dense_grads["logits/kernel"].matrix());
  MatrixRef dhidden_ref(dhidden);
  DenseBackward(hidden, v.at("logits/kernel").matrix(), out.logits, dlogits, Activation::kLinear,
                dz, &dw2, out.dense_grads["logits/bias"].values(), &dhidden_ref);
  RowMatrix dz1(b, h), df = RowMatrix::Zero(b, 2 * d);
  MatrixRef dw1(out.dense_grads["hidden/kernel"].matrix());
  MatrixRef df_ref(df);
  DenseBackward(f, v.at("hidden/kernel").matrix(), hidden, dhidden, Activation::kRelu, dz1, &dw1,
                out.dense_grads["hidden/bias"].values(), &df_ref);
  std::vector<int64_t> user_slots, item_slots;
  UniqueIds(batch.ids.at("user"), out.users, user_slots);
  UniqueIds(batch.ids.at("item"), out.items, item_slots);
  out.user_grad = RowMatrix::Zero(static_cast<int64_t>(out.users.size()), d);
  out.item_grad = RowMatrix::Zero(static_cast<int64_t>(out.items.size()), d);
  EmbeddingBackward(user_slots, df.leftCols(d), out.user_grad);
  EmbeddingBackward(item_slots, df.rightCols(d), out.item_grad);
  return out;
}

void CheckSameMatrix(ConstMatrixRef got, ConstMatrixRef want) {
  REQUIRE(got.rows() == want.rows());
  REQUIRE(got.cols() == want.cols());
  for (int64_t r = 0; r < got.rows(); ++r) {
    for (int64_t c = 0; c < got.cols(); ++c) CHECK(got(r, c) == doctest::Approx(want(r, c)));
  }
}

TEST_CASE("the model's forward and backward equal the hand-composed layer chain") {
  const ModelSpec spec = TinyRecsysSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  // User 1 appears three times, item 2 twice: their gradient rows must be sums.
  const Batch batch = RecsysBatch({1, 3, 1, 1}, {0, 2, 2, 3}, {1, 0, 1, 0});
  auto result = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE(result.ok());
  const HandComposed want = ComposeByHand(vars, batch);

  CHECK(result->loss == doctest::Approx(want.loss));
  CheckSameMatrix(result->outputs.at("logits").matrix(), want.logits);
  CheckSameMatrix(result->outputs.at("probability").matrix(), want.probability);
  CHECK(result->dense_gradients.size() == 4);
  for (const auto& [name, grad] : want.dense_grads) {
    INFO(name);
    CheckSameMatrix(result->dense_gradients.at(name).matrix(), grad.matrix());
  }
  REQUIRE(result->sparse_gradients.size() == 2);
  const IndexedSlices& users = result->sparse_gradients.at("user_embedding");
  CHECK(users.indices == Ids{1, 3});
  CHECK(users.indices == want.users.ids());
  CheckSameMatrix(users.values.matrix(), want.user_grad);
  const IndexedSlices& items = result->sparse_gradients.at("item_embedding");
  CHECK(items.indices == Ids{0, 2, 3});
  CheckSameMatrix(items.values.matrix(), want.item_grad);
}

// Central differences of the model's mean loss with respect to every element of `var`.
RowMatrix NumericGradient(const Model& model, Variables& vars, const std::string& name,
                          const Batch& batch) {
  constexpr float kEps = 1e-2f;
  Tensor& var = vars.at(name);
  RowMatrix grad(var.rows(), var.row_size());
  for (int64_t k = 0; k < var.size(); ++k) {
    const float saved = var.data()[k];
    var.data()[k] = saved + kEps;
    const double plus = *model.Forward(batch, FullParams(vars))->loss;
    var.data()[k] = saved - kEps;
    const double minus = *model.Forward(batch, FullParams(vars))->loss;
    var.data()[k] = saved;
    grad.data()[k] = static_cast<float>((plus - minus) / (2.0 * kEps));
  }
  return grad;
}

TEST_CASE("the whole recsys model's gradients match finite differences") {
  const ModelSpec spec = TinyRecsysSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  Variables vars = InitVariables(spec);
  const Batch batch = RecsysBatch({1, 3, 1, 0}, {0, 2, 2, 3}, {1, 0, 0, 1});
  // Precondition of a meaningful check: no hidden unit within reach of relu's kink.
  const HandComposed hand = ComposeByHand(vars, batch);
  REQUIRE(hand.hidden_preactivation.cwiseAbs().minCoeff() > 0.05f);
  auto result = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE(result.ok());
  for (const ParamSpec& p : spec.params) {
    INFO(p.name);
    RowMatrix analytic = RowMatrix::Zero(p.shape.rows(), p.shape.row_size());
    auto sparse = result->sparse_gradients.find(p.name);
    if (sparse != result->sparse_gradients.end()) {
      // Rows the batch does not touch must have a zero numeric gradient.
      for (size_t k = 0; k < sparse->second.indices.size(); ++k) {
        analytic.row(sparse->second.indices[k]) = sparse->second.values.matrix().row(k);
      }
    } else {
      analytic = result->dense_gradients.at(p.name).matrix();
    }
    const RowMatrix numeric = NumericGradient(*model, vars, p.name, batch);
    for (int64_t k = 0; k < analytic.size(); ++k) {
      INFO("element " << k);
      CHECK(analytic.data()[k] == doctest::Approx(numeric.data()[k]).epsilon(1e-2).scale(0.1));
    }
  }
}

TEST_CASE("a table shared by two lookups sums both lookups' gradients per id") {
  ModelSpec spec;
  spec.inputs = {{"a", InputKind::kIds, 1}, {"b", InputKind::kIds, 1}};
  spec.params = {
      {"table", Shape{4, 2}, {"random_uniform", {{"minval", -1}, {"maxval", 1}}, 5}, true, true},
      {"w", Shape{4, 1}, {"glorot_uniform", {}, 6}, true, false}};
  spec.nodes = {{"ea", kOpEmbedding, {"a"}, {"table"}, {}, {}},
                {"eb", kOpEmbedding, {"b"}, {"table"}, {}, {}},
                {"c", kOpConcat, {"ea", "eb"}, {}, {}, {}},
                {"logits", kOpDense, {"c"}, {"w"}, {{"units", 1}}, {}}};
  spec.loss = {"sigmoid_cross_entropy", "logits"};
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  Variables vars = InitVariables(spec);
  Batch batch;
  batch.size = 2;
  batch.ids["a"] = {2, 0};
  batch.ids["b"] = {2, 3};
  batch.labels = Column({1, 0});
  auto needed = model->RowsNeeded(batch);
  REQUIRE(needed.ok());
  CHECK(needed->at("table").ids() == Ids{0, 2, 3});
  auto result = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE(result.ok());
  const IndexedSlices& grad = result->sparse_gradients.at("table");
  CHECK(grad.indices == Ids{0, 2, 3});
  const RowMatrix numeric = NumericGradient(*model, vars, "table", batch);
  for (size_t k = 0; k < grad.indices.size(); ++k) {
    for (int c = 0; c < 2; ++c) {
      CHECK(grad.values.matrix()(k, c) ==
            doctest::Approx(numeric(grad.indices[k], c)).epsilon(1e-2).scale(0.1));
    }
  }
  CHECK(numeric.row(1).isZero());
}

TEST_CASE("gathered embedding rows give exactly the whole-table result") {
  const ModelSpec spec = TinyRecsysSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  const Batch batch = RecsysBatch({4, 0, 4}, {3, 3, 1}, {0, 1, 1});
  auto needed = model->RowsNeeded(batch);
  REQUIRE(needed.ok());
  REQUIRE(needed->size() == 2);
  CHECK(needed->at("user_embedding").ids() == Ids{0, 4});
  CHECK(needed->at("item_embedding").ids() == Ids{1, 3});

  testing::GatheredParams gathered_params = testing::Gather(vars, *needed);
  StepParams& params = gathered_params.params;
  auto gathered = model->ForwardBackward(batch, params);
  REQUIRE(gathered.ok());
  auto full = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE(full.ok());
  testing::CheckSameStep(*gathered, *full);
  auto forward = model->Forward(batch, params);
  REQUIRE(forward.ok());
  CHECK(forward->outputs.at("logits").matrix() == full->outputs.at("logits").matrix());

  // The rows in several blocks, as the replies of that many shards (3: one block is empty).
  for (int64_t blocks : {2, 3}) {
    CAPTURE(blocks);
    testing::GatheredParams in_blocks = testing::Gather(vars, *needed, blocks);
    CHECK(in_blocks.params.gathered.at("user_embedding").blocks.size() ==
          static_cast<size_t>(blocks));
    auto from_blocks = model->ForwardBackward(batch, in_blocks.params);
    REQUIRE(from_blocks.ok());
    testing::CheckSameStep(*from_blocks, *full);
  }

  // Rows for other ids than the batch needs are refused.
  const Ids too_few = {4};
  Tensor one_row(Shape{1, 3});
  params.gathered["user_embedding"] = EmbeddingRows{too_few, {one_row.view()}};
  auto mismatch = model->ForwardBackward(batch, params);
  CHECK(mismatch.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(mismatch.status(), "gathered rows of 'user_embedding' are for 1 ids"));
}

struct CallErrorCase {
  const char* name;
  std::function<void(Batch&, StepParams&)> mutate;
  const char* message_part;
};

// Note [Concat in place] in core/model/model.cc: embeddings read only by a concat write into its
// columns. The same model with the embeddings also named as outputs (so read twice, and copied)
// must compute the same bits.
TEST_CASE("embeddings written in place into a concat give the bits of embeddings copied into it") {
  ModelSpec in_place;
  in_place.inputs = {
      {"user", InputKind::kIds, 1}, {"tags", InputKind::kIdList, 1}, {"x", InputKind::kDense, 3}};
  in_place.params = {
      {"user_emb", Shape{5, 2}, {"random_uniform", {{"minval", -1}, {"maxval", 1}}, 1}, true, true},
      {"tag_emb", Shape{6, 3}, {"random_uniform", {{"minval", -1}, {"maxval", 1}}, 2}, true, true},
      {"w1", Shape{8, 4}, {"glorot_uniform", {}, 3}, true, false},
      {"b1", Shape{4}, {"random_normal", {{"stddev", 0.5}}, 4}, true, false},
      {"w2", Shape{4, 1}, {"glorot_uniform", {}, 5}, true, false}};
  // The dense input first, so the embeddings sit at column offsets 3 and 5.
  in_place.nodes = {{"eu", kOpEmbedding, {"user"}, {"user_emb"}, {}, {}},
                    {"et", kOpEmbedding, {"tags"}, {"tag_emb"}, {}, {{"combiner", "sqrtn"}}},
                    {"c", kOpConcat, {"x", "eu", "et"}, {}, {}, {}},
                    {"h", kOpDense, {"c"}, {"w1", "b1"}, {{"units", 4}}, {{"activation", "relu"}}},
                    {"logits", kOpDense, {"h"}, {"w2"}, {{"units", 1}}, {}}};
  in_place.outputs = {{"logits", "logits"}, {"joined", "c"}};
  in_place.loss = {"sigmoid_cross_entropy", "logits"};
  ModelSpec copied = in_place;
  copied.outputs.emplace("user_vector", "eu");
  copied.outputs.emplace("tag_vector", "et");
  auto a = Model::Create(in_place);
  auto b = Model::Create(copied);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  const Variables vars = InitVariables(in_place);
  Batch batch;
  batch.size = 3;
  batch.ids["user"] = {4, 1, 4};
  batch.id_lists["tags"] = IdList{{0, 2, 2, 5}, {0, 5, 0, 3, 1}, {}};
  batch.dense["x"] = *Tensor::FromVector(Shape{3, 3}, {1, -2, 3, 0.5, 0, -1, 2, 2, -0.5});
  batch.labels = Column({1, 0, 1});

  auto from_a = a->ForwardBackward(batch, FullParams(vars));
  auto from_b = b->ForwardBackward(batch, FullParams(vars));
  REQUIRE(from_a.ok());
  REQUIRE(from_b.ok());
  testing::CheckSameStep(*from_a, *from_b);
  CHECK(from_a->outputs.at("logits").matrix() == from_b->outputs.at("logits").matrix());
  const RowMatrix joined = from_a->outputs.at("joined").matrix();
  CHECK(joined == from_b->outputs.at("joined").matrix());
  // The concat's columns hold x, then the user's row, then the tags' sqrtn-combined rows.
  CHECK(joined.leftCols(3) == batch.dense["x"].matrix());
  CHECK(joined.middleCols(3, 2) == from_b->outputs.at("user_vector").matrix());
  CHECK(joined.row(0).segment(3, 2) == vars.at("user_emb").matrix().row(4));
  CHECK(joined.rightCols(3) == from_b->outputs.at("tag_vector").matrix());
  CHECK(joined.row(1).tail(3).isZero());  // an empty bag

  // Gathered rows, and a workspace reused across both models' steps.
  auto needed = a->RowsNeeded(batch);
  REQUIRE(needed.ok());
  testing::GatheredParams gathered = testing::Gather(vars, *needed);
  StepWorkspace ws;
  StepResult gathered_a;
  StepResult gathered_b;
  REQUIRE(a->ForwardBackward(batch, gathered.params, ws, gathered_a).ok());
  REQUIRE(b->ForwardBackward(batch, gathered.params, ws, gathered_b).ok());
  testing::CheckSameStep(gathered_a, *from_a);
  testing::CheckSameStep(gathered_b, *from_a);
  auto forward = a->Forward(batch, gathered.params);
  REQUIRE(forward.ok());
  CHECK(forward->outputs.at("joined").matrix() == joined);

  // The gathered rows in blocks, as several shards reply (7: some blocks are empty), bags too.
  for (int64_t blocks : {2, 3, 7}) {
    CAPTURE(blocks);
    testing::GatheredParams in_blocks = testing::Gather(vars, *needed, blocks);
    StepResult from_blocks;
    REQUIRE(a->ForwardBackward(batch, in_blocks.params, ws, from_blocks).ok());
    testing::CheckSameStep(from_blocks, *from_a);
    CHECK(from_blocks.outputs.at("joined").matrix() == joined);
  }
}

TEST_CASE("bad batches and parameters are InvalidArgument naming what is wrong") {
  const ModelSpec spec = AllOpsSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  Batch base;
  base.size = 2;
  base.ids["user"] = {1, 4};
  base.dense["x"] = Tensor(Shape{2, 3}, 0.5f);
  base.labels = Column({0, 1});
  REQUIRE(model->ForwardBackward(base, FullParams(vars)).ok());
  Tensor wrong_shape(Shape{5, 3});
  const Ids two_ids = {1, 4};
  Tensor two_rows(Shape{2, 1});
  Tensor one_row(Shape{1, 2});  // emb is [5, 2]
  Tensor wide_two(Shape{2, 2});
  const std::vector<CallErrorCase> cases = {
      {"empty batch", [](Batch& b, StepParams&) { b.size = 0; }, "size must be >= 1, got 0"},
      {"missing ids feature", [](Batch& b, StepParams&) { b.ids.clear(); },
       "missing ids feature 'user'"},
      {"too few ids", [](Batch& b, StepParams&) { b.ids["user"] = {1}; },
       "ids feature 'user' has 1 ids, expected 2"},
      {"dense feature of the wrong width",
       [](Batch& b, StepParams&) {
         b.dense["x"] = Tensor(Shape{2, 4});
       },
       "dense feature 'x' has shape [2, 4], expected [2, 3]"},
      {"id out of range",
       [](Batch& b, StepParams&) {
         b.ids["user"] = {1, 5};
       },
       "node 'e': id 5 of example 1 (feature 'user') is out of range [0, 5)"},
      {"negative id",
       [](Batch& b, StepParams&) {
         b.ids["user"] = {-1, 0};
       },
       "id -1 of example 0"},
      {"missing labels", [](Batch& b, StepParams&) { b.labels = Tensor(); },
       "labels have shape [0], expected [2, 1]"},
      {"invalid label",
       [](Batch& b, StepParams&) {
         b.labels = Column({0, 2});
       },
       "label 2 of example 1 is outside [0, 1]"},
      {"missing parameter", [](Batch&, StepParams& p) { p.full.erase("w1"); },
       "parameter 'w1' is missing"},
      {"unknown parameter",
       [&](Batch&, StepParams& p) { p.full.emplace("w9", wrong_shape.view()); },
       "unknown parameter 'w9'"},
      {"parameter of the wrong shape",
       [&](Batch&, StepParams& p) { p.full["w1"] = wrong_shape.view(); },
       "parameter 'w1': shape [5, 3] does not match expected [5, 4]"},
      {"dense parameter gathered",
       [&](Batch&, StepParams& p) {
         p.full.erase("w2");
         p.gathered.emplace("w2", EmbeddingRows{two_ids, {two_rows.view()}});
       },
       "'w2' is a dense parameter"},
      {"table given twice",
       [&](Batch&, StepParams& p) {
         p.gathered.emplace("emb", EmbeddingRows{two_ids, {two_rows.view()}});
       },
       "parameter 'emb' is given both whole and gathered"},
      {"gathered rows of the wrong width",
       [&](Batch&, StepParams& p) {
         p.full.erase("emb");
         p.gathered.emplace("emb", EmbeddingRows{two_ids, {two_rows.view()}});
       },
       "gathered rows of 'emb', block 0: shape [2, 1] does not match expected [2, 2]"},
      {"gathered blocks of fewer rows than ids",
       [&](Batch&, StepParams& p) {
         p.full.erase("emb");
         p.gathered.emplace("emb", EmbeddingRows{two_ids, {one_row.view()}});
       },
       "gathered rows of 'emb': 1 rows for 2 ids"},
      {"gathered blocks of more rows than ids",
       [&](Batch&, StepParams& p) {
         p.full.erase("emb");
         p.gathered.emplace("emb", EmbeddingRows{two_ids, {one_row.view(), wide_two.view()}});
       },
       "gathered rows of 'emb': 3 rows for 2 ids"},
  };
  for (const CallErrorCase& c : cases) {
    INFO(c.name);
    Batch batch = base;
    StepParams params = FullParams(vars);
    c.mutate(batch, params);
    auto result = model->ForwardBackward(batch, params);
    REQUIRE_FALSE(result.ok());
    CHECK(result.status().code() == absl::StatusCode::kInvalidArgument);
    INFO(result.status().message());
    CHECK(Contains(result.status(), c.message_part));
  }
}

TEST_CASE("forward alone gives the step's outputs, and the loss only when labels are given") {
  const ModelSpec spec = AllOpsSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  Batch batch;
  batch.size = 3;
  batch.ids["user"] = {0, 2, 2};
  batch.dense["x"] = *Tensor::FromVector(Shape{3, 3}, {1, -1, 0.5, 0, 2, -2, 0.3, 0.3, 0.3});
  batch.labels = Column({1, 0, 1});
  auto step = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE(step.ok());
  auto forward = model->Forward(batch, FullParams(vars));
  REQUIRE(forward.ok());
  REQUIRE(forward->loss.has_value());
  CHECK(*forward->loss == step->loss);
  CHECK(forward->outputs.at("probability").matrix() == step->outputs.at("probability").matrix());
  for (int b = 0; b < 3; ++b) {
    const float logit = step->outputs.at("logits").matrix()(b, 0);
    CHECK(step->outputs.at("probability").matrix()(b, 0) ==
          doctest::Approx(1.0 / (1.0 + std::exp(-logit))));
  }
  batch.labels = Tensor();
  auto serving = model->Forward(batch, FullParams(vars));
  REQUIRE(serving.ok());
  CHECK_FALSE(serving->loss.has_value());
  CHECK(serving->outputs.at("logits").matrix() == step->outputs.at("logits").matrix());
}

TEST_CASE("a frozen parameter gets no gradient and stops backpropagation below it") {
  ModelSpec spec = AllOpsSpec();
  spec.params[0].trainable = false;  // emb
  spec.params[1].trainable = false;  // w1
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  Batch batch;
  batch.size = 1;
  batch.ids["user"] = {3};
  batch.dense["x"] = Tensor(Shape{1, 3}, 1.0f);
  batch.labels = Column({1});
  auto result = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE(result.ok());
  CHECK(result->sparse_gradients.empty());
  CHECK(result->dense_gradients.count("w1") == 0);
  CHECK(result->dense_gradients.count("b1") == 1);
  CHECK(result->dense_gradients.count("w2") == 1);
}

TEST_CASE("a reused workspace and result give the same values without reallocating") {
  const ModelSpec spec = TinyRecsysSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  const StepParams params = FullParams(vars);
  const Batch first = RecsysBatch({1, 2, 3}, {0, 1, 2}, {1, 0, 1});
  const Batch second = RecsysBatch({4, 4, 0}, {3, 3, 3}, {0, 0, 1});
  StepWorkspace ws;
  StepResult result;
  REQUIRE(model->ForwardBackward(first, params, ws, result).ok());
  const float* kernel_grad = result.dense_gradients.at("hidden/kernel").data();
  REQUIRE(model->ForwardBackward(second, params, ws, result).ok());
  CHECK(result.dense_gradients.at("hidden/kernel").data() == kernel_grad);
  auto fresh = model->ForwardBackward(second, params);
  REQUIRE(fresh.ok());
  CHECK(result.loss == fresh->loss);
  CHECK(result.sparse_gradients.at("item_embedding").indices == Ids{3});
  CHECK(result.sparse_gradients.at("user_embedding").values.matrix() ==
        fresh->sparse_gradients.at("user_embedding").values.matrix());
  CHECK(result.dense_gradients.at("hidden/kernel").matrix() ==
        fresh->dense_gradients.at("hidden/kernel").matrix());
}

TEST_CASE("a gradient sink takes the dense gradients in place, all gradients scaled") {
  const ModelSpec spec = TinyRecsysSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  const Batch batch = RecsysBatch({1, 2, 3, 1}, {0, 1, 2, 2}, {1, 0, 1, 0});
  auto plain = model->ForwardBackward(batch, FullParams(vars));
  REQUIRE(plain.ok());
  // A power of two: scaling dLoss/dlogits then is exactly scaling every gradient after.
  constexpr float kScale = 0.25f;
  GradientSink sink;
  sink.scale = kScale;
  sink.dense.assign(spec.params.size(), nullptr);
  std::map<std::string, std::vector<float>> placed;
  for (size_t p = 0; p < spec.params.size(); ++p) {
    const ParamSpec& param = spec.params[p];
    if (model->IsEmbedding(static_cast<int>(p)) || param.name == "hidden/bias") continue;
    std::vector<float>& memory = placed[param.name];
    memory.assign(static_cast<size_t>(param.shape.num_elements()), 123.0f);  // overwritten
    sink.dense[p] = memory.data();
  }
  REQUIRE(placed.size() >= 2);
  StepWorkspace ws;
  StepResult result;
  REQUIRE(model->ForwardBackward(batch, FullParams(vars), ws, result).ok());  // entries to drop
  REQUIRE(model->ForwardBackward(batch, FullParams(vars), ws, result, sink).ok());
  CHECK(result.loss == plain->loss);  // the loss itself is not scaled
  for (const auto& [name, memory] : placed) {
    CAPTURE(name);
    CHECK(result.dense_gradients.count(name) == 0);
    const Tensor& expected = plain->dense_gradients.at(name);
    for (size_t i = 0; i < memory.size(); ++i) CHECK(memory[i] == expected.data()[i] * kScale);
  }
  // Not in the sink: still in the result, scaled too.
  const Tensor& bias = result.dense_gradients.at("hidden/bias");
  for (int64_t i = 0; i < bias.size(); ++i) {
    CHECK(bias.data()[i] == plain->dense_gradients.at("hidden/bias").data()[i] * kScale);
  }
  for (const auto& [name, slices] : plain->sparse_gradients) {
    CAPTURE(name);
    const IndexedSlices& scaled = result.sparse_gradients.at(name);
    CHECK(scaled.indices == slices.indices);
    CHECK(scaled.values.matrix() == slices.values.matrix() * kScale);
  }
}

TEST_CASE("a lookup plan left by RowsNeeded is reused only for the batch it fits") {
  // A worker plans with RowsNeeded(batch, ws), gathers, then runs ForwardBackward with the same
  // workspace: the carried plan must give exactly a fresh step's result, and a workspace planned
  // for another batch (or another table size) must be re-planned, never trusted.
  const ModelSpec spec = TinyRecsysSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  const StepParams params = FullParams(vars);
  const Batch batch = RecsysBatch({4, 0, 4, 2}, {3, 3, 1, 0}, {0, 1, 1, 0});
  const Batch other = RecsysBatch({1, 0, 4, 2}, {3, 3, 1, 0}, {0, 1, 1, 0});  // one id differs
  const Batch permuted = RecsysBatch({4, 4, 0, 2}, {3, 1, 3, 0}, {0, 1, 1, 0});
  auto fresh = model->ForwardBackward(batch, params);
  REQUIRE(fresh.ok());
  auto check_same_as_fresh = [&](const Batch& b, StepWorkspace& ws) {
    auto want = model->ForwardBackward(b, params);
    REQUIRE(want.ok());
    StepResult result;
    REQUIRE(model->ForwardBackward(b, params, ws, result).ok());
    CHECK(result.loss == want->loss);
    for (const auto& [name, grad] : want->sparse_gradients) {
      CHECK(result.sparse_gradients.at(name).indices == grad.indices);
      CHECK(result.sparse_gradients.at(name).values.matrix() == grad.values.matrix());
    }
    CHECK(result.dense_gradients.at("hidden/kernel").matrix() ==
          want->dense_gradients.at("hidden/kernel").matrix());
  };
  SUBCASE("the same batch reuses the plan and gets the fresh result") {
    StepWorkspace ws;
    auto needed = model->RowsNeeded(batch, ws);
    REQUIRE(needed.ok());
    CHECK(needed->at("user_embedding").ids() == Ids{0, 2, 4});
    CHECK(needed->at("item_embedding").ids() == Ids{0, 1, 3});
    check_same_as_fresh(batch, ws);
  }
  SUBCASE("another batch, even a permutation of the same ids, is planned anew") {
    for (const Batch* b : {&other, &permuted}) {
      StepWorkspace ws;
      REQUIRE(model->RowsNeeded(batch, ws).ok());
      check_same_as_fresh(*b, ws);
    }
  }
  SUBCASE("a batch with fewer distinct ids than the plan is planned anew") {
    const Batch fewer = RecsysBatch({4, 4, 4, 4}, {3, 3, 3, 3}, {0, 1, 1, 0});
    StepWorkspace ws;
    REQUIRE(model->RowsNeeded(batch, ws).ok());
    check_same_as_fresh(fewer, ws);
  }
  SUBCASE("a bad id after a good plan is still InvalidArgument") {
    StepWorkspace ws;
    REQUIRE(model->RowsNeeded(batch, ws).ok());
    const Batch bad = RecsysBatch({4, 0, 99, 2}, {3, 3, 1, 0}, {0, 1, 1, 0});
    StepResult result;
    CHECK(model->ForwardBackward(bad, params, ws, result).code() ==
          absl::StatusCode::kInvalidArgument);
    check_same_as_fresh(batch, ws);  // and the workspace still works afterwards
  }
  SUBCASE("gathered rows with a carried plan equal the whole-table step") {
    StepWorkspace ws;
    auto needed = model->RowsNeeded(batch, ws);
    REQUIRE(needed.ok());
    Variables gathered_rows;
    StepParams gathered;
    for (const auto& [name, value] : vars) {
      auto ids = needed->find(name);
      if (ids == needed->end()) {
        gathered.full.emplace(name, value.view());
        continue;
      }
      Tensor rows(value.shape().WithRows(static_cast<int64_t>(ids->second.size())));
      for (size_t k = 0; k < ids->second.size(); ++k) {
        rows.matrix().row(k) = value.matrix().row(ids->second[k]);
      }
      gathered_rows.emplace(name, std::move(rows));
      gathered.gathered.emplace(name, EmbeddingRows{ids->second, {gathered_rows.at(name).view()}});
    }
    StepResult result;
    REQUIRE(model->ForwardBackward(batch, gathered, ws, result).ok());
    CHECK(result.loss == fresh->loss);
    CHECK(result.sparse_gradients.at("user_embedding").values.matrix() ==
          fresh->sparse_gradients.at("user_embedding").values.matrix());
  }
}

TEST_CASE("one model serves concurrent steps from several threads") {
  const ModelSpec spec = TinyRecsysSpec();
  auto model = Model::Create(spec);
  REQUIRE(model.ok());
  const Variables vars = InitVariables(spec);
  const StepParams params = FullParams(vars);
  const Batch batch = RecsysBatch({1, 2, 3, 4}, {0, 1, 2, 3}, {1, 0, 1, 0});
  auto expected = model->ForwardBackward(batch, params);
  REQUIRE(expected.ok());
  std::vector<float> losses(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      StepWorkspace ws;
      StepResult result;
      for (int k = 0; k < 50; ++k) {
        if (!model->ForwardBackward(batch, params, ws, result).ok()) return;
      }
      losses[t] = result.loss;
    });
  }
  for (std::thread& t : threads) t.join();
  for (float loss : losses) CHECK(loss == expected->loss);
}

}  // namespace
}  // namespace tessera
