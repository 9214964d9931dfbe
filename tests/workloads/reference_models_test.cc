#include "tessera/workloads/reference_models.h"

#include <doctest/doctest.h>

#include <set>
#include <string>

#include "core/model/model.h"

namespace tessera {
namespace {

bool Contains(const absl::Status& status, const std::string& part) {
  return std::string(status.message()).find(part) != std::string::npos;
}

TEST_CASE("the reference specs are valid, Keras-initialized and seeded from one model seed") {
  RecsysModelOptions recsys;
  recsys.seed = 7;
  auto spec = RecsysModelSpec(recsys);
  REQUIRE(spec.ok());
  auto model = Model::Create(*spec);
  REQUIRE(model.ok());
  REQUIRE(spec->params.size() == 6);
  CHECK(spec->params[0].name == "user_embedding");
  CHECK(spec->params[0].shape == Shape{100000, 32});
  CHECK(spec->params[0].partitioned);
  CHECK(spec->params[0].initializer.name == "random_uniform");
  CHECK(spec->params[1].shape == Shape{10000, 32});
  CHECK(spec->params[2].name == "hidden/kernel");
  CHECK(spec->params[2].shape == Shape{64, 64});
  CHECK(spec->params[2].initializer.name == "glorot_uniform");
  CHECK_FALSE(spec->params[2].partitioned);
  CHECK(spec->params[3].initializer.name == "zeros");
  CHECK(spec->params[4].shape == Shape{64, 1});
  CHECK(model->IsEmbedding(0));
  CHECK_FALSE(model->IsEmbedding(2));
  CHECK(*model->ParamIndex("logits/bias") == 5);
  CHECK(model->ParamIndex("nope").status().code() == absl::StatusCode::kNotFound);
  CHECK(spec->outputs.count("probability") == 1);
  std::set<uint64_t> seeds;
  for (const ParamSpec& p : spec->params) seeds.insert(p.initializer.seed);
  CHECK(seeds.size() == 6);
  CHECK(*RecsysModelSpec(recsys) == *spec);
  recsys.seed = 8;
  CHECK(RecsysModelSpec(recsys)->params[0].initializer.seed != spec->params[0].initializer.seed);

  auto mlp = MlpModelSpec(MlpModelOptions{});
  REQUIRE(mlp.ok());
  REQUIRE(Model::Create(*mlp).ok());
  CHECK(mlp->inputs[0].name == "pixels");
  CHECK(mlp->inputs[0].width == 784);
  CHECK(mlp->params.size() == 6);
  CHECK(mlp->params[2].shape == Shape{256, 128});
  CHECK(mlp->params[4].shape == Shape{128, 10});
  CHECK(mlp->loss.kind == "softmax_cross_entropy");
  CHECK(mlp->outputs.count("probabilities") == 1);

  recsys.embedding_dim = 0;
  auto bad = RecsysModelSpec(recsys);
  CHECK(bad.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(Contains(bad.status(), "embedding_dim"));
  MlpModelOptions one_class;
  one_class.num_classes = 1;
  CHECK(MlpModelSpec(one_class).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera
