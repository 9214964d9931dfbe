// Criteo-layout click logs drawn from a planted model: files a reader of the Criteo Display
// Advertising data (Kaggle's train.txt) takes as they are, with a known best possible AUC.
//
// Each line is `label \t I1 .. I13 \t C1 .. C26 \n`: the label 0 or 1, thirteen integer features
// (non-negative counts, heavy-tailed: floor(exp(N(mu, sigma^2)))) and twenty-six categorical ones
// (8 lowercase hex characters naming a value; the same value is always the same string). Any
// field may be empty (missing) at a per-feature rate. Categorical feature k has a vocabulary of
// V_k values (from 3 to 1M, the spread of real Criteo's) and draws value floor(V_k * u^p_k),
// u ~ U(0, 1): a power law in which value 0 is the hottest.
//
// The planted model (Note [The planted Criteo model] in planted_criteo_model.cc):
//   logit = bias + s_d * sum_k w_k * log1p(I_k)                    (missing I_k counts as 0)
//                + s_c * sum_k a_k * u_k[C_k]                       (every value its own effect)
//                + s_i * sum_{a<b in P} <v_a[C_a], v_b[C_b]> / 2    (latent vectors of dim 4 of
//                                                                    six features P)
//   label ~ Bernoulli(sigmoid(logit)).
// s_d, s_c, s_i and the bias are calibrated on a sample so that the three terms have fixed
// spreads and the mean click probability is 0.25; the Bayes-optimal test AUC comes out near
// 0.79. A value's parameters (u, v and its hex string) are hashes of (seed, feature, value),
// computed when an example needs them: a vocabulary of a million values costs no memory.
//
// Example:
//   CriteoDataConfig config;
//   config.num_train = 2'000'000;
//   config.num_test = 200'000;
//   config.output_prefix = "/tmp/criteo";  // /tmp/criteo.train.tsv, .test.tsv, .json
//   TESSERA_ASSIGN_OR_RETURN(CriteoDataSummary summary, WriteCriteoData(config, Env::Default()));
//
// Randomness is Philox (core/base/random.h): the files are a pure function of the seed and the
// sizes, byte for byte on every platform; the train and test splits are independent draws
// (streams 1 and 2) from one distribution.
//
// Thread-safety: PlantedCriteoModel is immutable after Create (safe to share); WriteCriteoData
// may run concurrently on different prefixes.
#pragma once

#include <array>
#include <cstdint>
#include <ostream>
#include <string>

#include "absl/status/statusor.h"
#include "core/base/random.h"
#include "tessera/env.h"

namespace tessera {

inline constexpr int kCriteoIntegerFeatures = 13;
inline constexpr int kCriteoCategoricalFeatures = 26;

struct CriteoIntegerFeature {
  double log_mean;    // mu: the value is floor(exp(mu + sigma * z)), z ~ N(0, 1)
  double log_stddev;  // sigma
  double missing_rate;
};

struct CriteoCategoricalFeature {
  int64_t vocabulary;  // V: values 0 .. V-1
  int zipf_power;      // p: value floor(V * u^p); P(value 0) = V^(-1/p)
  double missing_rate;
};

// The fixed layout of the features, I1..I13 and C1..C26 in order.
const std::array<CriteoIntegerFeature, kCriteoIntegerFeatures>& CriteoIntegerFeatures();
const std::array<CriteoCategoricalFeature, kCriteoCategoricalFeatures>& CriteoCategoricalFeatures();

// One example of the planted model.
struct CriteoExample {
  std::array<int64_t, kCriteoIntegerFeatures> integers;        // -1: missing
  std::array<int64_t, kCriteoCategoricalFeatures> categories;  // value index; -1: missing
  double logit = 0;                                            // the planted logit
  int label = 0;
};

class PlantedCriteoModel {
 public:
  // Draws the model's parameters from `seed` and calibrates its scales and bias on 20,000
  // examples of its own stream (about 30 ms).
  static PlantedCriteoModel Create(uint64_t seed);

  // The next example of `rng`, which advances by exactly kDrawsPerExample draws (so example i
  // of a stream can be drawn alone after rng.Seek(i * kDrawsPerExample)).
  CriteoExample Draw(PhiloxStream& rng) const;
  static constexpr uint64_t kDrawsPerExample =
      3 * kCriteoIntegerFeatures + 2 * kCriteoCategoricalFeatures + 2;

  // The 32 bits whose 8 hex digits name value `value` of categorical feature `feature`
  // (0-based); the caller guarantees 0 <= value < the feature's vocabulary.
  uint32_t CategoryHash(int feature, int64_t value) const;

  // Appends `example` as one TSV line, '\n' included.
  void AppendLine(const CriteoExample& example, std::string& out) const;

  double bias() const { return bias_; }

 private:
  struct Terms {
    double dense = 0, categorical = 0, interaction = 0;
  };
  PlantedCriteoModel() = default;
  // Draws the features of one example (all but the label's two draws) and its three terms.
  Terms DrawFeatures(PhiloxStream& rng, CriteoExample& example) const;
  uint64_t ValueBits(int feature, int64_t value, uint64_t slot) const;

  std::array<uint64_t, kCriteoCategoricalFeatures> feature_keys_{};
  std::array<double, kCriteoIntegerFeatures> dense_weights_{};
  std::array<double, kCriteoCategoricalFeatures> category_weights_{};
  double dense_scale_ = 1, categorical_scale_ = 1, interaction_scale_ = 1, bias_ = 0;
};

struct CriteoDataConfig {
  int64_t num_train = 2'000'000;
  int64_t num_test = 200'000;
  // Writes PREFIX.train.tsv and PREFIX.test.tsv (with .gz appended when gzip) and PREFIX.json;
  // PREFIX's directory is created when missing.
  std::string output_prefix;
  // gzip (deflate at zlib's fastest level: the files are meant to be read back soon, and the
  // fastest level keeps the writer near its plain speed).
  bool gzip = false;
  uint64_t seed = 1;
  // A line on this stream every few seconds of a long run (nullptr: silent).
  std::ostream* progress = nullptr;
};

// What WriteCriteoData wrote; the same figures are in the JSON sidecar.
struct CriteoDataSummary {
  std::string train_path, test_path, sidecar_path;
  int64_t train_examples = 0, test_examples = 0;
  int64_t train_positives = 0, test_positives = 0;
  double planted_ctr = 0;     // mean planted click probability over the test examples
  double bayes_auc = 0;       // the AUC of the planted logits on the test examples; NaN without
                              // both classes
  double bayes_log_loss = 0;  // the log-loss of the planted probabilities there; NaN when empty
  double seconds = 0;         // wall time, by the Env's clock
};

// Writes the train and test files and the sidecar PREFIX.json (counts, seed, click rates, the
// Bayes-optimal test AUC and log-loss, the feature layout), streaming: memory is a buffer plus
// 4 bytes per test example. Each data file is written under a temporary name and renamed when
// complete, and the sidecar last, so a sidecar means a complete data set. InvalidArgument for an
// empty output_prefix or a size < 0 (or num_test > 2^27); the Env's errors otherwise (NotFound,
// PermissionDenied, ResourceExhausted for a full disk, ...), naming the path.
absl::StatusOr<CriteoDataSummary> WriteCriteoData(const CriteoDataConfig& config, Env* env);

}  // namespace tessera
