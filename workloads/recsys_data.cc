#include "workloads/recsys_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/metrics.h"
#include "core/random.h"
#include "core/status.h"

namespace tessera {
namespace {

constexpr int64_t kMaxPlantedFloats = int64_t{1} << 30;
constexpr int64_t kMaxSplitExamples = int64_t{1} << 30;
// Philox streams: the model and each split draw from their own stream.
constexpr uint64_t kModelStream = 0;
constexpr uint64_t kTrainStream = 1;
constexpr uint64_t kTestStream = 2;

// floor(n * x^3) for x ~ U(0, 1); the min guards the rounding of n * x^3 up to n.
int64_t DrawHotId(PhiloxStream& rng, int64_t n) {
  const double x = rng.Uniform();
  return std::min(n - 1, static_cast<int64_t>(static_cast<double>(n) * x * x * x));
}

Tensor NormalTensor(PhiloxStream& rng, Shape shape, double stddev) {
  Tensor t(std::move(shape));
  for (float& v : t.values()) v = static_cast<float>(stddev * rng.Normal());
  return t;
}

absl::StatusOr<Dataset> MakeDataset(RecsysExamples& examples) {
  const int64_t n = static_cast<int64_t>(examples.labels.size());
  Batch columns;
  columns.size = n;
  columns.ids.emplace(kRecsysUserFeature, std::move(examples.users));
  columns.ids.emplace(kRecsysItemFeature, std::move(examples.items));
  ASSIGN_OR_RETURN(columns.labels, Tensor::FromVector(Shape{n, 1}, std::move(examples.labels)));
  return Dataset::Create(std::move(columns));
}

}  // namespace

absl::Status ValidateRecsysConfig(const RecsysConfig& c) {
  auto at_least = [](int64_t value, int64_t min, absl::string_view name) -> absl::Status {
    if (value >= min) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("recsys config: ", name, " is ", value, ", must be >= ", min));
  };
  RETURN_IF_ERROR(at_least(c.num_users, 1, "num_users"));
  RETURN_IF_ERROR(at_least(c.num_items, 1, "num_items"));
  RETURN_IF_ERROR(at_least(c.latent_dim, 1, "latent_dim"));
  RETURN_IF_ERROR(at_least(c.num_train, 0, "num_train"));
  RETURN_IF_ERROR(at_least(c.num_test, 0, "num_test"));
  if (!(c.bias_stddev >= 0) || !std::isfinite(c.bias_stddev)) {
    return absl::InvalidArgumentError(
        absl::StrCat("recsys config: bias_stddev is ", c.bias_stddev, ", must be finite and >= 0"));
  }
  // Compared by division, so that absurd sizes cannot overflow the product.
  if (c.num_users > kMaxPlantedFloats || c.num_items > kMaxPlantedFloats ||
      c.latent_dim > kMaxPlantedFloats ||
      c.latent_dim + 1 > kMaxPlantedFloats / (c.num_users + c.num_items)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recsys config: the planted model (", c.num_users, " users, ", c.num_items,
        " items, latent_dim ", c.latent_dim, ") exceeds ", kMaxPlantedFloats, " floats"));
  }
  if (c.num_train > kMaxSplitExamples || c.num_test > kMaxSplitExamples) {
    return absl::InvalidArgumentError(absl::StrCat("recsys config: num_train ", c.num_train,
                                                   " or num_test ", c.num_test, " exceeds ",
                                                   kMaxSplitExamples, " examples"));
  }
  return absl::OkStatus();
}

absl::StatusOr<PlantedRecsysModel> PlantedRecsysModel::Create(const RecsysConfig& config) {
  RETURN_IF_ERROR(ValidateRecsysConfig(config));
  PhiloxStream rng(config.model_seed, kModelStream);
  PlantedRecsysModel model;
  // The draw order (Pu, Qi, bu, bi; row-major) is part of the workload's definition.
  model.user_factors_ = NormalTensor(rng, Shape{config.num_users, config.latent_dim}, 1.0);
  model.item_factors_ = NormalTensor(rng, Shape{config.num_items, config.latent_dim}, 1.0);
  model.user_bias_ = NormalTensor(rng, Shape{config.num_users}, config.bias_stddev);
  model.item_bias_ = NormalTensor(rng, Shape{config.num_items}, config.bias_stddev);
  return model;
}

float PlantedRecsysModel::Logit(int64_t user, int64_t item) const {
  const int64_t k = latent_dim();
  const float* p = user_factors_.data() + user * k;
  const float* q = item_factors_.data() + item * k;
  float dot = 0;
  for (int64_t j = 0; j < k; ++j) dot += p[j] * q[j];
  return dot / std::sqrt(static_cast<float>(k)) + user_bias_.data()[user] + item_bias_.data()[item];
}

RecsysExamples DrawRecsysExamples(const PlantedRecsysModel& model, int64_t count, uint64_t seed,
                                  uint64_t stream) {
  RecsysExamples out;
  count = std::max<int64_t>(count, 0);
  out.users.resize(count);
  out.items.resize(count);
  out.labels.resize(count);
  out.logits.resize(count);
  PhiloxStream rng(seed, stream);
  for (int64_t e = 0; e < count; ++e) {
    const int64_t user = DrawHotId(rng, model.num_users());
    const int64_t item = DrawHotId(rng, model.num_items());
    const float logit = model.Logit(user, item);
    const double probability = 1.0 / (1.0 + std::exp(-static_cast<double>(logit)));
    out.users[e] = user;
    out.items[e] = item;
    out.logits[e] = logit;
    out.labels[e] = rng.Bernoulli(probability) ? 1.0f : 0.0f;
  }
  return out;
}

absl::StatusOr<RecsysData> GenerateRecsysData(const RecsysConfig& config) {
  ASSIGN_OR_RETURN(PlantedRecsysModel model, PlantedRecsysModel::Create(config));
  RecsysExamples train =
      DrawRecsysExamples(model, config.num_train, config.train_seed, kTrainStream);
  RecsysExamples test = DrawRecsysExamples(model, config.num_test, config.test_seed, kTestStream);
  RecsysData data;
  const absl::StatusOr<double> auc = Auc(test.logits, test.labels);
  data.bayes_auc = auc.ok() ? *auc : std::numeric_limits<double>::quiet_NaN();
  data.test_logits = std::move(test.logits);
  ASSIGN_OR_RETURN(data.train, MakeDataset(train));
  ASSIGN_OR_RETURN(data.test, MakeDataset(test));
  return data;
}

}  // namespace tessera
