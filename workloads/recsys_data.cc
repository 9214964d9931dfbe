#include "tessera/workloads/recsys_data.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/random.h"
#include "core/training/metrics.h"
#include "tessera/status.h"

namespace tessera {
namespace {

constexpr int64_t kMaxPlantedFloats = int64_t{1} << 30;
constexpr int64_t kMaxSplitExamples = int64_t{1} << 30;
// Philox streams: the model and each split draw from their own stream.
constexpr uint64_t kModelStream = 0;
constexpr uint64_t kTrainStream = 1;
constexpr uint64_t kTestStream = 2;
// Users' histories: user u's draws start at u * kHistoryDrawStride of this stream.
constexpr uint64_t kHistoryStream = 3;
constexpr int64_t kMaxHistoryLength = 64;
constexpr int64_t kHistoryCandidatesPerItem = 4;
constexpr uint64_t kHistoryDrawStride = 2 * kHistoryCandidatesPerItem * kMaxHistoryLength;

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

// Every example takes exactly this many 32-bit draws from its split's stream (three 53-bit
// uniforms: user, item, label), so example e starts at draw e * kDrawsPerExample and can be
// drawn alone.
constexpr uint64_t kDrawsPerExample = 6;

struct Example {
  int64_t user, item;
  float logit, label;
};

Example DrawExample(const PlantedRecsysModel& model, PhiloxStream& rng) {
  Example e;
  e.user = DrawHotId(rng, model.num_users());
  e.item = DrawHotId(rng, model.num_items());
  e.logit = model.Logit(e.user, e.item);
  const double probability = 1.0 / (1.0 + std::exp(-static_cast<double>(e.logit)));
  e.label = rng.Bernoulli(probability) ? 1.0f : 0.0f;
  return e;
}

// One split as an ExampleSource: example r drawn on demand from draw r * kDrawsPerExample of
// its stream — the same examples DrawRecsysExamples draws in sequence, never held in memory.
class RecsysSplit final : public ExampleSource {
 public:
  RecsysSplit(std::shared_ptr<const PlantedRecsysModel> model, int64_t count, uint64_t seed,
              uint64_t stream)
      : model_(std::move(model)), count_(count), seed_(seed), stream_(stream) {
    schema_.id_features = {kRecsysItemFeature, kRecsysUserFeature};
    if (model_->history_length() > 0) schema_.id_list_features = {kRecsysHistoryFeature};
  }

  int64_t size() const override { return count_; }
  const ExampleSchema& schema() const override { return schema_; }

  absl::StatusOr<Batch> Read(absl::Span<const int64_t> rows) const override {
    const int64_t n = static_cast<int64_t>(rows.size());
    Batch batch;
    batch.size = n;
    Ids& users = batch.ids[kRecsysUserFeature];
    Ids& items = batch.ids[kRecsysItemFeature];
    users.resize(n);
    items.resize(n);
    batch.labels = Tensor(Shape{n, 1});
    PhiloxStream rng(seed_, stream_);
    for (int64_t k = 0; k < n; ++k) {
      rng.Seek(static_cast<uint64_t>(rows[k]) * kDrawsPerExample);
      const Example e = DrawExample(*model_, rng);
      users[k] = e.user;
      items[k] = e.item;
      batch.labels.data()[k] = e.label;
    }
    if (!schema_.id_list_features.empty()) {
      IdList& history = batch.id_lists[kRecsysHistoryFeature];
      for (int64_t k = 0; k < n; ++k) {
        const std::vector<int64_t> items_liked = model_->History(users[k]);
        history.ids.insert(history.ids.end(), items_liked.begin(), items_liked.end());
        history.row_splits.push_back(static_cast<int64_t>(history.ids.size()));
      }
    }
    return batch;
  }

 private:
  std::shared_ptr<const PlantedRecsysModel> model_;
  int64_t count_;
  uint64_t seed_, stream_;
  ExampleSchema schema_;
};

}  // namespace

absl::Status ValidateRecsysConfig(const RecsysConfig& c) {
  auto at_least = [](int64_t value, int64_t min, absl::string_view name) -> absl::Status {
    if (value >= min) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("recsys config: ", name, " is ", value, ", must be >= ", min));
  };
  TESSERA_RETURN_IF_ERROR(at_least(c.num_users, 1, "num_users"));
  TESSERA_RETURN_IF_ERROR(at_least(c.num_items, 1, "num_items"));
  TESSERA_RETURN_IF_ERROR(at_least(c.latent_dim, 1, "latent_dim"));
  TESSERA_RETURN_IF_ERROR(at_least(c.num_train, 0, "num_train"));
  TESSERA_RETURN_IF_ERROR(at_least(c.num_test, 0, "num_test"));
  TESSERA_RETURN_IF_ERROR(at_least(c.history_length, 0, "history_length"));
  if (c.history_length > kMaxHistoryLength) {
    return absl::InvalidArgumentError(absl::StrCat("recsys config: history_length is ",
                                                   c.history_length, ", must be <= ",
                                                   kMaxHistoryLength));
  }
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
  TESSERA_RETURN_IF_ERROR(ValidateRecsysConfig(config));
  PhiloxStream rng(config.model_seed, kModelStream);
  PlantedRecsysModel model;
  // The draw order (Pu, Qi, bu, bi; row-major) is part of the workload's definition.
  model.user_factors_ = NormalTensor(rng, Shape{config.num_users, config.latent_dim}, 1.0);
  model.item_factors_ = NormalTensor(rng, Shape{config.num_items, config.latent_dim}, 1.0);
  model.user_bias_ = NormalTensor(rng, Shape{config.num_users}, config.bias_stddev);
  model.item_bias_ = NormalTensor(rng, Shape{config.num_items}, config.bias_stddev);
  model.seed_ = config.model_seed;
  model.history_length_ = config.history_length;
  return model;
}

float PlantedRecsysModel::Affinity(int64_t user, int64_t item) const {
  const int64_t k = latent_dim();
  const float* p = user_factors_.data() + user * k;
  const float* q = item_factors_.data() + item * k;
  float dot = 0;
  for (int64_t j = 0; j < k; ++j) dot += p[j] * q[j];
  return dot / std::sqrt(static_cast<float>(k));
}

float PlantedRecsysModel::Logit(int64_t user, int64_t item) const {
  return Affinity(user, item) + user_bias_.data()[user] + item_bias_.data()[item];
}

std::vector<int64_t> PlantedRecsysModel::History(int64_t user) const {
  if (history_length_ == 0) return {};
  PhiloxStream rng(seed_, kHistoryStream);
  rng.Seek(static_cast<uint64_t>(user) * kHistoryDrawStride);
  std::vector<std::pair<float, int64_t>> candidates;
  for (int64_t c = 0; c < kHistoryCandidatesPerItem * history_length_; ++c) {
    const int64_t item = DrawHotId(rng, num_items());
    candidates.emplace_back(-Affinity(user, item), item);
  }
  // Best first; ties (the same item drawn twice) by id, so the order is platform-independent.
  std::sort(candidates.begin(), candidates.end());
  std::vector<int64_t> history;
  for (const auto& [negative_logit, item] : candidates) {
    if (static_cast<int64_t>(history.size()) == history_length_) break;
    if (std::find(history.begin(), history.end(), item) == history.end()) history.push_back(item);
  }
  return history;
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
    const Example example = DrawExample(model, rng);
    out.users[e] = example.user;
    out.items[e] = example.item;
    out.logits[e] = example.logit;
    out.labels[e] = example.label;
  }
  return out;
}

absl::StatusOr<RecsysData> GenerateRecsysData(const RecsysConfig& config) {
  TESSERA_ASSIGN_OR_RETURN(PlantedRecsysModel planted, PlantedRecsysModel::Create(config));
  auto model = std::make_shared<const PlantedRecsysModel>(std::move(planted));
  // The Bayes-optimal AUC needs the test split's planted logits: drawn once here (a few bytes
  // per example), while the splits themselves are drawn batch by batch by whoever reads them.
  RecsysExamples test = DrawRecsysExamples(*model, config.num_test, config.test_seed, kTestStream);
  RecsysData data;
  const absl::StatusOr<double> auc = Auc(test.logits, test.labels);
  data.bayes_auc = auc.ok() ? *auc : std::numeric_limits<double>::quiet_NaN();
  data.test_logits = std::move(test.logits);
  TESSERA_ASSIGN_OR_RETURN(data.train,
                           Dataset::FromSource(std::make_shared<RecsysSplit>(
                               model, config.num_train, config.train_seed, kTrainStream)));
  TESSERA_ASSIGN_OR_RETURN(data.test, Dataset::FromSource(std::make_shared<RecsysSplit>(
                                          model, config.num_test, config.test_seed, kTestStream)));
  return data;
}

}  // namespace tessera
