// PlantedCriteoModel (criteo_data.h): the Criteo feature layout and the planted model the
// generator draws its examples from (Note [The planted Criteo model] below), and an example's
// TSV line. criteo_data.cc writes the data set.
#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/base/hash.h"
#include "core/base/random.h"
#include "workloads/criteo_data.h"

namespace tessera {

// Note [The planted Criteo model]
// The model is built for a DLRM to have something to find at every level, and for its best
// possible AUC to be known:
//   - the integer features enter as log1p(I), the transform a DLRM applies to its dense input,
//     so the bottom MLP can represent the dense term exactly;
//   - every categorical value has its own effect u (a per-value bias an embedding can learn
//     given enough examples of the value: the hot values, not the long tail of the 1M-value
//     features, which stays out of reach as in real logs);
//   - six mid-sized features (C1, C2, C5, C7, C11, C13) carry latent vectors whose pairwise dot
//     products add to the logit: the term a DLRM's dot interaction is made for, and which no sum
//     of per-feature effects can express.
// Each term's spread is fixed by scaling it to a target standard deviation measured on a
// calibration sample (stream 0 of the seed), and the bias is solved so that the mean click
// probability is kBaseCtr: changing a vocabulary or a power law keeps the CTR and the difficulty.
// The spreads (0.4, 0.9, 0.8: a logit of standard deviation ~1.3) give a Bayes AUC near 0.79,
// about what the best published models reach on the real logs; a DLRM trained for one pass, with
// the 1M-value features hashed into fewer rows, stays below it.
namespace {

constexpr double kBaseCtr = 0.25;
constexpr double kDenseStddev = 0.4;
constexpr double kCategoricalStddev = 0.9;
constexpr double kInteractionStddev = 0.8;
constexpr int64_t kCalibrationExamples = 20'000;
constexpr int kLatentDim = 4;
constexpr std::array<int, 6> kInteractionFeatures = {0, 1, 4, 6, 10, 12};
// Philox streams of one seed: this one calibrates the model; the train and test splits are
// streams 1 and 2 (criteo_data.cc).
constexpr uint64_t kCalibrationStream = 0;
// A value's hash slots: its name, its effect, then its latent vector.
constexpr uint64_t kNameSlot = 0;
constexpr uint64_t kEffectSlot = 1;
constexpr uint64_t kLatentSlot = 2;

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;  // 2^64 / the golden ratio, odd

// Missing rates, spreads and vocabularies after the Criteo Kaggle training set's (the four
// vocabularies over 1M there are capped at 1M, which keeps a data set of a few million lines
// from being mostly unique values).
// I1 .. I13: {log_mean, log_stddev, missing_rate}.
constexpr std::array<CriteoIntegerFeature, kCriteoIntegerFeatures> kIntegerFeatures = {{
    {0.5, 1.2, 0.45},
    {1.5, 1.8, 0.0},
    {2.0, 1.4, 0.21},
    {1.8, 1.0, 0.22},
    {7.5, 1.8, 0.026},
    {3.5, 1.6, 0.22},
    {1.5, 1.5, 0.04},
    {2.5, 1.0, 0.0005},
    {3.5, 1.3, 0.04},
    {0.0, 0.8, 0.45},
    {0.8, 1.0, 0.04},
    {0.0, 1.0, 0.76},
    {1.8, 1.0, 0.22},
}};
// C1 .. C26, four a row: {vocabulary, zipf_power, missing_rate}.
constexpr std::array<CriteoCategoricalFeature, kCriteoCategoricalFeatures> kCategoricalFeatures = {{
    {1460, 3, 0.0},     {583, 3, 0.0},     {1000000, 6, 0.034}, {600000, 6, 0.034},
    {305, 2, 0.0},      {24, 2, 0.0},      {12517, 4, 0.0},     {633, 3, 0.0},
    {3, 2, 0.0},        {93145, 5, 0.0},   {5683, 4, 0.0},      {1000000, 6, 0.034},
    {3194, 4, 0.0},     {27, 2, 0.0},      {14992, 4, 0.0},     {800000, 6, 0.034},
    {10, 2, 0.0},       {5652, 4, 0.0},    {2173, 3, 0.44},     {4, 2, 0.44},
    {900000, 6, 0.034}, {18, 2, 0.76},     {15, 2, 0.0},        {286181, 5, 0.034},
    {105, 2, 0.44},     {142572, 5, 0.44},
}};

// N(0, 1), approximately, from 64 random bits: the sum of four 16-bit uniforms (Irwin-Hall),
// rescaled to unit variance. Bounded by +-2 sqrt(3), and a few multiplies instead of a log and a
// cosine: the generator computes ~40 of these per line.
double ApproxNormal(uint64_t bits) {
  const uint64_t sum =
      (bits & 0xffff) + (bits >> 16 & 0xffff) + (bits >> 32 & 0xffff) + (bits >> 48);
  constexpr double kSqrt3 = 1.7320508075688772;
  return ((static_cast<double>(sum) + 2.0) * (1.0 / 65536.0) - 2.0) * kSqrt3;
}

// 32 random bits as a probability threshold: a draw `bits < Threshold(p)` happens with
// probability p (to 2^-32).
uint32_t Threshold(double p) {
  return static_cast<uint32_t>(std::min(p * 4294967296.0, 4294967295.0));
}

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct Moments {
  double sum = 0, sum_squares = 0;
  int64_t n = 0;
  void Add(double x) {
    sum += x;
    sum_squares += x * x;
    ++n;
  }
  double Stddev() const {
    const double mean = sum / n;
    return std::sqrt(std::max(0.0, sum_squares / n - mean * mean));
  }
};

// The scale bringing a term of standard deviation `measured` to `target` (1 for a term that
// does not vary, which then contributes a constant the bias absorbs).
double ScaleTo(double target, double measured) { return measured > 0 ? target / measured : 1.0; }

char* AppendUnsigned(char* p, uint64_t value) { return std::to_chars(p, p + 20, value).ptr; }

// log1p(value) for the small values most integer fields hold, looked up: std::log1p was an
// eighth of the generator's time.
class Log1pTable {
 public:
  Log1pTable() {
    for (int i = 0; i < kSize; ++i) table_[i] = std::log1p(static_cast<double>(i));
  }
  double operator()(int64_t value) const {
    return value < kSize ? table_[value] : std::log1p(static_cast<double>(value));
  }

 private:
  static constexpr int kSize = 4096;
  std::array<double, kSize> table_;
};

// The two lowercase hex digits of every byte.
class HexTable {
 public:
  HexTable() {
    static constexpr char kDigits[] = "0123456789abcdef";
    for (int i = 0; i < 256; ++i) {
      pairs_[2 * i] = kDigits[i >> 4];
      pairs_[2 * i + 1] = kDigits[i & 0xf];
    }
  }
  char* Append8(char* p, uint32_t value) const {
    for (int i = 3; i >= 0; --i) {
      std::memcpy(p + 2 * i, &pairs_[2 * (value & 0xff)], 2);
      value >>= 8;
    }
    return p + 8;
  }

 private:
  std::array<char, 512> pairs_;
};

const Log1pTable& Log1p() {
  static const Log1pTable* table = new Log1pTable();
  return *table;
}

const HexTable& Hex() {
  static const HexTable* table = new HexTable();
  return *table;
}

}  // namespace

const std::array<CriteoIntegerFeature, kCriteoIntegerFeatures>& CriteoIntegerFeatures() {
  return kIntegerFeatures;
}

const std::array<CriteoCategoricalFeature, kCriteoCategoricalFeatures>&
CriteoCategoricalFeatures() {
  return kCategoricalFeatures;
}

uint64_t PlantedCriteoModel::ValueBits(int feature, int64_t value, uint64_t slot) const {
  // Distinct (value, slot) pairs give distinct multiples of the odd constant (values and slots
  // stay far below 2^61), so one finalizer over the keyed product is enough.
  return Mix64(feature_keys_[feature] ^ (static_cast<uint64_t>(value) << 3 | slot) * kGolden);
}

uint32_t PlantedCriteoModel::CategoryHash(int feature, int64_t value) const {
  return static_cast<uint32_t>(ValueBits(feature, value, kNameSlot));
}

PlantedCriteoModel PlantedCriteoModel::Create(uint64_t seed) {
  PlantedCriteoModel model;
  const uint64_t seed_key = Mix64(seed ^ 0x43524954454f3031ULL);  // "CRITEO01"
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    model.feature_keys_[k] = Mix64(seed_key + (k + 1) * kGolden);
    // Some features matter more than others: weights log-normal around 1.
    model.category_weights_[k] = std::exp(0.5 * ApproxNormal(Mix64(model.feature_keys_[k] + 1)));
  }
  for (int k = 0; k < kCriteoIntegerFeatures; ++k) {
    model.dense_weights_[k] = ApproxNormal(Mix64(seed_key + (k + 101) * kGolden));
  }
  // Calibration: the terms' spreads and the click rate on a sample of the unscaled model.
  PhiloxStream rng(seed, kCalibrationStream);
  std::vector<Terms> sample(kCalibrationExamples);
  Moments dense, categorical, interaction;
  CriteoExample example;
  for (Terms& terms : sample) {
    terms = model.DrawFeatures(rng, example);
    rng();  // the label's draws
    rng();
    dense.Add(terms.dense);
    categorical.Add(terms.categorical);
    interaction.Add(terms.interaction);
  }
  model.dense_scale_ = ScaleTo(kDenseStddev, dense.Stddev());
  model.categorical_scale_ = ScaleTo(kCategoricalStddev, categorical.Stddev());
  model.interaction_scale_ = ScaleTo(kInteractionStddev, interaction.Stddev());
  std::vector<double> logits;
  logits.reserve(sample.size());
  for (const Terms& t : sample) {
    logits.push_back(model.dense_scale_ * t.dense + model.categorical_scale_ * t.categorical +
                     model.interaction_scale_ * t.interaction);
  }
  // The mean probability grows with the bias: bisect for kBaseCtr.
  double low = -30, high = 30;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (low + high);
    double sum = 0;
    for (const double z : logits) sum += Sigmoid(mid + z);
    (sum / logits.size() < kBaseCtr ? low : high) = mid;
  }
  model.bias_ = 0.5 * (low + high);
  return model;
}

PlantedCriteoModel::Terms PlantedCriteoModel::DrawFeatures(PhiloxStream& rng,
                                                           CriteoExample& example) const {
  Terms terms;
  const Log1pTable& log1p = Log1p();
  for (int k = 0; k < kCriteoIntegerFeatures; ++k) {
    const CriteoIntegerFeature& f = kIntegerFeatures[k];
    const uint32_t missing = rng();
    const uint64_t high = rng();
    const uint64_t bits = high << 32 | rng();
    if (missing < Threshold(f.missing_rate)) {
      example.integers[k] = -1;
      continue;
    }
    // At most exp(7.5 + 1.8 * 2 sqrt(3)) ~ 9e5: no overflow.
    const int64_t value =
        static_cast<int64_t>(std::exp(f.log_mean + f.log_stddev * ApproxNormal(bits)));
    example.integers[k] = value;
    terms.dense += dense_weights_[k] * log1p(value);
  }
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    const CriteoCategoricalFeature& f = kCategoricalFeatures[k];
    const uint32_t missing = rng();
    const double u = rng() * (1.0 / 4294967296.0);
    double power = u;
    for (int i = 1; i < f.zipf_power; ++i) power *= u;
    const bool is_missing = missing < Threshold(f.missing_rate);
    // A missing value has parameters of its own, under value index V.
    const int64_t value =
        is_missing ? f.vocabulary
                   : std::min(f.vocabulary - 1, static_cast<int64_t>(f.vocabulary * power));
    example.categories[k] = is_missing ? -1 : value;
    terms.categorical += category_weights_[k] * ApproxNormal(ValueBits(k, value, kEffectSlot));
  }
  std::array<std::array<double, kLatentDim>, kInteractionFeatures.size()> latent;
  for (size_t i = 0; i < kInteractionFeatures.size(); ++i) {
    const int k = kInteractionFeatures[i];
    const int64_t value =
        example.categories[k] < 0 ? kCategoricalFeatures[k].vocabulary : example.categories[k];
    for (int d = 0; d < kLatentDim; ++d) {
      latent[i][d] = ApproxNormal(ValueBits(k, value, kLatentSlot + d));
    }
  }
  for (size_t a = 0; a < latent.size(); ++a) {
    for (size_t b = a + 1; b < latent.size(); ++b) {
      double dot = 0;
      for (int d = 0; d < kLatentDim; ++d) dot += latent[a][d] * latent[b][d];
      terms.interaction += 0.5 * dot;
    }
  }
  return terms;
}

CriteoExample PlantedCriteoModel::Draw(PhiloxStream& rng) const {
  CriteoExample example;
  const Terms terms = DrawFeatures(rng, example);
  example.logit = bias_ + dense_scale_ * terms.dense + categorical_scale_ * terms.categorical +
                  interaction_scale_ * terms.interaction;
  example.label = rng.Bernoulli(Sigmoid(example.logit)) ? 1 : 0;
  return example;
}

void PlantedCriteoModel::AppendLine(const CriteoExample& example, std::string& out) const {
  // The longest line: 1 + 13 * (20 + 1) + 26 * (8 + 1) + 1 bytes.
  char line[512];
  char* p = line;
  const HexTable& hex = Hex();
  *p++ = example.label ? '1' : '0';
  for (int k = 0; k < kCriteoIntegerFeatures; ++k) {
    *p++ = '\t';
    if (example.integers[k] >= 0) p = AppendUnsigned(p, static_cast<uint64_t>(example.integers[k]));
  }
  for (int k = 0; k < kCriteoCategoricalFeatures; ++k) {
    *p++ = '\t';
    if (example.categories[k] >= 0) p = hex.Append8(p, CategoryHash(k, example.categories[k]));
  }
  *p++ = '\n';
  out.append(line, p);
}

}  // namespace tessera
