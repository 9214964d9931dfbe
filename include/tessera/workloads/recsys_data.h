// The synthetic recsys workload (docs/design.md §5): clicks drawn from a planted model.
//
// The planted model: latent factors Pu[u], Qi[i] ~ N(0, 1)^k (k = latent_dim, 8 by default) and
// biases bu[u], bi[i] ~ N(0, bias_stddev^2), where bias_stddev = 0.5 is the standard deviation
// (the "N(0, 0.5)" of docs/design.md §5). An example draws
//   user = floor(U * x^3), item = floor(I * x'^3), x, x' ~ U(0, 1)   (low ids are hot: P(user <
//                                                                     U/8) = P(x < 1/2) = 1/2)
//   logit = Pu[user] . Qi[item] / sqrt(k) + bu[user] + bi[item]
//   label ~ Bernoulli(sigmoid(logit)).
// The planted logit is the Bayes-optimal score, so its test AUC (about 0.77) bounds what any
// model can reach.
//
// Randomness is Philox (core/base/random.h), identical on every platform: the model is a function
// of model_seed, each split of its own seed and stream, so the train and test splits are
// independent draws from one distribution even when their seeds are equal.
//
// Thread-safety: PlantedRecsysModel is immutable after Create (safe to share); the functions are
// pure.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tessera/data.h"
#include "tessera/tensor.h"

namespace tessera {

// The id features of a recsys Dataset (one int64 id per example each).
inline constexpr char kRecsysUserFeature[] = "user";
inline constexpr char kRecsysItemFeature[] = "item";
// The id-list feature of a recsys Dataset made with history_length > 0: the user's history.
inline constexpr char kRecsysHistoryFeature[] = "history";

struct RecsysConfig {
  int64_t num_users = 100000;  // U
  int64_t num_items = 10000;   // I
  int64_t latent_dim = 8;      // k
  double bias_stddev = 0.5;    // standard deviation of bu and bi
  int64_t num_train = 1000000;
  int64_t num_test = 100000;
  uint64_t model_seed = 1;
  uint64_t train_seed = 2;
  uint64_t test_seed = 3;
  // When > 0, each example also carries the user's history (kRecsysHistoryFeature): the
  // history_length items that suit the user's taste best (by Affinity: the planted logit without
  // the biases, which are the same for every user) among 4 * history_length items drawn for that
  // user alone (hot ones likelier). A function of the user and model_seed only, so
  // a user has the same history in every example and split: a multi-hot feature through which a
  // model learns a rare user's taste from the items' embeddings. At most 64.
  int64_t history_length = 0;
};

// InvalidArgument naming the field when a size is < 1 (num_users, num_items, latent_dim) or < 0
// (num_train, num_test), history_length is outside [0, 64], bias_stddev is negative or not finite,
// the planted model would exceed 2^30 floats, or a split 2^30 examples.
absl::Status ValidateRecsysConfig(const RecsysConfig& config);

class PlantedRecsysModel {
 public:
  // Draws the model from config.model_seed (only the model fields of config matter).
  // InvalidArgument as ValidateRecsysConfig.
  static absl::StatusOr<PlantedRecsysModel> Create(const RecsysConfig& config);

  int64_t num_users() const { return user_factors_.rows(); }
  int64_t num_items() const { return item_factors_.rows(); }
  int64_t latent_dim() const { return user_factors_.row_size(); }
  int64_t history_length() const { return history_length_; }
  const Tensor& user_factors() const { return user_factors_; }  // Pu: [U, k]
  const Tensor& item_factors() const { return item_factors_; }  // Qi: [I, k]
  const Tensor& user_bias() const { return user_bias_; }        // bu: [U]
  const Tensor& item_bias() const { return item_bias_; }        // bi: [I]

  // Pu[user] . Qi[item] / sqrt(k) + bu[user] + bi[item]; the caller guarantees
  // 0 <= user < num_users() and 0 <= item < num_items().
  float Logit(int64_t user, int64_t item) const;
  // The taste part of the logit alone: Pu[user] . Qi[item] / sqrt(k).
  float Affinity(int64_t user, int64_t item) const;
  // The user's history (RecsysConfig::history_length items, best first); empty when that is 0.
  std::vector<int64_t> History(int64_t user) const;

 private:
  PlantedRecsysModel() = default;

  uint64_t seed_ = 0;
  int64_t history_length_ = 0;
  Tensor user_factors_, item_factors_, user_bias_, item_bias_;
};

// One split's examples as columns.
struct RecsysExamples {
  Ids users;
  Ids items;
  std::vector<float> labels;  // 0 or 1
  std::vector<float> logits;  // the planted logit of each example
};

// Draws `count` examples (count >= 0) from PhiloxStream(seed, stream); a pure function of its
// arguments.
RecsysExamples DrawRecsysExamples(const PlantedRecsysModel& model, int64_t count, uint64_t seed,
                                  uint64_t stream);

struct RecsysData {
  // Id features kRecsysUserFeature and kRecsysItemFeature, labels [n, 1] of 0/1: the examples
  // DrawRecsysExamples draws, each drawn on demand when a batch reads it (so a worker draws only
  // the batches it trains on, and holds no split in memory).
  Dataset train;
  Dataset test;
  // The planted logit of each test example, in the test Dataset's order.
  std::vector<float> test_logits;
  // The exact AUC of test_logits against the test labels (about 0.77 at the defaults); NaN when
  // the test split lacks a class (e.g. num_test = 0).
  double bayes_auc = 0;
};

// The planted model and both splits: train from (train_seed, stream 1), test from
// (test_seed, stream 2). InvalidArgument as ValidateRecsysConfig. About 0.1 s at the defaults.
absl::StatusOr<RecsysData> GenerateRecsysData(const RecsysConfig& config);

}  // namespace tessera
